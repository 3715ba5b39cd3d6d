#include "generators/progress.h"

#include <unistd.h>

#include <cstdio>

#include "base/number_format.h"

namespace spikehunt {

using Clock = std::chrono::steady_clock;

Progress::Progress(bool on, int64_t total) : on_(on && ::isatty(STDERR_FILENO)), total_(total), start_(Clock::now()) {}

void Progress::update(int64_t done, int64_t failures, int64_t done_here) {
  if (!on_) return;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  const double eta = done_here > 0 ? elapsed / double(done_here) * double(total_ - done) : 0;
  const int width = 24, filled = total_ > 0 ? int(width * done / total_) : width;
  std::fprintf(stderr, "\r  [%s%s] %lld/%lld runs, %lld failed, ETA %s   ", std::string(size_t(filled), '#').c_str(),
               std::string(size_t(width - filled), '-').c_str(), static_cast<long long>(done),
               static_cast<long long>(total_), static_cast<long long>(failures),
               done_here > 0 ? duration_text(eta).c_str() : "?");
}

void Progress::note(const std::string& text) {
  if (on_) std::fprintf(stderr, "\r  %-70s", text.c_str());
}

void Progress::done() {
  if (on_) std::fprintf(stderr, "\r%90s\r", "");
}

}  // namespace spikehunt
