// params.cpp — a scenario's own knobs: Params' typed reads (InputError
// naming params.NAME) and the ParamSpec declarations (config.h).
#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "scenarios/config.h"

namespace spikehunt {

using json = nlohmann::json;

namespace {

const char* kParamsFile = "config";

}  // namespace

const json& Params::at(const std::string& name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) {
    throw InputError(kParamsFile, "params." + name, "", "is not set",
                     "set it in the config (\"params\": {\"" + name +
                         "\": ...}) or declare it with a default when registering the scenario");
  }
  return *it;
}

namespace {

[[noreturn]] void wrong_type(const std::string& name, const json& v, const char* message) {
  throw InputError(kParamsFile, "params." + name, v.dump(-1, ' ', false, json::error_handler_t::replace), message);
}

}  // namespace

double Params::number(const std::string& name) const {
  const json& v = at(name);
  if (!v.is_number()) wrong_type(name, v, "must be a number");
  return v.get<double>();
}

int64_t Params::integer(const std::string& name) const {
  const json& v = at(name);
  if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))) {
    return v.get<int64_t>();
  }
  if (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()) && std::fabs(v.get<double>()) < 9.2e18) {
    return static_cast<int64_t>(v.get<double>());
  }
  wrong_type(name, v, "must be an integer");
}

bool Params::boolean(const std::string& name) const {
  const json& v = at(name);
  if (!v.is_boolean()) wrong_type(name, v, "must be true or false");
  return v.get<bool>();
}

std::string Params::string(const std::string& name) const {
  const json& v = at(name);
  if (!v.is_string()) wrong_type(name, v, "must be a string");
  return v.get<std::string>();
}

std::vector<double> Params::numbers(const std::string& name) const {
  const json& v = at(name);
  std::vector<double> out;
  if (v.is_array()) {
    for (const json& e : v) {
      if (!e.is_number()) wrong_type(name, v, "must be a list of numbers");
      out.push_back(e.get<double>());
    }
    return out;
  }
  wrong_type(name, v, "must be a list of numbers");
}

double Params::number(const std::string& name, double fallback) const { return has(name) ? number(name) : fallback; }
int64_t Params::integer(const std::string& name, int64_t fallback) const { return has(name) ? integer(name) : fallback; }
bool Params::boolean(const std::string& name, bool fallback) const { return has(name) ? boolean(name) : fallback; }
std::string Params::string(const std::string& name, const std::string& fallback) const {
  return has(name) ? string(name) : fallback;
}

ParamSpec ParamSpec::number(std::string name, double default_value, double min, double max, std::string doc) {
  return {std::move(name), ParamType::kNumber, default_value, min, max, {}, std::move(doc)};
}
ParamSpec ParamSpec::integer(std::string name, int64_t default_value, int64_t min, int64_t max, std::string doc) {
  return {std::move(name), ParamType::kInteger, default_value, double(min), double(max), {}, std::move(doc)};
}
ParamSpec ParamSpec::boolean(std::string name, bool default_value, std::string doc) {
  return {std::move(name), ParamType::kBoolean, default_value, std::nullopt, std::nullopt, {}, std::move(doc)};
}
ParamSpec ParamSpec::string(std::string name, std::string default_value, std::vector<std::string> choices,
                            std::string doc) {
  return {std::move(name), ParamType::kString, std::move(default_value), std::nullopt, std::nullopt,
          std::move(choices), std::move(doc)};
}
ParamSpec ParamSpec::list(std::string name, json default_value, std::string doc) {
  return {std::move(name), ParamType::kList, std::move(default_value), std::nullopt, std::nullopt, {}, std::move(doc)};
}

}  // namespace spikehunt
