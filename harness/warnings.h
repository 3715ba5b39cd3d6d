// warnings.h — LibTorch's warnings counted instead of printed each time: a
// user's loss with a broadcasting target warns on every step (2,204 lines in
// one doctor run), which buries what spikehunt says. While a WarningCounter
// lives, each TORCH_WARN (and each Python warning the binding routes to
// LibTorch's handler) raised on its thread is counted by its text; the burst
// keeps the counts in its verdict (Verdict::warnings) and `run` shows each
// once. Counters on one thread stack: every living one counts each warning
// raised on the thread (the doctor's sees its bursts'), and when the last
// dies the handler before the first is back, in whatever order they die.
// Example:
//   WarningCounter counter;              // installed on this thread until it dies
//   train();
//   verdict.warnings = counter.counts();
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "harness/record.h"

namespace spikehunt {

class WarningCounter : public c10::WarningHandler {
 public:
  WarningCounter();
  ~WarningCounter() override;
  WarningCounter(const WarningCounter&) = delete;
  WarningCounter& operator=(const WarningCounter&) = delete;

  void process(const c10::Warning& warning) override;
  std::vector<WarningCount> counts() const;  // first-seen order

 private:
  void add(const std::string& text);
  mutable std::mutex mutex_;  // counts() may be read from another thread
  std::vector<WarningCount> counts_;
};

}  // namespace spikehunt
