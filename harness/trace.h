// trace.h — the StepRecords of a burst: a ring buffer of the latest steps,
// plus the window before the onset (first non-finite-or-extreme step) kept
// whole once it happens; and a JSON Lines writer for every step.
// Example:
//   Trace trace(/*capacity=*/1024);
//   trace.push(record);
//   for (const StepRecord& r : trace.before_onset()) ...
#pragma once

#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "harness/record.h"

namespace spikehunt {

class Trace {
 public:
  explicit Trace(size_t capacity = 1024) : capacity_(capacity) {}

  void push(const StepRecord& r);
  const std::deque<StepRecord>& recent() const { return recent_; }  // oldest first
  // The records before the onset, frozen when it happened (empty before).
  const std::vector<StepRecord>& before_onset() const { return before_onset_; }
  // The record of `step` if the ring still holds it.
  const StepRecord* find(int64_t step) const;
  int64_t total() const { return total_; }

 private:
  size_t capacity_;
  std::deque<StepRecord> recent_;
  std::vector<StepRecord> before_onset_;
  bool onset_seen_ = false;
  int64_t total_ = 0;
};

// Writes one JSON object per line; the file appears under its final name only
// after close() (written as "path.partial" until then).
class TraceWriter {
 public:
  static constexpr size_t kBufferBytes = size_t{1} << 16;  // lines held before a write(2)

  explicit TraceWriter(std::string path);
  ~TraceWriter();
  void write(const StepRecord& r);
  void close();

 private:
  std::string path_;
  std::unique_ptr<char[]> buffer_;  // stdio's buffer (glibc ignores a size given without one); outlives file_
  FILE* file_ = nullptr;
  std::string line_;  // the line being written, its buffer kept
};

}  // namespace spikehunt
