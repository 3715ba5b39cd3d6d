// config_check.cpp — validate(): every field in its domain (each_field's
// ranges), the checks across fields, and the declared params against their
// specs (their defaults filled in after reading: complete_params).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "scenarios/config.h"
#include "scenarios/config_fields.h"
#include "scenarios/registry.h"

namespace spikehunt {

using namespace config_detail;

namespace {

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
}  // namespace

void config_detail::complete_params(TrainingConfig& c) {
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

namespace {

std::vector<std::string> spec_names(const std::vector<ParamSpec>& specs) {
  std::vector<std::string> names;
  for (const ParamSpec& s : specs) names.push_back(s.name);
  return names;
}

}  // namespace

void config_detail::check_params(const TrainingConfig& c, std::vector<Problem>* problems) {
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

}  // namespace spikehunt
