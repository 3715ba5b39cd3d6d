// config_file.cpp — a config from its file and the --set overrides (every
// problem at once), the built-in default, a config saved, and the fields
// that differ between two.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/did_you_mean.h"
#include "base/error.h"
#include "base/files.h"
#include "scenarios/config.h"

namespace spikehunt {

using json = nlohmann::json;

namespace {

// Applies one "key=value" override; throws InputError("--set", ...) when it is not one.
void apply_override(json& j, const std::string& item) {
  static const json kSchema = config_to_json(TrainingConfig{});
  static const json kLeaf = nullptr;
  const size_t eq = item.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw InputError("--set", item, "", "is not key=value", "e.g. --set optimizer.lr=0.01");
  }
  const std::string key = item.substr(0, eq);
  const std::string text = item.substr(eq + 1);
  const json* schema = &kSchema;
  json* target = &j;
  std::string walked;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    walked += (walked.empty() ? "" : ".") + part;
    if (walked == "params." + part) {  // a scenario's own knob: any name; declared ones are checked when parsed
      if (dot != std::string::npos) {
        throw InputError("--set", key, "", "is not a parameter name: params are flat", "e.g. --set params.warmup=30");
      }
      if (!target->is_object()) *target = json::object();
      target = &(*target)[part];
      schema = &kLeaf;
      break;
    }
    if (walked == "health.layers") {  // tensor names hold dots: the last part names the rule
      if (!target->is_object()) *target = json::object();
      target = &(*target)["layers"];
      if (dot != std::string::npos) {
        const std::string rest = key.substr(dot + 1);
        const size_t last = rest.rfind('.');
        if (last == std::string::npos || last == 0 || last + 1 == rest.size()) {
          throw InputError("--set", key, "", "is not health.layers.TENSOR.RULE",
                           "e.g. --set health.layers.fc1.weight.param_jump_limit=2");
        }
        if (!target->is_object()) *target = json::object();
        json& entry = (*target)[rest.substr(0, last)];
        if (!entry.is_object()) entry = json::object();
        target = &entry[rest.substr(last + 1)];
      }
      schema = &kLeaf;
      break;
    }
    auto it = schema->is_object() ? schema->find(part) : schema->end();
    if (it == schema->end()) {
      std::vector<std::string> names;
      if (schema->is_object()) {
        for (auto s = schema->begin(); s != schema->end(); ++s) names.push_back(s.key());
      }
      const std::string near = closest(part, names);
      throw InputError("--set", walked, "", walked == key ? "is not a config field" : "is not a config field (in " + item + ")",
                       near.empty() ? "see configs/default.json for the fields" : "did you mean \"" + near + "\"?");
    }
    schema = &*it;
    if (!target->is_object()) *target = json::object();
    target = &(*target)[part];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (schema->is_object()) {
    throw InputError("--set", key, text, "is a group of fields, not a field",
                     "set one of its fields, e.g. --set " + key + "." +
                         (schema->empty() ? std::string("NAME") : schema->begin().key()) + "=...");
  }
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    value = text;  // bare words are strings: --set optimizer.kind=adam
    try {
      (void)value.dump();
    } catch (const json::type_error&) {  // found by fuzz_config
      throw InputError("--set", key, "", "has a value that is not valid UTF-8 text");
    }
  }
  *target = std::move(value);
}

// Applies every good override; the bad ones are problems naming "--set".
void apply_overrides(json& j, const std::vector<std::string>& overrides, std::vector<Problem>* problems) {
  for (const std::string& item : overrides) {
    try {
      json copy = j;  // a bad item leaves the config as it was
      apply_override(copy, item);
      j = std::move(copy);
    } catch (const InputError& e) {
      for (Problem p : e.problems()) {
        p.file = "--set";
        problems->push_back(std::move(p));
      }
    }
  }
}

}  // namespace

void apply_overrides(json& j, const std::vector<std::string>& overrides) {
  std::vector<Problem> problems;
  apply_overrides(j, overrides, &problems);
  if (!problems.empty()) throw InputError("--set", std::move(problems));
}

namespace {

void diff_into(const json& a, const json& b, const std::string& prefix, std::vector<std::string>* out) {
  for (auto it = b.begin(); it != b.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    const auto other = a.find(it.key());
    if (it->is_object() && other != a.end() && other->is_object()) {
      diff_into(*other, *it, key, out);
    } else if (other == a.end() || *other != *it) {
      out->push_back(key + "=" + it->dump());
    }
  }
}

}  // namespace

std::vector<std::string> config_diff(const TrainingConfig& base, const TrainingConfig& c) {
  std::vector<std::string> out;
  diff_into(config_to_json(base), config_to_json(c), "", &out);
  return out;
}

TrainingConfig parse_config(json j, const std::string& file, const std::vector<std::string>& overrides) {
  // Every problem at once: the overrides that are not fields, then the
  // config's own (with the good overrides applied).
  std::vector<Problem> problems;
  apply_overrides(j, overrides, &problems);
  const std::string where = overrides.empty() ? file : file + " (with --set)";
  TrainingConfig c;
  try {
    c = config_from_json(j, where);
    for (Problem& p : validate(c)) problems.push_back(std::move(p));
  } catch (const InputError& e) {
    problems.insert(problems.end(), e.problems().begin(), e.problems().end());
  }
  if (!problems.empty()) throw InputError(where, std::move(problems));
  return c;
}

TrainingConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  json j = read_json_file(path, "compare with configs/default.json");
  return parse_config(std::move(j), path, overrides);
}

TrainingConfig default_config(const std::vector<std::string>& overrides) {
  // The motivating case's CNN and optimizer on the synthetic data, in short
  // bursts (40 batches an epoch), at a learning rate where every seed tried
  // diverges: seed 4 goes extreme 5 steps after the domain switch and
  // non-finite 5 steps later (README: the tour's first run).
  TrainingConfig c;
  c.name = "default";
  c.optimizer.lr = 0.15;
  c.seed = 4;
  c.max_batches_per_epoch = 40;
  return parse_config(config_to_json(c), "<built-in default>", overrides);
}

void save_config(const TrainingConfig& c, const std::string& path) {
  write_file_atomic(path, config_to_json(c).dump(2) + "\n");
}

}  // namespace spikehunt
