// progress.h — a progress line on a terminal (stderr): runs done, failures
// so far, ETA; or a note ("shrinking 3 failures at once ..."). Off when
// stderr is not a terminal or --no-progress.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace spikehunt {

class Progress {
 public:
  Progress(bool on, int64_t total);
  // `done` of the total runs, `failures` among them; `done_here` ran in this
  // process (the ETA's rate).
  void update(int64_t done, int64_t failures, int64_t done_here);
  void note(const std::string& text);
  void done();  // clears the line

 private:
  bool on_;
  int64_t total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace spikehunt
