#include "harness/child.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace spikehunt {

namespace {

using Clock = std::chrono::steady_clock;

struct Running {
  size_t index;
  pid_t pid;
  Clock::time_point start;
  bool killed = false;  // by us, for the timeout
};

pid_t spawn(const ChildSpec& spec) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  const char* log = spec.log_path.empty() ? "/dev/null" : spec.log_path.c_str();
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + spec.argv[0] + ": " + std::strerror(rc));
  return pid;
}

}  // namespace

std::string ChildExit::describe() const {
  char buf[96];
  if (timed_out) std::snprintf(buf, sizeof buf, "timeout after %.0f s", wall_seconds);
  else if (signal != 0) std::snprintf(buf, sizeof buf, "signal %d (%s)", signal, strsignal(signal));
  else std::snprintf(buf, sizeof buf, "exit %d", exit_code);
  return buf;
}

std::string self_executable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  return std::string(buf, size_t(n));
}

void run_children(const std::vector<ChildSpec>& specs, int parallel,
                  const std::function<void(size_t, const ChildExit&)>& on_exit,
                  const std::function<bool()>& stop_starting) {
  parallel = std::max(parallel, 1);
  std::vector<Running> running;
  size_t next = 0;
  while (next < specs.size() || !running.empty()) {
    if (stop_starting && next < specs.size() && stop_starting()) next = specs.size();
    while (next < specs.size() && int(running.size()) < parallel) {
      running.push_back({next, spawn(specs[next]), Clock::now()});
      ++next;
    }
    bool reaped = false;
    for (size_t i = 0; i < running.size();) {
      Running& r = running[i];
      const double age = std::chrono::duration<double>(Clock::now() - r.start).count();
      const double timeout = specs[r.index].timeout_seconds;
      if (timeout > 0 && age > timeout && !r.killed) {
        ::kill(r.pid, SIGKILL);
        r.killed = true;
      }
      int status = 0;
      const pid_t got = ::waitpid(r.pid, &status, WNOHANG);
      if (got == 0) {
        ++i;
        continue;
      }
      ChildExit e;
      e.wall_seconds = age;
      if (got < 0) {
        e.exit_code = -1;
      } else if (WIFEXITED(status)) {
        e.exit_code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        e.signal = WTERMSIG(status);
        e.timed_out = r.killed;
      }
      const size_t index = r.index;
      running.erase(running.begin() + long(i));
      on_exit(index, e);
      reaped = true;
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string tail_of(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff start = size > std::streamoff(max_bytes) ? size - std::streamoff(max_bytes) : 0;
  in.seekg(start);
  std::string s(size_t(size - start), '\0');
  in.read(s.data(), std::streamsize(s.size()));
  return s;
}

namespace {

std::string& invoked_as() {
  static std::string name;
  return name;
}

}  // namespace

void set_invoked_as(const std::string& argv0) { invoked_as() = argv0; }

std::string program_name() {
  if (!invoked_as().empty()) return invoked_as();
  const std::string path = self_executable();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace spikehunt
