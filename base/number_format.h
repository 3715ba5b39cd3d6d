// number_format.h — the one way numbers are written in text for people:
// tables, verdicts, error messages, reports. (JSON keeps full doubles; see
// base/json.h for non-finite values there.)
// Example:
//   significant(0.000123456, 3)  // "0.000123"
//   fmt(1.5e18)                  // "1.50e18"
//   thousands(421642)            // "421,642"
#pragma once

#include <cstdint>
#include <string>

namespace spikehunt {

// printf's %.<digits>g, with every NaN as "nan" and infinities as "inf" / "-inf".
std::string significant(double v, int digits);
// The same, naming non-finite values as a tensor's counts do: "NaN", "Inf", "-Inf".
std::string significant_named(double v, int digits);
// The shortest text that reads back as the same double; whole numbers below
// 1e15 without a fraction ("3", "0.05", "1e-08").
std::string shortest(double v);
// Tables and stories: 4 significant digits in [1e-3, 1e4) (and 0), else a
// mantissa with two decimals and an exponent ("3.03", "1.50e18").
std::string fmt(double v);
// A fraction as a whole percentage: 0.256 -> "26%".
std::string percent(double fraction);
// 421642 -> "421,642".
std::string thousands(int64_t n);
// Wall time: "12.3s" under a minute, else "4m05s".
std::string duration_text(double seconds);

}  // namespace spikehunt
