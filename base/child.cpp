#include "base/child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <optional>
#include <iostream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace spikehunt {

namespace {

using Clock = std::chrono::steady_clock;

pid_t spawn(const ChildSpec& spec) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  const char* log = spec.log_path.empty() ? "/dev/null" : spec.log_path.c_str();
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> args = command_of(spec.argv.front());
  args.insert(args.end(), spec.argv.begin() + 1, spec.argv.end());
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + spec.argv[0] + ": " + std::strerror(rc));
  return pid;
}

// Whether a process is stopped (state T or t in /proc/PID/stat).
bool process_stopped(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // the command name may hold spaces and parentheses
  return paren != nullptr && paren[1] == ' ' && (paren[2] == 'T' || paren[2] == 't');
}

// A gap this long between the pool's looks at its children means the pool itself was stopped.
constexpr double kPoolStoppedGap = 1.0;

}  // namespace

std::string ChildExit::describe() const {
  char buf[96];
  if (timed_out && stopped_seconds >= 1) {
    std::snprintf(buf, sizeof buf, "timeout after %.0f s of running (%.0f s stopped not counted)",
                  wall_seconds - stopped_seconds, stopped_seconds);
  } else if (timed_out) {
    std::snprintf(buf, sizeof buf, "timeout after %.0f s", wall_seconds);
  }
  else if (signal != 0) std::snprintf(buf, sizeof buf, "signal %d (%s)", signal, strsignal(signal));
  else std::snprintf(buf, sizeof buf, "exit %d", exit_code);
  return buf;
}

void run_children(const std::vector<ChildSpec>& specs, int parallel,
                  const std::function<void(size_t, const ChildExit&)>& on_exit,
                  const std::function<bool()>& stop_starting) {
  PoolOptions process_per_job;
  process_per_job.persistent = false;
  ChildPool(process_per_job).run(specs, parallel, on_exit, stop_starting);
}

// ---- persistent workers ----

struct ChildPool::Worker {
  pid_t pid = 0;
  int fd = -1;          // our end of the socket (the worker's fd 3)
  std::string program;  // argv[0] it was started as
  int64_t jobs = 0;
  std::string reply;    // bytes of the answer read so far
};

namespace {

constexpr int kWorkerFd = 3;

// The job's line: log path and argv[1..], tab-separated; false when an
// argument holds a tab or a newline (that job runs as a process of its own).
bool job_line(const ChildSpec& spec, std::string* line) {
  *line = spec.log_path.empty() ? "/dev/null" : spec.log_path;
  for (size_t i = 1; i < spec.argv.size(); ++i) *line += "\t" + spec.argv[i];
  if (line->find('\n') != std::string::npos) return false;
  for (const std::string& a : spec.argv) {
    if (a.find('\t') != std::string::npos) return false;
  }
  *line += "\n";
  return true;
}

// Resident memory of a process in MiB (0 when it cannot be read).
int64_t rss_mb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/statm");
  int64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * int64_t(::sysconf(_SC_PAGESIZE)) / (1 << 20);
}

// The first job's log takes the worker's own output until its first job
// starts, so a program that cannot be a worker says why in that job's log.
ChildPool::Worker start_worker(const std::string& program, const std::string& log_path) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw std::runtime_error(std::string("cannot make a worker's socket: ") + std::strerror(errno));
  }
  // Above 3, so the dup2 onto fd 3 always clears close-on-exec.
  const int theirs = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  ::close(sv[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  const char* log = log_path.empty() ? "/dev/null" : log_path.c_str();
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_adddup2(&actions, theirs, kWorkerFd);
  std::vector<std::string> args = command_of(program);
  args.push_back("worker");
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(theirs);
  if (rc != 0) {
    ::close(sv[0]);
    throw std::runtime_error("cannot start " + program + ": " + std::strerror(rc));
  }
  ::fcntl(sv[0], F_SETFL, ::fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  ChildPool::Worker w;
  w.pid = pid;
  w.fd = sv[0];
  w.program = program;
  return w;
}

// Closes the socket (an idle worker then exits) and reaps it; SIGKILL after 5 s.
void end_worker(ChildPool::Worker& w) {
  if (w.fd >= 0) ::close(w.fd);
  w.fd = -1;
  for (int i = 0; i < 500; ++i) {
    if (::waitpid(w.pid, nullptr, WNOHANG) != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(w.pid, SIGKILL);
  ::waitpid(w.pid, nullptr, 0);
}

void fill_exit(int status, ChildExit* e) {
  if (WIFEXITED(status)) {
    e->exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e->signal = WTERMSIG(status);
  }
}

}  // namespace

ChildPool::ChildPool(PoolOptions options) : options_(options) {
  options_.jobs_per_worker = std::max<int64_t>(options_.jobs_per_worker, 1);
}

ChildPool::~ChildPool() {
  for (Worker& w : idle_) end_worker(w);
}

void ChildPool::run(const std::vector<ChildSpec>& specs, int parallel,
                    const std::function<void(size_t, const ChildExit&)>& on_exit,
                    const std::function<bool()>& stop_starting) {
  size_t next = 0;
  run_stream(
      [&](bool, bool* finished) -> std::optional<std::pair<size_t, ChildSpec>> {
        if (stop_starting && next < specs.size() && stop_starting()) next = specs.size();
        if (next == specs.size()) {
          *finished = true;
          return std::nullopt;
        }
        ++next;
        return std::make_pair(next - 1, specs[next - 1]);
      },
      parallel, on_exit);
}

void ChildPool::run_stream(const std::function<std::optional<std::pair<size_t, ChildSpec>>(bool, bool*)>& next_job,
                           int parallel, const std::function<void(size_t, const ChildExit&)>& on_exit) {
  parallel = std::max(parallel, 1);
  struct Running {
    size_t index = 0;
    ChildSpec spec;
    Clock::time_point start;
    Clock::time_point looked;   // the pool's last look at it
    double stopped = 0;         // seconds it (or the pool) was stopped
    bool killed = false;  // by us, for the timeout
    pid_t pid = 0;        // a process of its own ...
    std::optional<Worker> worker;  // ... or a job in this worker
  };
  std::vector<Running> running;
  // On an exception, nothing is left running.
  struct Cleanup {
    std::vector<Running>& running;
    ~Cleanup() {
      for (Running& r : running) {
        const pid_t pid = r.worker ? r.worker->pid : r.pid;
        ::kill(pid, SIGKILL);
        if (r.worker) ::close(r.worker->fd);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } cleanup{running};

  auto start = [&](size_t index, ChildSpec job) {
    Running r;
    r.index = index;
    r.spec = std::move(job);
    const ChildSpec& spec = r.spec;
    r.start = Clock::now();
    r.looked = r.start;
    std::string line;
    if (!options_.persistent || spec.argv.empty() || !job_line(spec, &line)) {
      r.pid = spawn(spec);
      ++stats_.processes;
      running.push_back(std::move(r));
      return;
    }
    // An idle worker that died meanwhile (the OOM killer) is not this job's doing.
    for (size_t i = 0; i < idle_.size();) {
      if (::waitpid(idle_[i].pid, nullptr, WNOHANG) == 0) {
        ++i;
        continue;
      }
      ::close(idle_[i].fd);
      idle_.erase(idle_.begin() + long(i));
    }
    auto it = std::find_if(idle_.begin(), idle_.end(), [&](const Worker& w) { return w.program == spec.argv[0]; });
    Worker w;
    if (it != idle_.end()) {
      w = std::move(*it);
      idle_.erase(it);
    } else {
      w = start_worker(spec.argv[0], spec.log_path);
      ++stats_.workers_started;
    }
    // A worker that died while idle shows as a lost job (EOF) below.
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::send(w.fd, p, left, MSG_NOSIGNAL);
      if (n < 0 && errno == EAGAIN) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      if (n <= 0) break;
      p += n;
      left -= size_t(n);
    }
    ++stats_.jobs;
    r.worker = std::move(w);
    running.push_back(std::move(r));
  };

  bool finished = false;
  while (!finished || !running.empty()) {
    while (!finished && int(running.size()) < parallel) {
      // Nothing running: the caller may block until it has a job (or none will come).
      std::optional<std::pair<size_t, ChildSpec>> job = next_job(running.empty(), &finished);
      if (!job) break;
      start(job->first, std::move(job->second));
    }
    if (running.empty()) {
      if (!finished) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    // Wait for an answer (or EOF) from a worker, 5 ms at most.
    std::vector<pollfd> fds;
    for (const Running& r : running) {
      if (r.worker) fds.push_back({r.worker->fd, POLLIN, 0});
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 5);
    bool ended = false;
    for (size_t i = 0; i < running.size();) {
      Running& r = running[i];
      const Clock::time_point now = Clock::now();
      const double age = std::chrono::duration<double>(now - r.start).count();
      const double since = std::chrono::duration<double>(now - r.looked).count();
      r.looked = now;
      const double timeout = r.spec.timeout_seconds;
      const pid_t pid = r.worker ? r.worker->pid : r.pid;
      if (since >= kPoolStoppedGap || process_stopped(pid)) r.stopped += since;
      if (timeout > 0 && age - r.stopped > timeout && !r.killed) {
        ::kill(pid, SIGKILL);
        r.killed = true;
      }
      ChildExit e;
      e.wall_seconds = age;
      e.stopped_seconds = r.stopped;
      bool done = false, lost = false;
      if (r.worker) {
        char buf[64];
        ssize_t n;
        while ((n = ::read(r.worker->fd, buf, sizeof buf)) > 0) r.worker->reply.append(buf, size_t(n));
        const size_t newline = r.worker->reply.find('\n');
        if (newline != std::string::npos && !r.killed) {
          e.exit_code = std::atoi(r.worker->reply.c_str());
          r.worker->reply.clear();
          done = true;
        } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          lost = done = true;  // the job took its worker with it
        }
      } else {
        int status = 0;
        const pid_t got = ::waitpid(r.pid, &status, WNOHANG);
        if (got != 0) {
          done = true;
          if (got < 0) e.exit_code = -1;
          else fill_exit(status, &e);
          e.timed_out = e.signal != 0 && r.killed;
        }
      }
      if (!done) {
        ++i;
        continue;
      }
      if (lost) {
        int status = 0;
        ::close(r.worker->fd);
        if (::waitpid(r.worker->pid, &status, 0) < 0) e.exit_code = -1;
        else fill_exit(status, &e);
        e.timed_out = e.signal != 0 && r.killed;
        ++stats_.lost;
      } else if (r.worker) {
        Worker w = std::move(*r.worker);
        ++w.jobs;
        if (w.jobs >= options_.jobs_per_worker) {
          ++stats_.retired_jobs;
          end_worker(w);
        } else if (rss_mb(w.pid) > options_.rss_limit_mb) {
          ++stats_.retired_rss;
          end_worker(w);
        } else {
          idle_.push_back(std::move(w));
        }
      }
      const size_t index = r.index;
      running.erase(running.begin() + long(i));
      on_exit(index, e);
      ended = true;
    }
    if (!ended && fds.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int serve_worker(const std::function<int(const std::vector<std::string>&)>& run_job) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // die with the pool that started us
  const std::filesystem::path start_directory = std::filesystem::current_path();
  std::string buffered;
  char buf[4096];
  for (;;) {
    size_t newline;
    while ((newline = buffered.find('\n')) == std::string::npos) {
      const ssize_t n = ::read(kWorkerFd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return 0;  // the pool closed us
      buffered.append(buf, size_t(n));
    }
    const std::string line = buffered.substr(0, newline);
    buffered.erase(0, newline + 1);
    std::vector<std::string> fields;
    for (size_t from = 0;;) {
      const size_t tab = line.find('\t', from);
      fields.push_back(line.substr(from, tab == std::string::npos ? std::string::npos : tab - from));
      if (tab == std::string::npos) break;
      from = tab + 1;
    }
    const std::string log = fields.front();
    fields.front() = self_executable();
    std::cout.flush();
    std::fflush(nullptr);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    const int rc = run_job(fields);
    // The job's training code may have changed the working directory (os.chdir, Hydra): the next job
    // starts where a fresh process would.
    std::error_code ec;
    std::filesystem::current_path(start_directory, ec);
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    const std::string reply = std::to_string(rc) + "\n";
    if (::write(kWorkerFd, reply.data(), reply.size()) != ssize_t(reply.size())) return 0;
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

}  // namespace spikehunt
