#include "harness/child_verdict.h"

namespace spikehunt {

Verdict lost_child_verdict(const ChildExit& e, const std::string& log_path) {
  Verdict v;
  v.outcome = e.timed_out ? Outcome::kTimeout : Outcome::kCrashed;
  std::string log = tail_of(log_path, 600);
  while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.pop_back();
  v.message = e.describe() + (log.empty() ? "" : ": " + log);
  v.wall_seconds = e.wall_seconds;
  return v;
}

bool killed_from_outside(const ChildExit& e) { return e.signal != 0 && !e.timed_out; }

}  // namespace spikehunt
