#include "harness/monitor.h"

#include <algorithm>
#include <cmath>

namespace spikehunt {

// ---- per-tensor statistics ----

torch::Tensor max_abs_scalar(const torch::Tensor& t) {
  if (t.numel() == 0) return torch::zeros({}, t.options().dtype(torch::kFloat64));
  return t.detach().abs().max().to(torch::kFloat64);  // max propagates NaN
}

torch::Tensor norm_scalar(const torch::Tensor& t) {
  torch::Tensor x = t.detach();
  if (x.numel() == 0) return torch::zeros({}, x.options().dtype(torch::kFloat64));
  if (x.scalar_type() == torch::kFloat64) {
    // A double's square can overflow: scale by max |x| first.
    torch::Tensor m = x.abs().max();
    torch::Tensor safe = torch::where(m > 0, m, torch::ones_like(m));
    torch::Tensor n = torch::linalg_vector_norm(x / safe, 2) * safe;
    return torch::where(torch::isinf(m), m, n);  // an Inf stays Inf, not NaN
  }
  // float32/16/bf16: squares of a float32 fit a double, so plain accumulation is exact enough.
  return torch::linalg_vector_norm(x, 2, c10::nullopt, false, torch::kFloat64);
}

NonFiniteCounts count_non_finite(const torch::Tensor& t) {
  torch::Tensor x = t.detach();
  if (!x.is_floating_point() || x.numel() == 0) return {};
  return {torch::isnan(x).sum().item<int64_t>(), torch::isposinf(x).sum().item<int64_t>(),
          torch::isneginf(x).sum().item<int64_t>()};
}

TensorSummary summarize(const torch::Tensor& t) {
  TensorSummary s;
  s.numel = t.numel();
  if (s.numel == 0) return s;
  torch::Tensor x = t.is_floating_point() ? t : t.to(torch::kFloat64);
  s.norm = norm_scalar(x).item<double>();
  s.max_abs = max_abs_scalar(x).item<double>();
  s.counts = count_non_finite(x);
  return s;
}

// ---- the monitor ----

Monitor::Monitor(Scenario& scenario, const HealthRules& rules)
    : scenario_(scenario),
      params_(named_parameters(scenario.model())),
      phase_names_(scenario.phase_names()),
      judge_(rules) {}

int Monitor::push(torch::Tensor scalar) {
  scalars_.push_back(std::move(scalar));
  return static_cast<int>(scalars_.size()) - 1;
}

void Monitor::check(Stage stage, std::string name, const torch::Tensor& t, int slot) {
  checks_.push_back({stage, std::move(name), t.detach(), slot});
}

void Monitor::begin_step(const Batch& batch) {
  torch::NoGradGuard no_grad;
  record_ = StepRecord{};
  scalars_.clear();
  checks_.clear();
  taps_.clear();
  layers_.assign(params_.size(), LayerSlots{});
  record_.step = batch.step;
  record_.phase = batch.phase;
  record_.phase_name = batch.phase < int64_t(phase_names_.size()) ? phase_names_[batch.phase] : "";
  record_.epoch = batch.epoch;
  record_.batch = batch.batch;

  // Hashes and the label histogram come from the host copies: no device sync.
  const torch::Tensor hx = (batch.host_inputs.defined() ? batch.host_inputs : batch.inputs.to(torch::kCPU)).contiguous();
  const torch::Tensor hy = (batch.host_targets.defined() ? batch.host_targets : batch.targets.to(torch::kCPU)).contiguous();
  record_.input_hash = hash_bytes(hx.data_ptr(), hx.nbytes());
  record_.label_hash = hash_bytes(hy.data_ptr(), hy.nbytes());
  chain_ = chain(chain_, record_.input_hash, record_.label_hash);
  if (hy.scalar_type() == torch::kInt64) {
    record_.label_histogram.assign(size_t(scenario_.num_classes()), 0);
    const int64_t* y = hy.data_ptr<int64_t>();
    for (int64_t i = 0; i < hy.numel(); ++i) {
      if (y[i] >= 0 && y[i] < scenario_.num_classes()) ++record_.label_histogram[y[i]];
    }
  }
  input_slot_ = push(max_abs_scalar(batch.inputs));
  check(Stage::kForward, "input", batch.inputs, input_slot_);
}

void Monitor::on_tap(const char* name, const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  const int slot = push(max_abs_scalar(t));
  taps_.emplace_back(name, slot);
  check(Stage::kForward, name, t, slot);
}

void Monitor::after_loss(const torch::Tensor& loss) {
  torch::NoGradGuard no_grad;
  loss_slot_ = push(loss.detach().to(torch::kFloat64).reshape({}));
  check(Stage::kLoss, "loss", loss, loss_slot_);
}

void Monitor::after_backward() {
  torch::NoGradGuard no_grad;
  // Backward produces gradients from the last layer to the first: check them in that order.
  for (size_t i = params_.size(); i-- > 0;) {
    const torch::Tensor& g = params_[i].tensor.grad();
    if (!g.defined()) continue;
    LayerSlots& l = layers_[i];
    l.grad_norm = push(norm_scalar(g));
    l.grad_max = push(max_abs_scalar(g));
    check(Stage::kBackward, params_[i].name + ".grad", g, l.grad_norm);
  }
  for (size_t i = 0; i < params_.size(); ++i) layers_[i].before = push(norm_scalar(params_[i].tensor));
}

StepRecord Monitor::finish_step() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    LayerSlots& l = layers_[i];
    l.after = push(norm_scalar(params_[i].tensor));
    check(Stage::kOptimizerStep, params_[i].name, params_[i].tensor, l.after);
  }
  size_t p = 0;  // state tensors are named "<param>.<buffer>", in parameter order
  for (const NamedTensor& s : scenario_.optimizer_state()) {
    while (p < params_.size() && s.name.compare(0, params_[p].name.size() + 1, params_[p].name + ".") != 0) ++p;
    if (p == params_.size()) break;
    const int n = push(norm_scalar(s.tensor));
    layers_[p].state_norm.push_back(n);
    layers_[p].state_max.push_back(push(max_abs_scalar(s.tensor)));
    check(Stage::kOptimizerStep, s.name, s.tensor, n);
  }

  // The one host copy of the step.
  const torch::Tensor host = torch::stack(scalars_).to(torch::kCPU);
  const double* v = host.data_ptr<double>();
  auto at = [&](int slot) { return slot < 0 ? 0.0 : v[slot]; };

  // max that propagates NaN, like the device reductions
  auto fold_max = [](double acc, double x) { return std::isnan(x) || std::isnan(acc) ? NAN : std::max(acc, x); };
  StepRecord& r = record_;
  r.loss = at(loss_slot_);
  r.input_max = at(input_slot_);
  for (const auto& [name, slot] : taps_) {
    r.taps.push_back({name, at(slot)});
    r.activation_max = fold_max(r.activation_max, at(slot));
  }
  double grad_sq = 0, before_sq = 0, after_sq = 0, state_sq = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const LayerSlots& s = layers_[i];
    LayerStats l;
    l.name = params_[i].name;
    l.is_weight = params_[i].tensor.dim() >= 2;
    l.grad_norm = at(s.grad_norm);
    l.grad_max = at(s.grad_max);
    l.param_norm_before = at(s.before);
    l.param_norm_after = at(s.after);
    double sq = 0;
    for (int k : s.state_norm) sq += at(k) * at(k);
    l.state_norm = std::sqrt(sq);
    for (int k : s.state_max) l.state_max = fold_max(l.state_max, at(k));
    grad_sq += l.grad_norm * l.grad_norm;
    before_sq += l.param_norm_before * l.param_norm_before;
    after_sq += l.param_norm_after * l.param_norm_after;
    state_sq += sq;
    r.grad_max = fold_max(r.grad_max, l.grad_max);
    r.state_max = fold_max(r.state_max, l.state_max);
    r.layers.push_back(std::move(l));
  }
  r.grad_norm = std::sqrt(grad_sq);
  r.param_norm_before = std::sqrt(before_sq);
  r.param_norm_after = std::sqrt(after_sq);
  r.state_norm = std::sqrt(state_sq);

  // Localize: the first non-finite tensor in stage order. Counts only now.
  for (const Check& c : checks_) {
    if (std::isfinite(at(c.slot))) continue;
    const NonFiniteCounts n = count_non_finite(c.tensor);
    r.fault = Fault{c.name, c.stage, n.nan, n.pos_inf, n.neg_inf, c.tensor.numel()};
    break;
  }
  judge_.judge(r);
  checks_.clear();  // release the step's tensors
  scalars_.clear();
  return std::move(record_);
}

}  // namespace spikehunt
