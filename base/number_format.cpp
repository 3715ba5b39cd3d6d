#include "base/number_format.h"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace spikehunt {

namespace {

std::string non_finite(double v, bool named) {
  if (std::isnan(v)) return named ? "NaN" : "nan";
  return v > 0 ? (named ? "Inf" : "inf") : (named ? "-Inf" : "-inf");
}

std::string printf_g(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

}  // namespace

std::string significant(double v, int digits) {
  return std::isfinite(v) ? printf_g(v, digits) : non_finite(v, false);
}

std::string significant_named(double v, int digits) {
  return std::isfinite(v) ? printf_g(v, digits) : non_finite(v, true);
}

std::string shortest(double v) {
  if (!std::isfinite(v)) return non_finite(v, false);
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return nlohmann::json(v).dump();  // shortest text that reads back as the same double
}

std::string fmt(double v) {
  if (!std::isfinite(v)) return non_finite(v, false);
  char buf[32];
  const double a = std::fabs(v);
  if (a == 0 || (a >= 1e-3 && a < 1e4)) return printf_g(v, 4);
  const int e = static_cast<int>(std::floor(std::log10(a)));
  double m = v / std::pow(10.0, e);
  if (std::fabs(m) >= 9.995) m /= 10, std::snprintf(buf, sizeof buf, "%.2fe%d", m, e + 1);
  else std::snprintf(buf, sizeof buf, "%.2fe%d", m, e);
  return buf;
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * fraction);
  return buf;
}

std::string thousands(int64_t n) {
  std::string s = std::to_string(n);
  const int first = n < 0 ? 1 : 0;  // the digits start after a minus sign
  for (int i = static_cast<int>(s.size()) - 3; i > first; i -= 3) s.insert(size_t(i), ",");
  return s;
}

std::string duration_text(double seconds) {
  char buf[32];
  const int s = static_cast<int>(std::lround(seconds));
  if (s >= 60) std::snprintf(buf, sizeof buf, "%dm%02ds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  return buf;
}

}  // namespace spikehunt
