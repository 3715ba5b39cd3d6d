#include "scenarios/registry.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

namespace spikehunt {

namespace {

struct Entry {
  ScenarioMaker make;                   // empty: a name without a maker (add_scenario_name)
  std::vector<ParamSpec> params;        // empty: undeclared, any params as they are
  std::string cls;                      // the built scenario's C++ class, once known
  std::string source;                   // a Python scenario's file ("" for C++)
};

struct Registry {
  std::vector<std::string> names = {"standard"};  // in the order registered
  std::map<std::string, Entry> entries;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

const std::vector<std::string>& scenario_names() { return registry().names; }

void add_scenario_name(const std::string& name) {
  auto& names = registry().names;
  if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
}

void declare_params(const std::string& scenario, std::vector<ParamSpec> specs) {
  std::set<std::string> seen;
  for (const ParamSpec& s : specs) {
    if (s.name.empty() || s.name.find('.') != std::string::npos || !seen.insert(s.name).second) {
      throw std::invalid_argument("declare_params(\"" + scenario + "\"): parameter name \"" + s.name +
                                  "\" is empty, has a dot or is declared twice");
    }
  }
  registry().entries[scenario].params = std::move(specs);
}

const std::vector<ParamSpec>* declared_params(const std::string& scenario) {
  const auto& entries = registry().entries;
  const auto it = entries.find(scenario);
  return it == entries.end() || it->second.params.empty() ? nullptr : &it->second.params;
}

void register_scenario(const std::string& name, ScenarioMaker make, std::vector<ParamSpec> params) {
  if (name == "standard" || name.empty()) throw std::invalid_argument("register_scenario: \"" + name + "\" is reserved");
  declare_params(name, std::move(params));
  Entry& e = registry().entries[name];
  e.make = std::move(make);
  e.cls.clear();
  e.source.clear();
  add_scenario_name(name);
}

void set_python_scenario(const std::string& name, const std::string& cls, const std::string& file) {
  const auto it = registry().entries.find(name);
  if (it == registry().entries.end()) return;
  it->second.cls = cls;
  it->second.source = file;
}

std::string scenario_source(const std::string& name) {
  const auto& entries = registry().entries;
  const auto it = entries.find(name);
  return it == entries.end() ? "" : it->second.source;
}

std::string scenario_class(const std::string& name) {
  const auto& entries = registry().entries;
  const auto it = entries.find(name);
  return it == entries.end() ? "" : it->second.cls;
}

ScenarioMaker scenario_maker(const std::string& name) {
  const auto& entries = registry().entries;
  const auto it = entries.find(name);
  return it == entries.end() ? ScenarioMaker() : it->second.make;
}

void set_scenario_class(const std::string& name, const std::string& cls) {
  const auto it = registry().entries.find(name);
  if (it != registry().entries.end() && it->second.source.empty()) it->second.cls = cls;
}

const std::vector<std::string>& model_kinds() {
  static const std::vector<std::string> kinds = {"simple_cnn", "mlp", "gpt"};
  return kinds;
}

}  // namespace spikehunt
