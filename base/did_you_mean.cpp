#include "base/did_you_mean.h"

#include <algorithm>

namespace spikehunt {

size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rows: the one before the previous is for swaps.
  std::vector<size_t> before(b.size() + 1), prev(b.size() + 1), row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      row[j] = std::min({prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) row[j] = std::min(row[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, row);
  }
  return prev[b.size()];
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates, size_t min_edits,
                    bool containing) {
  if (containing && word.size() >= 3) {
    for (const std::string& c : candidates) {
      if (c.find(word) != std::string::npos) return c;
    }
  }
  std::string best;
  size_t best_d = std::max<size_t>(min_edits, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

std::pair<std::string, std::string> where_they_differ(const std::string& a, const std::string& b, size_t width) {
  size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  const size_t from = at > width / 3 ? at - width / 3 : 0;
  auto excerpt = [&](const std::string& s) {
    if (s.size() <= width && from == 0) return s;
    return (from > 0 ? "..." : "") + s.substr(std::min(from, s.size()), width) + (from + width < s.size() ? "..." : "");
  };
  return {excerpt(a), excerpt(b)};
}

}  // namespace spikehunt
