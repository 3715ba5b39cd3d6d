// config_fields.h — internal to scenarios/config*.cpp: every config field
// once (each_field, which the JSON writer and reader in config.cpp and the
// checks in config_check.cpp walk), the ranges and hints their messages use,
// and the declared params' completion and checks (config_check.cpp).
#pragma once

#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/did_you_mean.h"
#include "base/number_format.h"
#include "scenarios/config.h"
#include "scenarios/health_rules.h"

namespace spikehunt::config_detail {

using json = nlohmann::json;

// The values of each enum field, in the order its messages list them.
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

// JSON text of a value for messages; never throws (invalid UTF-8 is replaced).
inline std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

inline std::string list_text(const std::vector<int64_t>& v) { return json(v).dump(); }

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

inline std::string lr_hint(double lr) {
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

inline std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string near = closest(word, candidates);
  return near.empty() ? "" : "did you mean \"" + near + "\"?";
}

inline std::string joined(const std::vector<std::string>& names, const char* sep = ", ") {
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

// The declared params (config_check.cpp): defaults filled in after reading; each value checked against its spec.
void complete_params(TrainingConfig& c);
void check_params(const TrainingConfig& c, std::vector<Problem>* problems);

}  // namespace spikehunt::config_detail
