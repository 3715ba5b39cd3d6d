#include "harness/warnings.h"

#include <algorithm>
#include <mutex>

namespace spikehunt {

namespace {

// The text kept of a warning (a broadcasting warning names shapes: short).
constexpr size_t kMaxWarningText = 400;
// Distinct warnings kept; the rest are counted under the last.
constexpr size_t kMaxWarnings = 32;

// The living counters of this thread, oldest first, and the handler before
// the first (LibTorch keeps one handler per thread).
thread_local std::vector<WarningCounter*> living;
thread_local c10::WarningHandler* before_first = nullptr;

}  // namespace

WarningCounter::WarningCounter() {
  if (living.empty()) before_first = c10::WarningUtils::get_warning_handler();
  living.push_back(this);
  c10::WarningUtils::set_warning_handler(this);
}

WarningCounter::~WarningCounter() {
  const auto it = std::find(living.begin(), living.end(), this);
  if (it != living.end()) living.erase(it);
  c10::WarningUtils::set_warning_handler(living.empty() ? before_first : living.back());
}

void WarningCounter::process(const c10::Warning& warning) {
  const std::string text = warning.msg().substr(0, kMaxWarningText);
  add(text);
  for (WarningCounter* c : living) {
    if (c != this) c->add(text);  // the counters around this one count it too
  }
}

void WarningCounter::add(const std::string& text) {
  const std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find_if(counts_.begin(), counts_.end(), [&](const WarningCount& w) { return w.message == text; });
  if (it != counts_.end()) {
    ++it->count;
  } else if (counts_.size() + 1 < kMaxWarnings) {
    counts_.push_back({text, 1});
  } else {  // the last entry counts every warning past the first kMaxWarnings - 1
    if (counts_.size() + 1 == kMaxWarnings) counts_.push_back({"(other warnings)", 0});
    ++counts_.back().count;
  }
}

std::vector<WarningCount> WarningCounter::counts() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

}  // namespace spikehunt
