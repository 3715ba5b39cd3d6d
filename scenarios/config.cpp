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
#include "scenarios/registry.h"

namespace spikehunt {

using json = nlohmann::json;

// ---- names ----

namespace {

constexpr std::array<ActivationKind, 5> kActivationKinds = {
    ActivationKind::kRelu, ActivationKind::kLeakyRelu, ActivationKind::kGelu,
    ActivationKind::kTanh, ActivationKind::kSigmoid};
constexpr std::array<OptimizerKind, 3> kOptimizerKinds = {OptimizerKind::kSgd, OptimizerKind::kAdam,
                                                          OptimizerKind::kAdamW};
constexpr std::array<DatasetKind, 3> kDatasetKinds = {DatasetKind::kSynthetic, DatasetKind::kIdx, DatasetKind::kText};
constexpr std::array<Precision, 3> kPrecisions = {Precision::kFp32, Precision::kBf16, Precision::kFp16};
constexpr std::array<DeviceKind, 2> kDeviceKinds = {DeviceKind::kCpu, DeviceKind::kCuda};
constexpr std::array<StopAt, 2> kStopAts = {StopAt::kNonFinite, StopAt::kExtreme};
constexpr std::array<ScheduleKind, 4> kScheduleKinds = {ScheduleKind::kConstant, ScheduleKind::kLinear,
                                                        ScheduleKind::kCosine, ScheduleKind::kStep};

}  // namespace

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

// ---- helpers ----

namespace {

// JSON text of a value for messages; never throws (invalid UTF-8 is replaced).
std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string list_text(const std::vector<int64_t>& v) { return json(v).dump(); }

// A closed, open or half-open interval of numbers, written as in the messages: "(0, 10]".
struct Range {
  double lo, hi;
  bool lo_open, hi_open;
  bool contains(double v) const {
    return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  std::string text() const {
    return std::string(lo_open ? "(" : "[") + shortest(lo) + ", " + shortest(hi) + (hi_open ? ")" : "]");
  }
};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Range closed(double lo, double hi) { return {lo, hi, false, false}; }
constexpr Range above(double lo, double hi) { return {lo, hi, true, false}; }      // (lo, hi]
constexpr Range below(double lo, double hi) { return {lo, hi, false, true}; }      // [lo, hi)
constexpr Range at_least(double lo) { return {lo, kInf, false, true}; }            // [lo, inf)

// What to suggest for a bad value: fixed text, or text made from the value.
struct Hint {
  Hint(const char* text = "") : text_(text) {}
  Hint(std::string (*of)(double)) : of_(of) {}
  std::string operator()(double v) const { return of_ ? of_(v) : text_; }

 private:
  const char* text_ = "";
  std::string (*of_)(double) = nullptr;
};

std::string lr_hint(double lr) {
  return lr < 0 ? "learning rates are positive; did you mean " + shortest(-lr) + "?"
                : "learning rates are positive and at most 10";
}

constexpr const char* kRuleOff = "0 disables this rule";

// ---- the fields, once ----
// Every config field: its dotted path, its place in the struct and its
// domain. The JSON writer, the strict reader and validate() all walk this one
// list; checks across fields (nesterov needs momentum, a task order is a
// permutation of the domains, declared params) follow in validate().
template <class Config, class V>
void each_field(Config& c, V& v) {
  v.text("name", c.name);
  v.text("scenario", c.scenario);
  v.text("model.kind", c.model.kind);
  v.integer("model.mlp_depth", c.model.mlp_depth, 1, 64);
  v.integer("model.mlp_width", c.model.mlp_width, 1, 65536);
  v.integer("model.gpt.width", c.model.gpt.width, 8, 8192, "a multiple of model.gpt.heads, e.g. 128");
  v.integer("model.gpt.layers", c.model.gpt.layers, 1, 64);
  v.integer("model.gpt.heads", c.model.gpt.heads, 1, 128);
  v.integer("model.gpt.context", c.model.gpt.context, 2, 8192, "tokens per sequence, e.g. 64");
  v.flag("model.gpt.qk_layernorm", c.model.gpt.qk_layernorm);
  v.number("model.gpt.z_loss", c.model.gpt.z_loss, closed(0, 1), "Wortsman et al. use 1e-4; 0 is off");
  v.flag("model.gpt.tied_embeddings", c.model.gpt.tied_embeddings);
  v.choice("activation.kind", c.activation.kind, kActivationKinds);
  v.number("activation.slope", c.activation.slope, closed(0, 1),
           "LeakyReLU slopes are small positive numbers such as 0.01");
  v.choice("optimizer.kind", c.optimizer.kind, kOptimizerKinds);
  v.number("optimizer.lr", c.optimizer.lr, above(0, 10), Hint(lr_hint));
  v.number("optimizer.momentum", c.optimizer.momentum, below(0, 1), "0 means plain SGD; 0.9 is common");
  v.flag("optimizer.nesterov", c.optimizer.nesterov);
  v.number("optimizer.weight_decay", c.optimizer.weight_decay, closed(0, 1));
  v.pair("optimizer.betas", c.optimizer.betas, below(0, 1),
         {"Adam's beta1 is usually 0.9", "Adam's beta2 is usually 0.999"});
  v.number("optimizer.eps", c.optimizer.eps, above(0, 1), "Adam's eps is usually 1e-8");
  v.flag("optimizer.independent_weight_decay", c.optimizer.independent_weight_decay);
  v.class_lists("protocol.domains", c.protocol.domains);
  v.integers("protocol.task_order", c.protocol.task_order);
  v.integer("protocol.epochs_per_phase", c.protocol.epochs_per_phase, 1, 1000);
  v.integer("protocol.relaxation_epochs", c.protocol.relaxation_epochs, 0, 1000);
  v.choice("dataset.kind", c.dataset.kind, kDatasetKinds);
  v.text("dataset.path", c.dataset.path);
  v.integer("dataset.synthetic_train_per_class", c.dataset.synthetic_train_per_class, 1, 100000);
  v.integer("dataset.synthetic_test_per_class", c.dataset.synthetic_test_per_class, 1, 100000);
  v.text("dataset.text_path", c.dataset.text_path);
  for (const HealthField& f : health_fields()) {  // the rules' thresholds and floors (health_rules.cpp)
    const std::string path = std::string("health.") + f.name;
    if (f.integer) v.integer(path.c_str(), c.health.*f.integer, f.lo, f.hi);
    else v.number(path.c_str(), c.health.*f.number, at_least(0), f.hint);
  }
  v.choice("health.stop_at", c.health.stop_at, kStopAts);
  v.layer_rules("health.layers", c.health.layers);
  v.choice("schedule.kind", c.schedule.kind, kScheduleKinds);
  v.integer("schedule.warmup_steps", c.schedule.warmup_steps, 0, 1000000000, "0: no warm-up");
  v.number("schedule.min_lr", c.schedule.min_lr, at_least(0), "the learning rate the decay ends at, e.g. 0");
  v.integer("schedule.decay_steps", c.schedule.decay_steps, 0, int64_t{1} << 40, "0 decays until the last step");
  v.integer("schedule.step_size", c.schedule.step_size, 1, 1000000000);
  v.number("schedule.gamma", c.schedule.gamma, above(0, 1), "0.1 divides the learning rate by 10 at each drop");
  v.params("params", c.params);
  v.unsigned_integer("seed", c.seed);
  v.integer("batch_size", c.batch_size, 1, 65536);
  v.integer("max_batches_per_epoch", c.max_batches_per_epoch, 0, int64_t{1} << 40, "0 runs whole epochs");
  v.number("grad_clip", c.grad_clip, at_least(0), "0 disables clipping; 1.0 is common");
  v.integer("accumulation_steps", c.accumulation_steps, 1, 4096, "1 steps the optimizer after every batch");
  v.choice("device", c.device, kDeviceKinds);
  v.choice("precision", c.precision, kPrecisions);
  v.integer("threads", c.threads, 1, kMaxThreads);
  v.integer("world_size", c.world_size, 1, 64, "1 trains in one process; 2 splits each batch over two");
}

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

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string near = closest(word, candidates);
  return near.empty() ? "" : "did you mean \"" + near + "\"?";
}

std::string joined(const std::vector<std::string>& names, const char* sep = ", ") {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : sep) + n;
  return s;
}

template <class E, size_t N>
std::vector<std::string> names_list(const std::array<E, N>& values) {
  std::vector<std::string> names;
  for (E e : values) names.push_back(to_string(e));
  return names;
}

// A params value is a flat JSON value: a number, boolean, string, or a list of them.
bool flat_value(const json& v) {
  if (v.is_number() || v.is_boolean() || v.is_string()) return true;
  if (!v.is_array()) return false;
  return std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number() || e.is_boolean() || e.is_string(); });
}

// Reads the fields strictly: every path read is known; unknown() then
// reports the keys of the input that no field reads.
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

// ---- declared params ----

// An integral float (30.0, what a log_range or --set may give) as an integer.
bool as_integer(const json& v, int64_t* out) {
  if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))) {
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == std::floor(d) && std::fabs(d) < 9.2e18) {
      *out = static_cast<int64_t>(d);
      return true;
    }
  }
  return false;
}

bool has_type(const json& v, ParamType t) {
  int64_t i = 0;
  switch (t) {
    case ParamType::kNumber: return v.is_number();
    case ParamType::kInteger: return as_integer(v, &i);
    case ParamType::kBoolean: return v.is_boolean();
    case ParamType::kString: return v.is_string();
    case ParamType::kList: return v.is_array();
  }
  return false;
}

const char* type_phrase(ParamType t) {
  switch (t) {
    case ParamType::kNumber: return "must be a number";
    case ParamType::kInteger: return "must be an integer";
    case ParamType::kBoolean: return "must be true or false";
    case ParamType::kString: return "must be a string";
    case ParamType::kList: return "must be a list";
  }
  return "?";
}

// Fills in the declared defaults the config does not set, and writes declared
// integers given as integral floats as integers.
void complete_params(TrainingConfig& c) {
  const std::vector<ParamSpec>* specs = declared_params(c.scenario);
  if (specs == nullptr) return;
  for (const ParamSpec& s : *specs) {
    if (!c.params.has(s.name)) {
      c.params.set(s.name, s.default_value);
    } else if (int64_t i = 0; s.type == ParamType::kInteger && as_integer(c.params.values()[s.name], &i)) {
      c.params.set(s.name, i);
    }
  }
}

std::vector<std::string> spec_names(const std::vector<ParamSpec>& specs) {
  std::vector<std::string> names;
  for (const ParamSpec& s : specs) names.push_back(s.name);
  return names;
}

void check_params(const TrainingConfig& c, std::vector<Problem>* problems) {
  const json& values = c.params.values();
  if (c.scenario == "standard") {  // the built-in scenario reads no params: one given would be ignored
    for (auto it = values.begin(); it != values.end(); ++it) {
      problems->push_back({"params." + it.key(), show(*it), "is not a parameter of the built-in scenario: it takes none",
                           "params are the knobs of your own scenario (\"scenario\": \"NAME\", docs/your-code.md); "
                           "the built-in model is set by the config's own fields"});
    }
    return;
  }
  const std::vector<ParamSpec>* specs = declared_params(c.scenario);
  if (specs == nullptr) return;
  for (auto it = values.begin(); it != values.end(); ++it) {
    const std::string field = "params." + it.key();
    const auto spec = std::find_if(specs->begin(), specs->end(), [&](const ParamSpec& s) { return s.name == it.key(); });
    if (spec == specs->end()) {
      const std::string hint = did_you_mean(it.key(), spec_names(*specs));
      problems->push_back({field, show(*it), "is not a parameter of scenario \"" + c.scenario + "\"",
                           hint.empty() ? "its parameters: " + joined(spec_names(*specs)) : hint});
      continue;
    }
    if (!has_type(*it, spec->type)) {
      problems->push_back({field, show(*it), type_phrase(spec->type), spec->doc});
      continue;
    }
    if (spec->type == ParamType::kNumber || spec->type == ParamType::kInteger) {
      const Range r = closed(spec->min.value_or(-kInf), spec->max.value_or(kInf));
      const double v = it->get<double>();
      if (!(v >= r.lo && v <= r.hi) || !std::isfinite(v)) {
        problems->push_back({field, shortest(v), "is not in " + r.text(), spec->doc});
      }
    }
    if (spec->type == ParamType::kString && !spec->choices.empty() &&
        std::find(spec->choices.begin(), spec->choices.end(), it->get<std::string>()) == spec->choices.end()) {
      const std::string hint = did_you_mean(it->get<std::string>(), spec->choices);
      problems->push_back({field, show(*it), "is not one of " + joined(spec->choices, " | "), hint.empty() ? spec->doc : hint});
    }
  }
}

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

// ---- validation ----

namespace {

class Checker {
 public:
  explicit Checker(std::vector<Problem>* problems) : problems_(problems) {}

  void text(const char*, const std::string&) {}
  void integer(const char* path, int64_t v, int64_t lo, int64_t hi, const char* hint = "") {
    if (v < lo || v > hi) {
      fail(path, std::to_string(v), "is not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", hint);
    }
  }
  void unsigned_integer(const char*, uint64_t) {}
  void number(const char* path, double v, Range r, Hint hint = {}) {
    if (!r.contains(v)) fail(path, shortest(v), "is not in " + r.text(), hint(v));
  }
  void flag(const char*, bool) {}
  template <class E, size_t N>
  void choice(const char*, E, const std::array<E, N>&) {}
  void pair(const char* path, const std::array<double, 2>& v, Range r, std::array<const char*, 2> hints) {
    for (size_t i = 0; i < 2; ++i) number((std::string(path) + "[" + std::to_string(i) + "]").c_str(), v[i], r, hints[i]);
  }
  void integers(const char*, const std::vector<int64_t>&) {}
  void class_lists(const char*, const std::vector<std::vector<int64_t>>&) {}
  void params(const char*, const Params&) {}
  void layer_rules(const char* path, const std::map<std::string, LayerRules>& layers) {
    for (const auto& [name, l] : layers) {
      for (const LayerRuleField& f : kLayerRuleFields) {
        if (l.*f.layer) number((std::string(path) + "." + name + "." + f.name).c_str(), *(l.*f.layer), at_least(0), kRuleOff);
      }
    }
  }

  void fail(std::string field, std::string value, std::string message, std::string hint = "") {
    problems_->push_back({std::move(field), std::move(value), std::move(message), std::move(hint)});
  }

 private:
  std::vector<Problem>* problems_;
};

}  // namespace

std::vector<Problem> validate(const TrainingConfig& c) {
  std::vector<Problem> problems;
  Checker k(&problems);
  const auto& scenarios = scenario_names();
  if (std::find(scenarios.begin(), scenarios.end(), c.scenario) == scenarios.end()) {
    const std::string hint = did_you_mean(c.scenario, scenarios);
    k.fail("scenario", "\"" + c.scenario + "\"", "is not a registered scenario (" + joined(scenarios) + ")",
           hint.empty() ? "a program registers its own with spikehunt::register_scenario()" : hint);
  }
  const auto& models = model_kinds();
  if (std::find(models.begin(), models.end(), c.model.kind) == models.end()) {
    k.fail("model.kind", "\"" + c.model.kind + "\"", "is not a built-in model (simple_cnn | mlp | gpt)",
           did_you_mean(c.model.kind, models));
  }
  each_field(c, k);

  if (c.health.growth_ratio > 0 && c.health.growth_ratio <= 1) {  // every step would "grow"
    k.fail("health.growth_ratio", shortest(c.health.growth_ratio), "is in (0, 1]: a flat or falling value would count as growth",
           "0 disables the growth rules; 1.4 is the default");
  }
  const OptimizerConfig& o = c.optimizer;
  if (c.world_size > c.batch_size) {
    k.fail("world_size", std::to_string(c.world_size),
           "is more than batch_size " + std::to_string(c.batch_size) + ": a rank would get no rows of a batch",
           "make world_size at most batch_size");
  }
  if (o.nesterov && (o.kind != OptimizerKind::kSgd || !(o.momentum > 0))) {
    k.fail("optimizer.nesterov", "true", "needs optimizer.kind \"sgd\" with momentum > 0",
           "set nesterov to false or give momentum a value such as 0.9");
  }
  const ProtocolConfig& p = c.protocol;
  if (p.domains.size() > 26) {
    k.fail("protocol.domains", std::to_string(p.domains.size()) + " domains", "is more than 26",
           "domains are named A..Z");
  }
  if (p.domains.empty()) {
    k.fail("protocol.domains", "[]", "is empty", "give at least one class list, e.g. [[0,1,2,3,4],[5,6,7,8,9]]");
  }
  for (size_t i = 0; i < p.domains.size(); ++i) {
    const std::string field = "protocol.domains[" + std::to_string(i) + "]";
    const std::vector<int64_t>& d = p.domains[i];
    if (d.empty()) k.fail(field, "[]", "is an empty class list");
    std::set<int64_t> seen;
    for (int64_t cls : d) {
      if (cls < 0 || cls >= kNumClasses) {
        k.fail(field, list_text(d), "holds class " + std::to_string(cls) + ", not in [0, 9]");
        break;
      }
      if (!seen.insert(cls).second) {
        k.fail(field, list_text(d), "lists class " + std::to_string(cls) + " twice");
        break;
      }
    }
  }
  {
    std::vector<int64_t> sorted = p.task_order;
    std::sort(sorted.begin(), sorted.end());
    bool permutation = sorted.size() == p.domains.size();
    for (size_t i = 0; permutation && i < sorted.size(); ++i) permutation = sorted[i] == int64_t(i);
    if (!permutation) {
      k.fail("protocol.task_order", list_text(p.task_order),
             "is not a permutation of the " + std::to_string(p.domains.size()) + " domain indices",
             "list each domain index once, e.g. [1, 0] trains B before A");
    }
  }
  if (c.dataset.kind == DatasetKind::kIdx && c.dataset.path.empty()) {
    k.fail("dataset.path", "\"\"", "is empty", "give a directory with train-images-idx3-ubyte(.gz) files");
  }
  if (c.optimizer.lr > 0 && c.schedule.min_lr > c.optimizer.lr && std::isfinite(c.schedule.min_lr)) {
    k.fail("schedule.min_lr", shortest(c.schedule.min_lr), "is above optimizer.lr = " + shortest(c.optimizer.lr),
           "the decay ends at min_lr: give a value at most the learning rate, e.g. 0");
  }
  const bool text = c.dataset.kind == DatasetKind::kText;
  if (c.scenario == "standard" && (c.model.kind == "gpt") != text) {
    if (text) {
      k.fail("model.kind", "\"" + c.model.kind + "\"", "cannot read the text dataset (its inputs are token ids)",
             "use \"model\": {\"kind\": \"gpt\"} with \"dataset\": {\"kind\": \"text\"}");
    } else {
      k.fail("model.kind", "\"gpt\"", "needs dataset.kind \"text\", not \"" + std::string(to_string(c.dataset.kind)) + "\"",
             "set \"dataset\": {\"kind\": \"text\"} (the fortunes files, or dataset.text_path)");
    }
  }
  const GptConfig& g = c.model.gpt;
  if (g.heads > 0 && g.width % g.heads != 0) {
    k.fail("model.gpt.width", std::to_string(g.width), "is not a multiple of model.gpt.heads = " + std::to_string(g.heads),
           "each head takes width / heads channels, e.g. width 128 with 4 heads");
  }
  if (text && c.dataset.text_path.empty()) {
    k.fail("dataset.text_path", "\"\"", "is empty", "give a text file or a directory of them, e.g. /usr/share/games/fortunes");
  }
  if (c.optimizer.independent_weight_decay && c.optimizer.kind != OptimizerKind::kAdamW) {
    k.fail("optimizer.independent_weight_decay", "true", "needs optimizer.kind \"adamw\", not \"" +
           std::string(to_string(c.optimizer.kind)) + "\"", "set it to false, or use adamw");
  }
  if (c.precision == Precision::kFp16 && c.device != DeviceKind::kCuda) {
    k.fail("precision", "\"fp16\"", "needs device \"cuda\" (LibTorch's CPU autocast has no fp16)",
           "use \"precision\": \"bf16\" on the CPU");
  }
  check_params(c, &problems);
  return problems;
}

// ---- descriptions ----

namespace {

}  // namespace

std::string describe_optimizer(const OptimizerConfig& o) {
  std::string s = std::string(to_string(o.kind)) + " lr=" + significant(o.lr, 6);
  if (o.kind == OptimizerKind::kSgd) {
    s += " momentum=" + significant(o.momentum, 6);
    if (o.nesterov) s += " nesterov";
  } else {
    s += " betas=(" + significant(o.betas[0], 6) + "," + significant(o.betas[1], 6) + ") eps=" + significant(o.eps, 6);
  }
  if (o.weight_decay > 0) s += " weight_decay=" + significant(o.weight_decay, 6) + (o.independent_weight_decay ? " (independent)" : "");
  return s;
}

std::string describe_model_details(const TrainingConfig& c) {
  return c.model.kind == "gpt" ? describe_gpt(c.model.gpt) : describe_activation(c.activation);
}

std::string describe_gpt(const GptConfig& m) {
  std::string s = "width " + std::to_string(m.width) + ", " + std::to_string(m.layers) + " layers, " +
                  std::to_string(m.heads) + " heads, context " + std::to_string(m.context);
  if (m.qk_layernorm) s += ", qk-layernorm";
  if (m.z_loss > 0) s += ", z-loss " + significant(m.z_loss, 6);
  if (m.tied_embeddings) s += ", tied embeddings";
  return s;
}

std::string describe_activation(const ActivationConfig& a) {
  if (a.kind == ActivationKind::kLeakyRelu) return "leaky_relu(" + significant(a.slope, 6) + ")";
  return to_string(a.kind);
}

std::string describe_schedule(const ScheduleConfig& s) {
  if (s.kind == ScheduleKind::kConstant && s.warmup_steps == 0) return "";
  std::string out;
  if (s.warmup_steps > 0) out = "warm-up " + std::to_string(s.warmup_steps) + " steps";
  if (s.kind != ScheduleKind::kConstant) {
    out += (out.empty() ? "" : ", then ") + std::string(to_string(s.kind));
    if (s.kind == ScheduleKind::kStep) out += " x" + significant(s.gamma, 6) + " every " + std::to_string(s.step_size);
    else out += " to " + significant(s.min_lr, 6) + (s.decay_steps > 0 ? " at step " + std::to_string(s.decay_steps) : "");
  }
  return out;
}

std::string describe_params(const Params& p) {
  std::string out;
  for (auto it = p.values().begin(); it != p.values().end(); ++it) {
    out += (out.empty() ? "" : " ") + it.key() + "=" + it->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return out;
}

std::string describe_protocol(const ProtocolConfig& p) {
  std::string s;
  for (int64_t d : p.task_order) {
    if (d < 0 || d >= int64_t(p.domains.size())) continue;
    s += (s.empty() ? "" : " -> ") + std::string(1, char('A' + d)) + "=" + list_text(p.domains[d]);
  }
  if (p.relaxation_epochs > 0) s += " -> relax(all)";
  s += ", " + std::to_string(p.epochs_per_phase) + " epoch(s) per domain";
  if (p.relaxation_epochs > 0) s += ", " + std::to_string(p.relaxation_epochs) + " relaxation";
  return s;
}

}  // namespace spikehunt
