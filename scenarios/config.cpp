#include "scenarios/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "base/did_you_mean.h"
#include "base/dotted_path.h"
#include "base/files.h"
#include "base/number_format.h"
#include "scenarios/config_fields.h"
#include "scenarios/registry.h"

namespace spikehunt {

using json = nlohmann::json;

// ---- names ----

const char* to_string(ActivationKind k) {
  switch (k) {
    case ActivationKind::kRelu: return "relu";
    case ActivationKind::kLeakyRelu: return "leaky_relu";
    case ActivationKind::kGelu: return "gelu";
    case ActivationKind::kTanh: return "tanh";
    case ActivationKind::kSigmoid: return "sigmoid";
  }
  return "?";
}

const char* to_string(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
  }
  return "?";
}

const char* to_string(DatasetKind k) {
  switch (k) {
    case DatasetKind::kSynthetic: return "synthetic";
    case DatasetKind::kIdx: return "idx";
    case DatasetKind::kText: return "text";
  }
  return "?";
}

const char* to_string(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}
const char* to_string(DeviceKind k) { return k == DeviceKind::kCpu ? "cpu" : "cuda"; }
const char* to_string(StopAt k) { return k == StopAt::kNonFinite ? "non_finite" : "extreme"; }

const char* to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kConstant: return "constant";
    case ScheduleKind::kLinear: return "linear";
    case ScheduleKind::kCosine: return "cosine";
    case ScheduleKind::kStep: return "step";
  }
  return "?";
}

const char* to_string(ParamType t) {
  switch (t) {
    case ParamType::kNumber: return "number";
    case ParamType::kInteger: return "integer";
    case ParamType::kBoolean: return "boolean";
    case ParamType::kString: return "string";
    case ParamType::kList: return "list";
  }
  return "?";
}

using namespace config_detail;

namespace {

// ---- JSON out ----

class Writer {
 public:
  json out = json::object();

  void text(const char* path, const std::string& v) { put(path, v); }
  void integer(const char* path, int64_t v, int64_t, int64_t, const char* = "") { put(path, v); }
  void unsigned_integer(const char* path, uint64_t v) { put(path, v); }
  void number(const char* path, double v, Range, Hint = {}) { put(path, v); }
  void flag(const char* path, bool v) { put(path, v); }
  template <class E, size_t N>
  void choice(const char* path, E v, const std::array<E, N>&) { put(path, to_string(v)); }
  void pair(const char* path, const std::array<double, 2>& v, Range, std::array<const char*, 2>) { put(path, v); }
  void integers(const char* path, const std::vector<int64_t>& v) { put(path, v); }
  void class_lists(const char* path, const std::vector<std::vector<int64_t>>& v) { put(path, v); }
  void params(const char* path, const Params& p) { put(path, p.values()); }
  void layer_rules(const char* path, const std::map<std::string, LayerRules>& layers) {
    if (layers.empty()) return;  // a config without per-tensor rules keeps the JSON it always had
    json out_layers = json::object();
    for (const auto& [name, l] : layers) {
      json fields = json::object();
      for (const LayerRuleField& f : kLayerRuleFields) {
        if (l.*f.layer) fields[f.name] = *(l.*f.layer);
      }
      out_layers[name] = std::move(fields);
    }
    put(path, std::move(out_layers));
  }

 private:
  void put(const char* path, json v) { make_path(out, path) = std::move(v); }
};

}  // namespace

json config_to_json(const TrainingConfig& c) {
  Writer w;
  each_field(c, w);
  return std::move(w.out);
}


// ---- JSON in ----

namespace {

// A params value is a flat JSON value: a number, boolean, string, or a list of them.
bool flat_value(const json& v) {
  if (v.is_number() || v.is_boolean() || v.is_string()) return true;
  if (!v.is_array()) return false;
  return std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number() || e.is_boolean() || e.is_string(); });
}

// Reads the fields strictly: every path read is known; unknown() then// reports the keys of the input that no field reads.
class Reader {
 public:
  Reader(const json& in, std::vector<Problem>* problems) : in_(in), problems_(problems) {}

  void text(const char* path, std::string& out) {
    if (const json* v = get(path)) {
      if (v->is_string()) out = v->get<std::string>();
      else bad(path, *v, "must be a string");
    }
  }
  void integer(const char* path, int64_t& out, int64_t lo, int64_t hi, const char* = "") {
    if (const json* v = get(path)) {
      if (v->is_number_integer() &&
          !(v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))) {
        out = v->get<int64_t>();
      } else if (v->is_number() && std::isfinite(v->get<double>()) && v->get<double>() == std::floor(v->get<double>())) {
        // a whole number written as a float (1e12): say where it stands, not that it is no integer
        const double d = v->get<double>();
        if (d >= double(lo) && d <= double(hi)) out = static_cast<int64_t>(d);
        else bad(path, *v, "is not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      } else {
        bad(path, *v, "must be an integer");
      }
    }
  }
  void unsigned_integer(const char* path, uint64_t& out) {
    if (const json* v = get(path)) {
      if (v->is_number_unsigned() || (v->is_number_integer() && v->get<int64_t>() >= 0)) out = v->get<uint64_t>();
      else bad(path, *v, "must be an integer in [0, 2^64)");
    }
  }
  void number(const char* path, double& out, Range, Hint = {}) {
    if (const json* v = get(path)) {
      if (v->is_number()) out = v->get<double>();
      else bad(path, *v, "must be a number");
    }
  }
  void flag(const char* path, bool& out) {
    if (const json* v = get(path)) {
      if (v->is_boolean()) out = v->get<bool>();
      else bad(path, *v, "must be true or false");
    }
  }
  template <class E, size_t N>
  void choice(const char* path, E& out, const std::array<E, N>& values) {
    const json* v = get(path);
    if (v == nullptr) return;
    const std::vector<std::string> names = names_list(values);
    if (!v->is_string()) return bad(path, *v, "must be one of " + joined(names, " | "));
    const std::string s = v->get<std::string>();
    for (size_t i = 0; i < N; ++i) {
      if (s == names[i]) {
        out = values[i];
        return;
      }
    }
    problems_->push_back({path, show(*v), "is not one of " + joined(names, " | "), did_you_mean(s, names)});
  }
  void pair(const char* path, std::array<double, 2>& out, Range, std::array<const char*, 2>) {
    const json* v = get(path);
    if (v == nullptr) return;
    if (!v->is_array() || v->size() != 2 || !(*v)[0].is_number() || !(*v)[1].is_number()) {
      return bad(path, *v, "must be a pair of numbers, e.g. [0.9, 0.999]");
    }
    out = {(*v)[0].get<double>(), (*v)[1].get<double>()};
  }
  void integers(const char* path, std::vector<int64_t>& out) {
    if (const json* v = get(path)) read_int_list(*v, path, out);
  }
  void class_lists(const char* path, std::vector<std::vector<int64_t>>& out) {
    const json* v = get(path);
    if (v == nullptr) return;
    if (!v->is_array()) return bad(path, *v, "must be a list of class lists, e.g. [[0,1],[2,3]]");
    std::vector<std::vector<int64_t>> result(v->size());
    for (size_t i = 0; i < v->size(); ++i) read_int_list((*v)[i], std::string(path) + "[" + std::to_string(i) + "]", result[i]);
    out = std::move(result);
  }
  void params(const char* path, Params& out) {
    const json* v = get(path);
    if (v == nullptr) return;
    if (!v->is_object()) return bad(path, *v, "must be an object of a scenario's parameters, e.g. {\"warmup\": 30}");
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (flat_value(*it)) out.set(it.key(), *it);
      else problems_->push_back({std::string(path) + "." + it.key(), show(*it),
                                 "must be a number, boolean, string or list of them", ""});
    }
  }

  // {"TENSOR": {"RULE": number, ...}, ...}: tensor names hold dots, so the
  // names are keys of one object, never nested groups.
  void layer_rules(const char* path, std::map<std::string, LayerRules>& out) {
    const json* v = get(path);
    if (v == nullptr) return;
    if (!v->is_object()) {
      return bad(path, *v, "must be an object of tensor names, e.g. {\"fc1.weight\": {\"param_jump_limit\": 2}}");
    }
    std::vector<std::string> rules;
    for (const LayerRuleField& f : kLayerRuleFields) rules.push_back(f.name);
    std::map<std::string, LayerRules> result;
    for (auto it = v->begin(); it != v->end(); ++it) {
      const std::string where = std::string(path) + "." + it.key();
      if (it.key().empty()) {
        problems_->push_back({where, show(*it), "has no tensor name", "name a parameter or a tap, e.g. \"fc1.weight\""});
        continue;
      }
      if (!it->is_object()) {
        bad(where, *it, "must be an object of per-tensor rules, e.g. {\"param_jump_limit\": 2}");
        continue;
      }
      LayerRules& l = result[it.key()];
      for (auto f = it->begin(); f != it->end(); ++f) {
        const auto field = std::find_if(kLayerRuleFields.begin(), kLayerRuleFields.end(),
                                        [&](const LayerRuleField& k) { return f.key() == k.name; });
        if (field == kLayerRuleFields.end()) {
          const std::string hint = did_you_mean(f.key(), rules);
          problems_->push_back({where + "." + f.key(), show(*f), "is not a per-tensor rule",
                                hint.empty() ? "per-tensor rules: " + joined(rules) : hint});
        } else if (!f->is_number()) {
          bad(where + "." + f.key(), *f, "must be a number");
        } else {
          l.*(field->layer) = f->get<double>();
        }
      }
    }
    out = std::move(result);
  }

  // Keys nobody read, each with the nearest known key beside it.
  void unknown() { unknown_in(in_, ""); }

 private:
  const json* get(const std::string& path) {
    known_.insert(path);
    const std::vector<std::string> parts = split_path(path);
    const json* node = &in_;
    std::string walked;
    for (size_t i = 0; i < parts.size(); ++i) {
      walked += (walked.empty() ? "" : ".") + parts[i];
      if (i + 1 < parts.size()) groups_.insert(walked);
      auto it = node->find(parts[i]);
      if (it == node->end()) return nullptr;
      node = &*it;
      if (i + 1 < parts.size() && !node->is_object()) {
        if (bad_groups_.insert(walked).second) bad(walked, *node, "must be an object");
        return nullptr;
      }
    }
    return node;
  }
  void unknown_in(const json& obj, const std::string& prefix) {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
      if (known_.count(path)) continue;
      if (groups_.count(path)) {
        if (it->is_object()) unknown_in(*it, path);
        continue;
      }
      std::vector<std::string> here;  // the known keys at this level
      for (const std::string& k : known_) {
        if (prefix.empty() ? true : k.rfind(prefix + ".", 0) == 0) {
          const std::string rest = prefix.empty() ? k : k.substr(prefix.size() + 1);
          const std::string first = rest.substr(0, rest.find('.'));
          if (std::find(here.begin(), here.end(), first) == here.end()) here.push_back(first);
        }
      }
      const std::string hint = did_you_mean(it.key(), here);
      problems_->push_back({path, "", "is not a config field", hint.empty() ? "known fields here: " + joined(here) : hint});
    }
  }
  void bad(const std::string& path, const json& v, const std::string& message) {
    problems_->push_back({path, show(v), message, ""});
  }
  void read_int_list(const json& v, const std::string& where, std::vector<int64_t>& out) {
    std::vector<int64_t> result;
    for (const json& e : v.is_array() ? v : json::array({nullptr})) {
      if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > uint64_t(INT64_MAX))) {
        problems_->push_back({where, show(v), "must be a list of integers", ""});
        return;
      }
      result.push_back(e.get<int64_t>());
    }
    out = std::move(result);
  }

  const json& in_;
  std::vector<Problem>* problems_;
  std::set<std::string> known_, groups_, bad_groups_;
};

}  // namespace

TrainingConfig config_from_json(const json& j, const std::string& file) {
  if (!j.is_object()) {
    throw InputError(file, "", "", "must hold a JSON object, not " + std::string(j.type_name()),
                     "start from configs/default.json");
  }
  TrainingConfig c;
  std::vector<Problem> problems;
  Reader r(j, &problems);
  each_field(c, r);
  r.unknown();
  if (!problems.empty()) throw InputError(file, std::move(problems));
  complete_params(c);
  return c;
}

}  // namespace spikehunt
