// child.h — runs commands in child processes: posix_spawn (never fork: the
// parent may already run LibTorch's thread pools), at most N at a time, each
// with a wall-clock timeout. A child that dies on a signal or overstays its
// timeout (then killed with SIGKILL) is reported as such, and the others go on.
// Example:
//   run_children(specs, /*parallel=*/2, [&](size_t i, const ChildExit& e) { ... });
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace spikehunt {

struct ChildSpec {
  std::vector<std::string> argv;  // argv[0] is the program path
  double timeout_seconds = 0;     // 0: no timeout
  std::string log_path;           // the child's stdout and stderr ("": /dev/null)
};

struct ChildExit {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal killed it (SIGKILL after a timeout too)
  bool timed_out = false;
  double wall_seconds = 0;
  std::string describe() const;  // "exit 0", "signal 11 (Segmentation fault)", "timeout after 30 s"
};

// This process's executable (/proc/self/exe), for re-spawning spikehunt itself.
std::string self_executable();
// How this program was invoked (argv[0] as the shell gave it: "spikehunt"
// on PATH, "build/spikehunt", or a user's program that calls cli_main), so a
// printed command can be pasted back; the executable's file name when
// set_invoked_as() was not called.
std::string program_name();
void set_invoked_as(const std::string& argv0);

// Runs every spec, at most `parallel` at once, in order of the specs; calls
// on_exit(index, exit) in this thread as each child ends. Throws
// std::runtime_error when a child cannot be started.
// `stop_starting`, when given, is asked before each start: true leaves the
// remaining specs unstarted (a spent time budget); they get no on_exit.
void run_children(const std::vector<ChildSpec>& specs, int parallel,
                  const std::function<void(size_t, const ChildExit&)>& on_exit,
                  const std::function<bool()>& stop_starting = {});

// The last `max_bytes` of a file (a child's log), for error messages.
std::string tail_of(const std::string& path, size_t max_bytes = 2000);

}  // namespace spikehunt
