// child.h — runs commands in child processes: posix_spawn (never fork: the
// parent may already run LibTorch's thread pools), at most N at a time, each
// with a timeout on the time it could run (wall time less the time it, or
// the pool, was stopped). A child that dies on a signal or overstays its
// timeout (then killed with SIGKILL) is reported as such, and the others go on.
// A ChildPool runs them in persistent workers instead (`PROGRAM worker`, one
// per slot, started once): same specs, same ChildExit, same isolation.
// Example:
//   run_children(specs, /*parallel=*/2, [&](size_t i, const ChildExit& e) { ... });
//   ChildPool pool;  pool.run(specs, /*parallel=*/2, on_exit);  // workers kept for the next run
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/program.h"

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
  // Of the wall time, what could not run: the child stopped (SIGSTOP, a Slurm suspend), or the pool
  // itself stopped (a gap of a second or more between its looks). The timeout counts the rest.
  double stopped_seconds = 0;
  std::string describe() const;  // "exit 0", "signal 11 (Segmentation fault)", "timeout after 30 s"
};

// Runs every spec, at most `parallel` at once, in order of the specs; calls
// on_exit(index, exit) in this thread as each child ends. Throws
// std::runtime_error when a child cannot be started.
// `stop_starting`, when given, is asked before each start: true leaves the
// remaining specs unstarted (a spent time budget); they get no on_exit.
void run_children(const std::vector<ChildSpec>& specs, int parallel,
                  const std::function<void(size_t, const ChildExit&)>& on_exit,
                  const std::function<bool()>& stop_starting = {});

// ---- persistent workers ----
//
// A worker is `PROGRAM worker` (argv[0] of the specs: spikehunt or a user's
// program that calls cli_main) with a socket on its fd 3. Per job the pool
// sends one line, the job's log path and its argv[1..] separated by tabs; the
// worker points its stdout and stderr at the log, runs the command as that
// program's CLI would in a fresh process (cli.h: worker_verb), and answers
// with its exit code. A job that kills its worker (a signal, an abort, an
// exit) or overstays its timeout (the worker is SIGKILLed) ends like a
// process of its own would, and the next job starts a fresh worker. A worker
// is retired after `jobs_per_worker` jobs or when its resident memory passes
// `rss_limit_mb` after a job, so a leak cannot grow without bound.
struct PoolOptions {
  bool persistent = true;         // false: a process per job (the path before workers)
  int64_t jobs_per_worker = 100;  // then a fresh worker
  int64_t rss_limit_mb = 4096;    // a worker past it after a job is retired
};

struct PoolStats {
  int64_t jobs = 0;               // run in workers
  int64_t processes = 0;          // run as processes of their own (persistent false, or an argv a line cannot carry)
  int64_t workers_started = 0;
  int64_t retired_jobs = 0;       // workers retired after jobs_per_worker jobs
  int64_t retired_rss = 0;        // ... past rss_limit_mb
  int64_t lost = 0;               // workers a job killed (crash, abort, exit, timeout)
};

class ChildPool {
 public:
  explicit ChildPool(PoolOptions options = {});
  ~ChildPool();  // ends the idle workers
  ChildPool(const ChildPool&) = delete;
  ChildPool& operator=(const ChildPool&) = delete;

  // run_children's contract; the workers stay for the next call.
  void run(const std::vector<ChildSpec>& specs, int parallel,
           const std::function<void(size_t, const ChildExit&)>& on_exit,
           const std::function<bool()>& stop_starting = {});
  // The same, for jobs that come while others run: next_job(idle, &finished)
  // is asked whenever a slot is free and returns the next job and the index
  // on_exit gets for it, or nothing for now (when `idle`, nothing runs: it
  // may block until it has one); *finished = true: no more will come, and
  // run_stream returns when the running ones have ended.
  void run_stream(const std::function<std::optional<std::pair<size_t, ChildSpec>>(bool idle, bool* finished)>& next_job,
                  int parallel, const std::function<void(size_t, const ChildExit&)>& on_exit);
  const PoolStats& stats() const { return stats_; }
  const PoolOptions& options() const { return options_; }

  struct Worker;

 private:
  PoolOptions options_;
  PoolStats stats_;
  std::vector<Worker> idle_;
};

// The worker's side, run by the hidden `worker` verb: reads jobs on fd 3
// until the pool closes it, calling run_job(argv) for each with stdout and
// stderr on the job's log (argv[0] is the program). run_job puts back what a
// fresh process starts with (cli.cpp: LibTorch's default generator seed).
// Returns 0.
int serve_worker(const std::function<int(const std::vector<std::string>&)>& run_job);

// The last `max_bytes` of a file (a child's log), for error messages.
std::string tail_of(const std::string& path, size_t max_bytes = 2000);

}  // namespace spikehunt
