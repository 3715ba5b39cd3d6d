#include "generators/evaluator.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/files.h"
#include "harness/child_verdict.h"
#include "harness/results.h"
#include "scenarios/catalog.h"

namespace spikehunt {

namespace fs = std::filesystem;

ChildEvaluator::ChildEvaluator(std::string binary, int jobs, double timeout_seconds, std::string work_dir,
                               PoolOptions pool)
    : binary_(std::move(binary)), work_dir_(std::move(work_dir)), jobs_(std::max(jobs, 1)), timeout_(timeout_seconds),
      pool_(pool) {
  fs::create_directories(work_dir_);
  // A process killed mid-burst leaves its burst-PID-N.* files: a resume
  // removes those of processes that are gone (never a living one's).
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(work_dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("burst-", 0) != 0) continue;
    const size_t dash = name.find('-', 6);
    long pid = 0;
    try {
      pid = std::stol(name.substr(6, dash - 6));
    } catch (const std::exception&) {
      continue;
    }
    if (pid > 0 && pid != long(::getpid()) && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove(e.path(), ec);
  }
}

void ChildEvaluator::evaluate(const std::vector<TrainingConfig>& configs,
                              const std::function<void(size_t, const BurstSummary&)>& on_result,
                              const std::function<bool()>& stop) {
  size_t next = 0;
  stream(
      [&](bool, bool* finished) -> std::optional<StreamJob> {
        if (next == configs.size() || (stop && stop())) {
          *finished = true;
          return std::nullopt;
        }
        ++next;
        return StreamJob{next - 1, configs[next - 1]};
      },
      on_result);
}

void ChildEvaluator::stream(const std::function<std::optional<StreamJob>(bool, bool*)>& next,
                            const std::function<void(size_t, const BurstSummary&)>& on_result) {
  struct Running {
    std::string stem;
    TrainingConfig config;
    bool retry = false;  // its second run
  };
  std::map<size_t, Running> running;  // by id
  std::vector<std::pair<size_t, Running>> again;  // killed from outside: to run once more
  bool next_finished = false;  // `next` said no more will come
  pool_.run_stream(
      [&](bool idle, bool* finished) -> std::optional<std::pair<size_t, ChildSpec>> {
        std::optional<StreamJob> job;
        bool retry = false;
        if (!again.empty()) {
          job = StreamJob{again.front().first, std::move(again.front().second.config)};
          again.erase(again.begin());
          retry = true;
        } else if (!next_finished) {
          job = next(idle, &next_finished);
        }
        // A burst still running may be killed and come back: not finished before it ends.
        *finished = next_finished && again.empty() && running.empty() && !job;
        if (!job) return std::nullopt;
        // A config too large for this machine is the sweep's input, not a burst that crashed
        // (every sample of it "crashed", shrunk to nothing, said as diverged).
        check_fits_memory(job->second);
        const std::string stem = work_dir_ + "/burst-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++);
        save_config(job->second, stem + ".config.json");
        std::vector<std::string> argv = {binary_, "burst", "--config", stem + ".config.json", "--result", stem + ".result.json"};
        argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
        if (!expected_build_.empty()) argv.insert(argv.end(), {"--build", expected_build_});
        running[job->first] = Running{stem, std::move(job->second), retry};
        return std::make_pair(job->first, ChildSpec{std::move(argv), timeout_, stem + ".log"});
      },
      jobs_,
      [&](size_t id, const ChildExit& e) {
        Running r = std::move(running.at(id));
        running.erase(id);
        if (e.exit_code == kExitOtherBuild && e.signal == 0) {
          std::string why = tail_of(r.stem + ".log", 400);
          while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
          throw InputError(binary_, "build", expected_build_,
                           "changed during the sweep: a worker started from it now runs other code (" + why + ")",
                           "finish the sweep with the code it started with, or start it again in a fresh --out");
        }
        BurstSummary s;
        bool read = false;
        if (e.exit_code == 0 && e.signal == 0) {
          try {
            s = summary_from_json(nlohmann::json::parse(read_file(r.stem + ".result.json")), r.stem + ".result.json");
            read = true;
          } catch (const std::exception&) {
          }
        }
        if (!read) s.verdict = lost_child_verdict(e, r.stem + ".log");
        for (const char* ext : {".config.json", ".result.json", ".log"}) {
          std::error_code ec;
          fs::remove(r.stem + ext, ec);
        }
        if (!read && (killed_from_outside(e) || e.timed_out)) {
          if (!r.retry) {
            if (e.timed_out) {
              ++retries_.timeouts_retried;
            } else {
              ++retries_.retried;
              ++retries_.by_cause[e.describe()];
            }
            r.retry = true;
            again.emplace_back(id, std::move(r));
            return;
          }
          if (e.timed_out) {
            ++retries_.timeouts_repeated;
            s.verdict.message += kTimedOutAgain;
          } else {
            ++retries_.repeated;
            s.verdict.message += kKilledAgain;
          }
        }
        on_result(id, s);
      });
}

std::string describe_retries(const Evaluator::Retries& r) {
  std::string out;
  if (r.retried > 0) {
    std::string causes;
    for (const auto& [cause, n] : r.by_cause) causes += (causes.empty() ? "" : ", ") + std::to_string(n) + "x " + cause;
    out = std::to_string(r.retried) + " burst(s) killed by a signal spikehunt did not send (" + causes +
          ") ran once more in a fresh worker; " + std::to_string(r.repeated) +
          " killed again: crashed (a crash that repeats on its config), the others have the verdict of their second run";
  }
  if (r.timeouts_retried > 0) {
    out += (out.empty() ? "" : "\n") + std::to_string(r.timeouts_retried) +
           " burst(s) past their --timeout ran once more in a fresh worker; " + std::to_string(r.timeouts_repeated) +
           " past it again: timeout, the others have the verdict of their second run";
  }
  return out;
}

void Evaluator::stream(const std::function<std::optional<StreamJob>(bool, bool*)>& next,
                       const std::function<void(size_t, const BurstSummary&)>& on_result) {
  for (bool finished = false; !finished;) {
    std::vector<size_t> ids;
    std::vector<TrainingConfig> round;
    while (!finished && int(round.size()) < std::max(parallelism(), 1)) {
      std::optional<StreamJob> job = next(round.empty(), &finished);
      if (!job) break;
      ids.push_back(job->first);
      round.push_back(std::move(job->second));
    }
    evaluate(round, [&](size_t i, const BurstSummary& s) { on_result(ids[i], s); });
  }
}

void FunctionEvaluator::evaluate(const std::vector<TrainingConfig>& configs,
                                 const std::function<void(size_t, const BurstSummary&)>& on_result,
                                 const std::function<bool()>& stop) {
  for (size_t i = 0; i < configs.size(); ++i) {
    if (stop && stop()) return;
    ++calls_;
    on_result(i, f_(configs[i]));
  }
}

}  // namespace spikehunt
