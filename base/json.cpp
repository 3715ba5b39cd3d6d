#include "base/json.h"

#include <climits>
#include <cmath>
#include <limits>

#include "base/error.h"

namespace spikehunt {

using json = nlohmann::json;

json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double number_from(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  return v.get<double>();
}

int64_t json_integer(const json& v, const std::string& field, const std::string& file) {
  // get<int64_t>() of a float or of an unsigned past INT64_MAX is undefined (found by fuzz_repro).
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))) {
    throw InputError(file, field, v.dump(-1, ' ', false, json::error_handler_t::replace), "is not an integer");
  }
  return v.get<int64_t>();
}

}  // namespace spikehunt
