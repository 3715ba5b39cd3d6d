#include "harness/record.h"

#include <cmath>

#include <nlohmann/json.hpp>

namespace spikehunt {

using json = nlohmann::json;

const char* to_string(Health h) {
  switch (h) {
    case Health::kFinite: return "finite";
    case Health::kExtreme: return "extreme";
    case Health::kNonFinite: return "non_finite";
  }
  return "?";
}

const char* to_string(Stage s) {
  switch (s) {
    case Stage::kForward: return "forward";
    case Stage::kLoss: return "loss";
    case Stage::kBackward: return "backward";
    case Stage::kOptimizerStep: return "optimizer_step";
  }
  return "?";
}

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::kHealthy: return "healthy";
    case Outcome::kExtreme: return "extreme";
    case Outcome::kNonFinite: return "non_finite";
    case Outcome::kCrashed: return "crashed";
    case Outcome::kTimeout: return "timeout";
  }
  return "?";
}

std::string Fault::describe() const {
  std::string s = tensor + " (" + to_string(stage) + "): ";
  std::string counts;
  auto add = [&](int64_t n, const char* what) {
    if (n > 0) counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  add(nan, "NaN");
  add(pos_inf, "+Inf");
  add(neg_inf, "-Inf");
  return s + counts + " of " + std::to_string(numel);
}

std::optional<int64_t> Verdict::lead_time() const {
  if (!onset_step || !failure_step) return std::nullopt;
  return *failure_step - *onset_step;
}

json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

json to_json(const Fault& f) {
  return {{"tensor", f.tensor}, {"stage", to_string(f.stage)}, {"nan", f.nan},
          {"pos_inf", f.pos_inf}, {"neg_inf", f.neg_inf},       {"numel", f.numel}};
}

json to_json(const StepRecord& r) {
  json layers = json::array();
  for (const LayerStats& l : r.layers) {
    layers.push_back({{"name", l.name},
                      {"grad_norm", number(l.grad_norm)},
                      {"grad_max", number(l.grad_max)},
                      {"param_norm_before", number(l.param_norm_before)},
                      {"param_norm_after", number(l.param_norm_after)},
                      {"state_norm", number(l.state_norm)},
                      {"state_max", number(l.state_max)}});
  }
  json taps = json::object();
  for (const TapStats& t : r.taps) taps[t.name] = number(t.max_abs);
  json j = {{"step", r.step},
            {"phase", r.phase_name},
            {"epoch", r.epoch},
            {"batch", r.batch},
            {"loss", number(r.loss)},
            {"grad_norm", number(r.grad_norm)},
            {"grad_max", number(r.grad_max)},
            {"param_norm_before", number(r.param_norm_before)},
            {"param_norm_after", number(r.param_norm_after)},
            {"state_norm", number(r.state_norm)},
            {"state_max", number(r.state_max)},
            {"input_max", number(r.input_max)},
            {"activation_max", number(r.activation_max)},
            {"activations", taps},
            {"layers", layers},
            {"input_hash", r.input_hash.hex()},
            {"label_hash", r.label_hash.hex()},
            {"label_histogram", r.label_histogram},
            {"health", to_string(r.health)},
            {"rules", r.rules},
            {"step_ms", r.step_ms}};
  if (r.fault) j["fault"] = to_json(*r.fault);
  return j;
}

json to_json(const Verdict& v) {
  auto opt = [](const std::optional<int64_t>& x) { return x ? json(*x) : json(nullptr); };
  return {{"outcome", to_string(v.outcome)},
          {"onset_step", opt(v.onset_step)},
          {"failure_step", opt(v.failure_step)},
          {"lead_time", opt(v.lead_time())},
          {"onset_rules", v.onset_rules},
          {"fault", v.fault ? to_json(*v.fault) : json(nullptr)},
          {"steps_run", v.steps_run},
          {"planned_steps", v.planned_steps},
          {"wall_seconds", v.wall_seconds},
          {"hash_chain", v.hash_chain.hex()},
          {"message", v.message}};
}

}  // namespace spikehunt
