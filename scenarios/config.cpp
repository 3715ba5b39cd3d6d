#include "scenarios/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "scenarios/files.h"

namespace spikehunt {

using json = nlohmann::json;

// ---- names ----

namespace {

constexpr std::array<ActivationKind, 5> kActivationKinds = {
    ActivationKind::kRelu, ActivationKind::kLeakyRelu, ActivationKind::kGelu,
    ActivationKind::kTanh, ActivationKind::kSigmoid};
constexpr std::array<OptimizerKind, 3> kOptimizerKinds = {OptimizerKind::kSgd, OptimizerKind::kAdam,
                                                          OptimizerKind::kAdamW};
constexpr std::array<DatasetKind, 2> kDatasetKinds = {DatasetKind::kSynthetic, DatasetKind::kIdx};
constexpr std::array<DeviceKind, 2> kDeviceKinds = {DeviceKind::kCpu, DeviceKind::kCuda};
constexpr std::array<StopAt, 2> kStopAts = {StopAt::kNonFinite, StopAt::kExtreme};

template <class E, size_t N>
std::string names_of(const std::array<E, N>& values) {
  std::string s;
  for (E v : values) s += (s.empty() ? "" : " | ") + std::string(to_string(v));
  return s;
}

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

const char* to_string(DatasetKind k) { return k == DatasetKind::kSynthetic ? "synthetic" : "idx"; }
const char* to_string(DeviceKind k) { return k == DeviceKind::kCpu ? "cpu" : "cuda"; }
const char* to_string(StopAt k) { return k == StopAt::kNonFinite ? "non_finite" : "extreme"; }

namespace {

std::vector<std::string>& mutable_scenario_names() {
  static std::vector<std::string> names = {"standard"};
  return names;
}

}  // namespace

const std::vector<std::string>& scenario_names() { return mutable_scenario_names(); }

void add_scenario_name(const std::string& name) {
  auto& names = mutable_scenario_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
}

const std::vector<std::string>& model_kinds() {
  static const std::vector<std::string> kinds = {"simple_cnn", "mlp"};
  return kinds;
}

// ---- JSON out ----

json config_to_json(const TrainingConfig& c) {
  const HealthRules& h = c.health;
  return json{
      {"name", c.name},
      {"scenario", c.scenario},
      {"model", {{"kind", c.model.kind}, {"mlp_depth", c.model.mlp_depth},
                 {"mlp_width", c.model.mlp_width}}},
      {"activation", {{"kind", to_string(c.activation.kind)}, {"slope", c.activation.slope}}},
      {"optimizer",
       {{"kind", to_string(c.optimizer.kind)},
        {"lr", c.optimizer.lr},
        {"momentum", c.optimizer.momentum},
        {"nesterov", c.optimizer.nesterov},
        {"weight_decay", c.optimizer.weight_decay},
        {"betas", c.optimizer.betas},
        {"eps", c.optimizer.eps}}},
      {"protocol",
       {{"domains", c.protocol.domains},
        {"task_order", c.protocol.task_order},
        {"epochs_per_phase", c.protocol.epochs_per_phase},
        {"relaxation_epochs", c.protocol.relaxation_epochs}}},
      {"dataset",
       {{"kind", to_string(c.dataset.kind)},
        {"path", c.dataset.path},
        {"synthetic_train_per_class", c.dataset.synthetic_train_per_class},
        {"synthetic_test_per_class", c.dataset.synthetic_test_per_class}}},
      {"health",
       {{"window", h.window},
        {"spike_z", h.spike_z},
        {"loss_limit", h.loss_limit},
        {"grad_norm_limit", h.grad_norm_limit},
        {"max_grad_limit", h.max_grad_limit},
        {"activation_limit", h.activation_limit},
        {"optimizer_state_limit", h.optimizer_state_limit},
        {"param_jump_limit", h.param_jump_limit},
        {"loss_spike_floor", h.loss_spike_floor},
        {"grad_norm_spike_floor", h.grad_norm_spike_floor},
        {"activation_spike_floor", h.activation_spike_floor},
        {"stop_at", to_string(h.stop_at)}}},
      {"seed", c.seed},
      {"batch_size", c.batch_size},
      {"max_batches_per_epoch", c.max_batches_per_epoch},
      {"grad_clip", c.grad_clip},
      {"device", to_string(c.device)},
      {"threads", c.threads},
  };
}

// ---- JSON in ----

namespace {

// JSON text of a value for messages; never throws (invalid UTF-8 is replaced).
std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// The candidate a typo most likely meant: one containing the word, else the
// nearest within a third of the word's length in edits; "" when none is close.
std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  for (const std::string& c : candidates) {
    if (word.size() >= 3 && c.find(word) != std::string::npos) return c;
  }
  std::string best;
  size_t best_d = std::max<size_t>(1, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

// Reads the fields of one JSON object strictly: each read records the key as
// known; finish() reports the keys nobody read.
class Reader {
 public:
  Reader(const json* obj, std::string prefix, std::vector<Problem>* problems)
      : obj_(obj), prefix_(std::move(prefix)), problems_(problems) {}

  std::string path(const std::string& key) const {
    return prefix_.empty() ? key : prefix_ + "." + key;
  }

  void number(const char* key, double& out) {
    if (const json* v = get(key)) {
      if (v->is_number()) out = v->get<double>();
      else bad_type(key, *v, "must be a number");
    }
  }
  void integer(const char* key, int64_t& out) {
    if (const json* v = get(key)) {
      if (v->is_number_integer() && !(v->is_number_unsigned() &&
                                      v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())))
        out = v->get<int64_t>();
      else bad_type(key, *v, "must be an integer");
    }
  }
  void unsigned_integer(const char* key, uint64_t& out) {
    if (const json* v = get(key)) {
      if (v->is_number_unsigned() || (v->is_number_integer() && v->get<int64_t>() >= 0)) out = v->get<uint64_t>();
      else bad_type(key, *v, "must be an integer in [0, 2^64)");
    }
  }
  void boolean(const char* key, bool& out) {
    if (const json* v = get(key)) {
      if (v->is_boolean()) out = v->get<bool>();
      else bad_type(key, *v, "must be true or false");
    }
  }
  void string(const char* key, std::string& out) {
    if (const json* v = get(key)) {
      if (v->is_string()) out = v->get<std::string>();
      else bad_type(key, *v, "must be a string");
    }
  }
  template <class E, size_t N>
  void enumeration(const char* key, E& out, const std::array<E, N>& values) {
    const json* v = get(key);
    if (v == nullptr) return;
    if (v->is_string()) {
      const std::string s = v->get<std::string>();
      std::vector<std::string> names;
      for (E e : values) {
        if (s == to_string(e)) {
          out = e;
          return;
        }
        names.push_back(to_string(e));
      }
      const std::string near = closest(s, names);
      problems_->push_back({path(key), show(*v), "is not one of " + names_of(values),
                            near.empty() ? "" : "did you mean \"" + near + "\"?"});
      return;
    }
    bad_type(key, *v, "must be one of " + names_of(values));
  }
  void integer_list(const char* key, std::vector<int64_t>& out) {
    if (const json* v = get(key)) read_int_list(*v, path(key), out);
  }
  void domains(const char* key, std::vector<std::vector<int64_t>>& out) {
    const json* v = get(key);
    if (v == nullptr) return;
    if (!v->is_array()) return bad_type(key, *v, "must be a list of class lists, e.g. [[0,1],[2,3]]");
    std::vector<std::vector<int64_t>> result(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      read_int_list((*v)[i], path(key) + "[" + std::to_string(i) + "]", result[i]);
    }
    out = std::move(result);
  }
  void number_pair(const char* key, std::array<double, 2>& out) {
    const json* v = get(key);
    if (v == nullptr) return;
    if (!v->is_array() || v->size() != 2 || !(*v)[0].is_number() || !(*v)[1].is_number()) {
      return bad_type(key, *v, "must be a pair of numbers, e.g. [0.9, 0.999]");
    }
    out = {(*v)[0].get<double>(), (*v)[1].get<double>()};
  }

  Reader object(const char* key) {
    const json* v = get(key);
    if (v != nullptr && !v->is_object()) {
      bad_type(key, *v, "must be an object");
      v = nullptr;
    }
    return Reader(v, path(key), problems_);
  }

  void finish() const {
    if (obj_ == nullptr) return;
    for (auto it = obj_->begin(); it != obj_->end(); ++it) {
      if (std::find(known_.begin(), known_.end(), it.key()) != known_.end()) continue;
      const std::string near = closest(it.key(), known_);
      problems_->push_back({path(it.key()), "", "is not a config field",
                            near.empty() ? "known fields here: " + join_known()
                                         : "did you mean \"" + near + "\"?"});
    }
  }

 private:
  const json* get(const char* key) {
    known_.emplace_back(key);
    if (obj_ == nullptr) return nullptr;
    auto it = obj_->find(key);
    return it == obj_->end() ? nullptr : &*it;
  }
  void bad_type(const std::string& key, const json& v, const std::string& message) {
    problems_->push_back({path(key), show(v), message, ""});
  }
  void read_int_list(const json& v, const std::string& where, std::vector<int64_t>& out) {
    if (!v.is_array()) {
      problems_->push_back({where, show(v), "must be a list of integers", ""});
      return;
    }
    std::vector<int64_t> result;
    for (const json& e : v) {
      if (!e.is_number_integer()) {
        problems_->push_back({where, show(v), "must be a list of integers", ""});
        return;
      }
      result.push_back(e.get<int64_t>());
    }
    out = std::move(result);
  }
  std::string join_known() const {
    std::string s;
    for (const std::string& k : known_) s += (s.empty() ? "" : ", ") + k;
    return s;
  }

  const json* obj_;
  std::string prefix_;
  std::vector<Problem>* problems_;
  std::vector<std::string> known_;
};

}  // namespace

TrainingConfig config_from_json(const json& j, const std::string& file) {
  TrainingConfig c;
  std::vector<Problem> problems;
  if (!j.is_object()) {
    throw InputError(file, "", "", "must hold a JSON object, not " + std::string(j.type_name()),
                     "start from configs/default.json");
  }
  Reader r(&j, "", &problems);
  r.string("name", c.name);
  r.string("scenario", c.scenario);
  {
    Reader m = r.object("model");
    m.string("kind", c.model.kind);
    m.integer("mlp_depth", c.model.mlp_depth);
    m.integer("mlp_width", c.model.mlp_width);
    m.finish();
  }
  {
    Reader a = r.object("activation");
    a.enumeration("kind", c.activation.kind, kActivationKinds);
    a.number("slope", c.activation.slope);
    a.finish();
  }
  {
    Reader o = r.object("optimizer");
    o.enumeration("kind", c.optimizer.kind, kOptimizerKinds);
    o.number("lr", c.optimizer.lr);
    o.number("momentum", c.optimizer.momentum);
    o.boolean("nesterov", c.optimizer.nesterov);
    o.number("weight_decay", c.optimizer.weight_decay);
    o.number_pair("betas", c.optimizer.betas);
    o.number("eps", c.optimizer.eps);
    o.finish();
  }
  {
    Reader p = r.object("protocol");
    p.domains("domains", c.protocol.domains);
    p.integer_list("task_order", c.protocol.task_order);
    p.integer("epochs_per_phase", c.protocol.epochs_per_phase);
    p.integer("relaxation_epochs", c.protocol.relaxation_epochs);
    p.finish();
  }
  {
    Reader d = r.object("dataset");
    d.enumeration("kind", c.dataset.kind, kDatasetKinds);
    d.string("path", c.dataset.path);
    d.integer("synthetic_train_per_class", c.dataset.synthetic_train_per_class);
    d.integer("synthetic_test_per_class", c.dataset.synthetic_test_per_class);
    d.finish();
  }
  {
    HealthRules& h = c.health;
    Reader hr = r.object("health");
    hr.integer("window", h.window);
    hr.number("spike_z", h.spike_z);
    hr.number("loss_limit", h.loss_limit);
    hr.number("grad_norm_limit", h.grad_norm_limit);
    hr.number("max_grad_limit", h.max_grad_limit);
    hr.number("activation_limit", h.activation_limit);
    hr.number("optimizer_state_limit", h.optimizer_state_limit);
    hr.number("param_jump_limit", h.param_jump_limit);
    hr.number("loss_spike_floor", h.loss_spike_floor);
    hr.number("grad_norm_spike_floor", h.grad_norm_spike_floor);
    hr.number("activation_spike_floor", h.activation_spike_floor);
    hr.enumeration("stop_at", h.stop_at, kStopAts);
    hr.finish();
  }
  r.unsigned_integer("seed", c.seed);
  r.integer("batch_size", c.batch_size);
  r.integer("max_batches_per_epoch", c.max_batches_per_epoch);
  r.number("grad_clip", c.grad_clip);
  r.enumeration("device", c.device, kDeviceKinds);
  r.integer("threads", c.threads);
  r.finish();
  if (!problems.empty()) throw InputError(file, std::move(problems));
  return c;
}

// ---- validation ----

namespace {

std::string num(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return json(v).dump();  // shortest text that reads back as the same double
}

class Checker {
 public:
  explicit Checker(std::vector<Problem>* problems) : problems_(problems) {}

  // Closed/open bounds are stated in `range_text`, e.g. "(0, 10]".
  void in(const char* field, double v, double lo, bool lo_open, double hi, bool hi_open,
          const std::string& hint = "") {
    const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (!ok) {
      problems_->push_back({field, num(v),
                            "is not in " + std::string(lo_open ? "(" : "[") + num(lo) + ", " +
                                num(hi) + (hi_open ? ")" : "]"),
                            hint});
    }
  }
  void int_in(const char* field, int64_t v, int64_t lo, int64_t hi, const std::string& hint = "") {
    if (v < lo || v > hi) {
      problems_->push_back({field, std::to_string(v),
                            "is not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", hint});
    }
  }
  void fail(std::string field, std::string value, std::string message, std::string hint = "") {
    problems_->push_back({std::move(field), std::move(value), std::move(message), std::move(hint)});
  }

 private:
  std::vector<Problem>* problems_;
};

std::string list_text(const std::vector<int64_t>& v) { return json(v).dump(); }

}  // namespace

std::vector<Problem> validate(const TrainingConfig& c) {
  std::vector<Problem> problems;
  Checker k(&problems);
  const auto& scenarios = scenario_names();
  if (std::find(scenarios.begin(), scenarios.end(), c.scenario) == scenarios.end()) {
    std::string list;
    for (const std::string& s : scenarios) list += (list.empty() ? "" : ", ") + s;
    const std::string near = closest(c.scenario, scenarios);
    k.fail("scenario", "\"" + c.scenario + "\"", "is not a registered scenario (" + list + ")",
           near.empty() ? "a program registers its own with spikehunt::register_scenario()"
                        : "did you mean \"" + near + "\"?");
  }
  const auto& models = model_kinds();
  if (std::find(models.begin(), models.end(), c.model.kind) == models.end()) {
    const std::string near = closest(c.model.kind, models);
    k.fail("model.kind", "\"" + c.model.kind + "\"", "is not a built-in model (simple_cnn | mlp)",
           near.empty() ? "" : "did you mean \"" + near + "\"?");
  }
  k.int_in("model.mlp_depth", c.model.mlp_depth, 1, 64);
  k.int_in("model.mlp_width", c.model.mlp_width, 1, 65536);
  k.in("activation.slope", c.activation.slope, 0, false, 1, false,
       "LeakyReLU slopes are small positive numbers such as 0.01");

  const OptimizerConfig& o = c.optimizer;
  k.in("optimizer.lr", o.lr, 0, true, 10, false,
       o.lr < 0 ? "learning rates are positive; did you mean " + num(-o.lr) + "?"
                : "learning rates are positive and at most 10");
  k.in("optimizer.momentum", o.momentum, 0, false, 1, true, "0 means plain SGD; 0.9 is common");
  if (o.nesterov && (o.kind != OptimizerKind::kSgd || !(o.momentum > 0))) {
    k.fail("optimizer.nesterov", "true", "needs optimizer.kind \"sgd\" with momentum > 0",
           "set nesterov to false or give momentum a value such as 0.9");
  }
  k.in("optimizer.weight_decay", o.weight_decay, 0, false, 1, false);
  k.in("optimizer.betas[0]", o.betas[0], 0, false, 1, true, "Adam's beta1 is usually 0.9");
  k.in("optimizer.betas[1]", o.betas[1], 0, false, 1, true, "Adam's beta2 is usually 0.999");
  k.in("optimizer.eps", o.eps, 0, true, 1, false, "Adam's eps is usually 1e-8");

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
  k.int_in("protocol.epochs_per_phase", p.epochs_per_phase, 1, 1000);
  k.int_in("protocol.relaxation_epochs", p.relaxation_epochs, 0, 1000);

  if (c.dataset.kind == DatasetKind::kIdx && c.dataset.path.empty()) {
    k.fail("dataset.path", "\"\"", "is empty", "give a directory with train-images-idx3-ubyte(.gz) files");
  }
  k.int_in("dataset.synthetic_train_per_class", c.dataset.synthetic_train_per_class, 1, 100000);
  k.int_in("dataset.synthetic_test_per_class", c.dataset.synthetic_test_per_class, 1, 100000);

  const HealthRules& h = c.health;
  const double inf = std::numeric_limits<double>::infinity();
  k.int_in("health.window", h.window, 2, 10000);
  k.in("health.spike_z", h.spike_z, 0, false, inf, true, "0 disables the spike rules");
  const std::pair<const char*, double> limits[] = {
      {"health.loss_limit", h.loss_limit},
      {"health.grad_norm_limit", h.grad_norm_limit},
      {"health.max_grad_limit", h.max_grad_limit},
      {"health.activation_limit", h.activation_limit},
      {"health.optimizer_state_limit", h.optimizer_state_limit},
      {"health.param_jump_limit", h.param_jump_limit},
      {"health.loss_spike_floor", h.loss_spike_floor},
      {"health.grad_norm_spike_floor", h.grad_norm_spike_floor},
      {"health.activation_spike_floor", h.activation_spike_floor},
  };
  for (const auto& [field, v] : limits) k.in(field, v, 0, false, inf, true, "0 disables this rule");

  k.int_in("batch_size", c.batch_size, 1, 65536);
  k.int_in("max_batches_per_epoch", c.max_batches_per_epoch, 0, int64_t{1} << 40,
           "0 runs whole epochs");
  k.in("grad_clip", c.grad_clip, 0, false, inf, true, "0 disables clipping; 1.0 is common");
  k.int_in("threads", c.threads, 1, 1024);
  return problems;
}

// ---- overrides, load, save ----

void apply_overrides(json& j, const std::vector<std::string>& overrides) {
  static const json kSchema = config_to_json(TrainingConfig{});
  for (const std::string& item : overrides) {
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
      auto it = schema->is_object() ? schema->find(part) : schema->end();
      if (it == schema->end()) {
        std::vector<std::string> names;
        if (schema->is_object()) {
          for (auto s = schema->begin(); s != schema->end(); ++s) names.push_back(s.key());
        }
        const std::string near = closest(part, names);
        throw InputError("--set", walked, "", "is not a config field",
                         near.empty() ? "see configs/default.json for the fields"
                                      : "did you mean \"" + near + "\"?");
      }
      schema = &*it;
      if (!target->is_object()) *target = json::object();
      target = &(*target)[part];
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    if (schema->is_object()) {
      throw InputError("--set", key, text, "is a group of fields, not a field",
                       "set one of its fields, e.g. --set " + key + "." + schema->begin().key() + "=...");
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
  apply_overrides(j, overrides);
  const std::string where = overrides.empty() ? file : file + " (with --set)";
  TrainingConfig c = config_from_json(j, where);
  std::vector<Problem> problems = validate(c);
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
  // non-finite 5 steps later (README: "the default run").
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

// ---- descriptions ----

namespace {

std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

std::string describe_optimizer(const OptimizerConfig& o) {
  std::string s = std::string(to_string(o.kind)) + " lr=" + g(o.lr);
  if (o.kind == OptimizerKind::kSgd) {
    s += " momentum=" + g(o.momentum);
    if (o.nesterov) s += " nesterov";
  } else {
    s += " betas=(" + g(o.betas[0]) + "," + g(o.betas[1]) + ") eps=" + g(o.eps);
  }
  if (o.weight_decay > 0) s += " weight_decay=" + g(o.weight_decay);
  return s;
}

std::string describe_activation(const ActivationConfig& a) {
  if (a.kind == ActivationKind::kLeakyRelu) return "leaky_relu(" + g(a.slope) + ")";
  return to_string(a.kind);
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
