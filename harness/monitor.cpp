#include "harness/monitor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <map>
#include <tuple>

#include "base/stats_kernels.h"
#include "harness/monitor_stats.h"
#include "scenarios/optimizers.h"

namespace spikehunt {

using namespace monitor_detail;

// ---- the monitor ----

Monitor::Monitor(Scenario& scenario, const HealthRules& rules)
    : scenario_(scenario), optimizers_(scenario.optimizers()), phase_names_(scenario.phase_names()), judge_(rules, scenario.num_classes()) {
  // Every group of every optimizer, in order (also a group without parameters).
  std::map<std::pair<int, int>, int> group_index;
  for (size_t o = 0; o < optimizers_.size(); ++o) {
    for (size_t g = 0; g < optimizers_[o].optimizer->param_groups().size(); ++g) {
      group_index[{int(o), int(g)}] = int(groups_.size());
      groups_.emplace_back(int(o), int(g));
    }
  }
  for (const ParamSlot& p : parameter_slots(scenario)) {
    params_.push_back({p.name, p.tensor});
    param_group_.push_back(p.optimizer >= 0 ? group_index.at({p.optimizer, p.group}) : -1);
    adaptive_.push_back(p.optimizer >= 0 && normalizes_updates(*optimizers_[size_t(p.optimizer)].optimizer));
  }
  before_copy_.resize(params_.size());
  before_.resize(params_.size());
  spike_scores_ = rules.grad_spike_limit > 0;
}

int Monitor::reserve(int n) {
  const int slot = static_cast<int>(values_.size());
  values_.resize(values_.size() + size_t(n), 0.0);
  return slot;
}

void Monitor::put(int slot, torch::Tensor stats) {
  if (stats.is_cpu() || fail_fast_) {
    // Already computed: read it now (no sync on the CPU) and keep no tensor.
    const torch::Tensor d = stats.to(torch::kFloat64).contiguous();
    std::copy(d.data_ptr<double>(), d.data_ptr<double>() + d.numel(), values_.begin() + slot);
  } else {
    device_.push_back({slot, stats.to(torch::kFloat64).reshape({-1})});
  }
}

void Monitor::put_stats(int slot, const torch::Tensor& t) {
  if (fused(t)) {
    // The fused kernel straight into the host values: no tensor per statistic.
    const auto [norm, max] = stats_f32(t.data_ptr<float>(), t.numel());
    values_[size_t(slot)] = norm;
    values_[size_t(slot) + 1] = max;
  } else {
    put(slot, tensor_stats(t));
  }
}

int Monitor::push_values(const SumSqMax& s) {
  const int slot = reserve(2);
  std::tie(values_[size_t(slot)], values_[size_t(slot) + 1]) = norm_max(s);
  return slot;
}

int Monitor::push_stats(const torch::Tensor& t) {
  const int slot = reserve(2);
  put_stats(slot, t);
  return slot;
}

int Monitor::push_max(const torch::Tensor& t) {
  const int slot = reserve(1);
  if (fused(t)) {
    values_[size_t(slot)] = max_abs_parallel(t.data_ptr<float>(), t.numel());
  } else {
    put(slot, max_abs_stat(t));
  }
  return slot;
}

int Monitor::push_scalar(torch::Tensor scalar) {
  const int slot = reserve(1);
  if (scalar.is_cpu()) {
    values_[size_t(slot)] = scalar.item<double>();  // no tensor ops for one number
  } else {
    put(slot, scalar.reshape({1}));
  }
  return slot;
}

void Monitor::check(Stage stage, std::string name, const torch::Tensor& t, int slot) {
  Check c{stage, std::move(name), {}, slot, t.numel(), std::nullopt};
  if (t.is_cpu()) {
    // On the CPU the statistic is already computed: look at it now and keep
    // nothing (holding activations past the backward pass costs page faults).
    if (!std::isfinite(values_[size_t(slot)])) c.counts = count_non_finite(t);
  } else {
    c.tensor = t.detach();  // read after the step's one host copy
  }
  checks_.push_back(std::move(c));
  // Fail fast: the value is on the host already (put() copied it at once).
  if (fail_fast_ && world_ == 1 && !std::isfinite(values_[size_t(slot)])) throw FailFast{};
}

void Monitor::restore(const MonitorState& s) {
  chain_ = s.chain;
  judge_.restore(s.judge);
  after_cache_.clear();
}

void Monitor::begin_step(int64_t step, const std::vector<Batch>& batches) {
  torch::NoGradGuard no_grad;
  record_ = StepRecord{};
  values_.clear();
  device_.clear();
  checks_.clear();
  taps_.clear();
  loss_slots_.clear();
  input_slots_.clear();
  output_slots_.clear();
  layers_.assign(params_.size(), LayerSlots{});
  copied_ = false;
  const Batch& first = batches.front();
  record_.step = step;
  record_.phase = first.phase;
  record_.phase_name = first.phase >= 0 && first.phase < int64_t(phase_names_.size()) ? phase_names_[first.phase] : "";
  record_.epoch = first.epoch;
  record_.batch = first.batch;
  record_.micro_batches = int64_t(batches.size());

  // Hashes and the label histogram come from host copies: the batch's own
  // (the engine keeps one), else a device copy of its bytes that joins the
  // step's one host copy in finish_step (a user's loop hands device tensors).
  auto hold = [](const torch::Tensor& host, const torch::Tensor& t) {
    if (host.defined()) return host.contiguous();
    if (t.is_cpu()) return t.detach().contiguous();
    return t.detach().reshape({-1}).view(torch::kUInt8).clone();  // its own bytes: the loop may reuse t
  };
  held_.clear();
  for (const Batch& batch : batches) {
    held_.push_back({hold(batch.host_inputs, batch.inputs), hold(batch.host_targets, batch.targets),
                     batch.targets.scalar_type()});
  }
  chain_before_ = chain_;
  if (std::all_of(held_.begin(), held_.end(), [](const Held& h) { return h.inputs.is_cpu() && h.targets.is_cpu(); })) {
    hash_held();
  }
  for (const Batch& batch : batches) {
    input_slots_.push_back(push_max(batch.inputs));
    check(Stage::kForward, "input", batch.inputs, input_slots_.back());
  }
}

void Monitor::hash_held() {
  Hasher inputs, labels;
  for (const Held& h : held_) {
    inputs.update(h.inputs.data_ptr(), h.inputs.nbytes());
    labels.update(h.targets.data_ptr(), h.targets.nbytes());
    if (h.label_type == torch::kInt64) {
      record_.label_histogram.resize(size_t(scenario_.num_classes()), 0);
      std::vector<int64_t> y(h.targets.nbytes() / sizeof(int64_t));
      std::memcpy(y.data(), h.targets.data_ptr(), y.size() * sizeof(int64_t));  // bytes from the host copy: any alignment
      for (int64_t c : y) {
        if (c >= 0 && c < scenario_.num_classes()) ++record_.label_histogram[size_t(c)];
      }
    }
  }
  held_.clear();
  record_.input_hash = inputs.digest();
  record_.label_hash = labels.digest();
  if (world_ == 1) {
    chain_ = chain(chain_, record_.input_hash, record_.label_hash);
  } else {  // chained once every rank's batch is known (gather_ranks)
    local_inputs_ = record_.input_hash;
    local_labels_ = record_.label_hash;
  }
}

void Monitor::after_forward(const torch::Tensor& output) {
  torch::NoGradGuard no_grad;
  output_slots_.push_back(push_max(output));
  check(Stage::kForward, "output", output, output_slots_.back());
}

void Monitor::on_tap(const char* name, const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  const int slot = push_max(t);
  taps_.emplace_back(name, slot);
  check(Stage::kForward, name, t, slot);
}

void Monitor::on_tap_max(const char* name, const torch::Tensor& t, double max_abs) {
  if (!t.is_cpu()) return on_tap(name, t);  // a device value would need a host copy now
  const int slot = reserve(1);
  values_[size_t(slot)] = max_abs;
  taps_.emplace_back(name, slot);
  check(Stage::kForward, name, t, slot);
}

void Monitor::after_loss(const torch::Tensor& loss) {
  torch::NoGradGuard no_grad;
  loss_slots_.push_back(push_scalar(loss.detach()));
  check(Stage::kLoss, "loss", loss, loss_slots_.back());
}

int Monitor::push_spike_score(size_t i, const torch::Tensor& g) {
  // Only adaptive parameters are scored, and those have an optimizer group.
  const int optimizer = groups_[size_t(param_group_[i])].first;
  const std::optional<ParamState> state = param_state(*optimizers_[size_t(optimizer)].optimizer, params_[i].tensor);
  if (!state) return -1;  // the first step: no second moment yet
  for (const NamedTensor& b : state->buffers) {
    if (b.name != "exp_avg_sq" && b.name != "square_avg") continue;
    const torch::Tensor& v = b.tensor;
    if (v.sizes() != g.sizes()) return -1;
    // g² / v, and 0 where v is 0 (a coordinate with no gradient seen yet)
    if (fused(g) && fused(v)) {  // one pass over g and v, nothing written
      const SumSqMax s = sumsq_max_square_ratio_parallel(g.data_ptr<float>(), v.data_ptr<float>(), g.numel());
      return push_values(s);
    }
    return push_stats(g.to(v.dtype()).square().div_(v).masked_fill_(v <= 0, 0));
  }
  return -1;
}

void Monitor::after_backward() {
  torch::NoGradGuard no_grad;
  // Backward produces gradients from the last layer to the first: check them
  // in that order, once the statistics of all of them are computed together.
  StatsQueue queue;
  for (size_t i = params_.size(); i-- > 0;) {
    const torch::Tensor& g = params_[i].tensor.grad();
    if (!g.defined()) continue;
    if (fused(g)) {
      layers_[i].grad = reserve(2);
      queue.add(StatsTask::kPlain, g, nullptr, layers_[i].grad);
    } else {
      layers_[i].grad = push_stats(g);
    }
  }
  queue.run(values_);
  for (size_t i = params_.size(); i-- > 0;) {
    const torch::Tensor& g = params_[i].tensor.grad();
    if (!g.defined()) continue;
    check(Stage::kBackward, params_[i].name + ".grad", g, layers_[i].grad);
    if (adaptive_[i] && spike_scores_) layers_[i].spike = push_spike_score(i, g);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& t = params_[i].tensor;
    if (i < after_cache_.size() && after_cache_[i].data == t.data_ptr() &&
        after_cache_[i].version == int64_t(t._version())) {  // unchanged since the last step's "after"
      values_.push_back(after_cache_[i].norm);
      values_.push_back(after_cache_[i].max);
      layers_[i].before = static_cast<int>(values_.size()) - 2;
    } else {
      layers_[i].before = push_stats(t);
    }
    if (i < lent_.size() && lent_[i].copy.defined() && lent_[i].version == int64_t(t._version())) {
      before_[i] = lent_[i].copy;  // the parameter's copy entering the step (lend_before), still its value
      continue;
    }
    torch::Tensor& copy = before_copy_[i];
    if (!copy.defined() || copy.sizes() != t.sizes() || copy.dtype() != t.dtype() || copy.device() != t.device()) {
      copy = torch::empty_like(t, torch::MemoryFormat::Contiguous);
    }
    before_[i] = copy;
    if (t.is_cpu() && t.is_contiguous() && t.nbytes() <= (size_t{1} << 20)) {
      std::memcpy(copy.data_ptr(), t.data_ptr(), t.nbytes());  // a small tensor: no dispatch, no thread team
    } else {
      copy.copy_(t.detach());
    }
  }
  copied_ = true;
}

StepRecord Monitor::finish_step() {
  torch::NoGradGuard no_grad;
  // Nothing is left to cut short: the step's one host copy reads the rest.
  struct Restore {
    bool& flag;
    bool was;
    ~Restore() { flag = was; }
  } restore_fail_fast{fail_fast_, fail_fast_};
  fail_fast_ = false;
  read_after_step();
  copy_to_host();
  const std::optional<Fault> rank_fault = world_ > 1 ? gather_ranks() : std::nullopt;
  fill_record();
  localize(rank_fault);
  judge_.judge(record_);
  checks_.clear();  // release the step's tensors
  device_.clear();
  lent_.clear();
  std::fill(before_.begin(), before_.end(), torch::Tensor());
  return std::move(record_);
}

// The parameters after the step, their update and the optimizer's state: each one's slot, its
// statistics (queued, or on the device) and its check.
void Monitor::read_after_step() {
  // Slots and checks in the canonical order (each parameter, then the state
  // tensors, in parameter order), which is the order a fault is localized in;
  // the statistics themselves from the last layer the optimizer updated to the
  // first, while its memory is most likely still in cache.
  const std::vector<NamedTensor> state = scenario_.optimizer_state();
  std::vector<int> state_slot;                                  // per state tensor, in order
  std::vector<std::vector<size_t>> layer_state(params_.size());  // indices into state
  for (size_t i = 0; i < params_.size(); ++i) layers_[i].after = reserve(2);
  size_t p = 0;  // state tensors are named "<param>.<buffer>", in parameter order
  for (const NamedTensor& s : state) {
    while (p < params_.size() && s.name.compare(0, params_[p].name.size() + 1, params_[p].name + ".") != 0) ++p;
    if (p == params_.size()) break;
    state_slot.push_back(reserve(2));
    layers_[p].state.push_back(state_slot.back());
    layer_state[p].push_back(state_slot.size() - 1);
  }
  StatsQueue queue;
  // slot's statistics of t, and t copied into `copy` (when defined) from the same read.
  auto stats = [&](int slot, const torch::Tensor& t, const torch::Tensor& copy) {
    if (fused(t)) {
      queue.add(StatsTask::kPlain, t, nullptr, slot, -1, copy);
      return;
    }
    put_stats(slot, t);
    if (copy.defined()) copy.copy_(t.detach());
  };
  if (copied_) {
    for (size_t i = 0; i < params_.size(); ++i) layers_[i].update = reserve(2);
  }
  for (size_t i = params_.size(); i-- > 0;) {
    for (size_t j : layer_state[i]) stats(state_slot[j], state[j].tensor, copy_target("optim." + state[j].name, state[j].tensor));
    const torch::Tensor& t = params_[i].tensor;
    const torch::Tensor copy = copy_target("model." + params_[i].name, t);
    if (!copied_) {
      stats(layers_[i].after, t, copy);
      continue;
    }
    // The step (before − after, from the copy and the parameter) and the
    // parameter after it: one read of each.
    const torch::Tensor& before = before_[i];
    if (fused(before) && fused(t)) {
      queue.add(StatsTask::kDifferenceAndPlain, before, &t, layers_[i].update, layers_[i].after, copy);
      continue;
    }
    stats(layers_[i].after, t, copy);
    // A copy of the monitor's own is overwritten; one lent by lend_before() is read only.
    put_stats(layers_[i].update, before.is_same(before_copy_[i]) ? before_copy_[i].sub_(t.detach()) : before - t.detach());
  }
  queue.run(values_);
  copy_after_ = nullptr;
  copy_cursor_ = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    check(Stage::kOptimizerStep, params_[i].name, params_[i].tensor, layers_[i].after);
  }
  for (size_t j = 0; j < state_slot.size(); ++j) check(Stage::kOptimizerStep, state[j].name, state[j].tensor, state_slot[j]);
}

// The one host copy of the step: the statistics still on the device, then the bytes of the batch
// tensors held there, as one byte tensor; then the batch's hashes.
void Monitor::copy_to_host() {
  std::vector<torch::Tensor> parts;
  for (const auto& [slot, stats] : device_) parts.push_back(stats.view(torch::kUInt8));
  for (const Held& h : held_) {
    for (const torch::Tensor& t : {h.inputs, h.targets}) {
      if (!t.is_cpu()) parts.push_back(t);
    }
  }
  if (!parts.empty()) {
    const torch::Tensor host = torch::cat(parts).to(torch::kCPU);
    const uint8_t* b = host.data_ptr<uint8_t>();
    for (const auto& [slot, stats] : device_) {
      std::memcpy(values_.data() + slot, b, size_t(stats.numel()) * sizeof(double));
      b += stats.numel() * int64_t(sizeof(double));
    }
    for (Held& h : held_) {
      for (torch::Tensor* t : {&h.inputs, &h.targets}) {
        if (t->is_cpu()) continue;
        const int64_t n = t->numel();
        *t = host.narrow(0, b - host.data_ptr<uint8_t>(), n);
        b += n;
      }
    }
  }
  if (!held_.empty()) hash_held();
}

// The step's record from its slots: loss, inputs, outputs, taps, each group's learning rate and
// state, each parameter's statistics and their totals.
void Monitor::fill_record() {
  for (LayerSlots& l : layers_) {
    if (l.before < 0) l.before = l.after;  // cut short before the optimizer step: unchanged
  }
  const double* v = values_.data();
  auto at = [&](int slot) { return slot < 0 ? 0.0 : v[slot]; };
  auto max_at = [&](int slot) { return slot < 0 ? 0.0 : v[slot + 1]; };
  after_cache_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& t = params_[i].tensor;
    after_cache_[i] = {t.data_ptr(), int64_t(t._version()), at(layers_[i].after), max_at(layers_[i].after)};
  }

  // max that propagates NaN, like the device reductions
  auto fold_max = [](double acc, double x) { return std::isnan(x) || std::isnan(acc) ? NAN : std::max(acc, x); };
  StepRecord& r = record_;
  double loss_sum = 0;
  for (int slot : loss_slots_) loss_sum += at(slot);
  r.loss = loss_slots_.size() <= 1 ? loss_sum : loss_sum / double(loss_slots_.size());
  for (int slot : input_slots_) r.input_max = fold_max(r.input_max, at(slot));
  for (int slot : output_slots_) r.output_max = fold_max(r.output_max, at(slot));
  for (const auto& tap : taps_) {  // a tap seen in several micro-batches: its max over them
    const double m = at(tap.second);
    auto same = std::find_if(r.taps.begin(), r.taps.end(), [&](const TapStats& t) { return t.name == tap.first; });
    if (same == r.taps.end()) r.taps.push_back({tap.first, m});
    else same->max_abs = fold_max(same->max_abs, m);
    r.activation_max = fold_max(r.activation_max, m);
  }
  // Per optimizer group: the learning rate it applied (its state below).
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto [o, k] = groups_[g];
    r.groups.push_back({optimizers_[size_t(o)].name, k,
                        group_lr(optimizers_[size_t(o)].optimizer->param_groups()[size_t(k)]), 0, 0});
  }
  double grad_sq = 0, before_sq = 0, after_sq = 0, state_sq = 0, update_sq = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const LayerSlots& s = layers_[i];
    LayerStats l;
    l.name = params_[i].name;
    l.is_weight = params_[i].tensor.dim() >= 2;
    l.grad_norm = at(s.grad);
    l.grad_max = max_at(s.grad);
    l.param_norm_before = at(s.before);
    l.param_norm_after = at(s.after);
    double sq = 0;
    for (int k : s.state) {
      sq += at(k) * at(k);
      l.state_max = fold_max(l.state_max, max_at(k));
    }
    l.state_norm = std::sqrt(sq);
    l.update_norm = at(s.update);
    l.adaptive = adaptive_[i];
    l.grad_spike_score = max_at(s.spike);
    r.grad_spike_score = fold_max(r.grad_spike_score, l.grad_spike_score);
    const double lr = param_group_[i] >= 0 ? r.groups[size_t(param_group_[i])].lr : 0.0;
    const int64_t n = params_[i].tensor.numel();
    if (l.adaptive && lr > 0 && n > 0) {
      l.update_ratio = l.update_norm / (lr * std::sqrt(double(n)));
      r.update_ratio = fold_max(r.update_ratio, l.update_ratio);
    }
    update_sq += l.update_norm * l.update_norm;
    grad_sq += l.grad_norm * l.grad_norm;
    before_sq += l.param_norm_before * l.param_norm_before;
    after_sq += l.param_norm_after * l.param_norm_after;
    state_sq += sq;
    r.grad_max = fold_max(r.grad_max, l.grad_max);
    r.state_max = fold_max(r.state_max, l.state_max);
    r.layers.push_back(std::move(l));
  }
  // Per optimizer group: its state.
  std::vector<double> group_sq(groups_.size(), 0.0);
  for (size_t i = 0; i < params_.size(); ++i) {
    const int g = param_group_[i];
    if (g < 0) continue;
    group_sq[size_t(g)] += r.layers[i].state_norm * r.layers[i].state_norm;
    r.groups[size_t(g)].state_max = fold_max(r.groups[size_t(g)].state_max, r.layers[i].state_max);
  }
  for (size_t g = 0; g < groups_.size(); ++g) r.groups[g].state_norm = std::sqrt(group_sq[g]);
  if (!r.groups.empty()) r.lr = r.groups.front().lr;
  r.grad_norm = std::sqrt(grad_sq);
  r.param_norm_before = std::sqrt(before_sq);
  r.param_norm_after = std::sqrt(after_sq);
  r.state_norm = std::sqrt(state_sq);
  r.update_norm = std::sqrt(update_sq);
}

// The first non-finite tensor in stage order (its counts read only now), or the ranks' fault.
void Monitor::localize(const std::optional<Fault>& rank_fault) {
  StepRecord& r = record_;
  auto at = [&](int slot) { return slot < 0 ? 0.0 : values_[size_t(slot)]; };
  if (world_ > 1) r.fault = rank_fault;
  for (const Check& c : checks_) {
    if (world_ > 1) break;  // gathered: every rank's tensors
    if (std::isfinite(at(c.slot))) continue;
    const NonFiniteCounts n = c.counts ? *c.counts : count_non_finite(c.tensor);
    r.fault = Fault{c.name, c.stage, n.nan, n.pos_inf, n.neg_inf, c.numel};
    break;
  }
}

void Monitor::abandon_step() {
  chain_ = chain_before_;
  held_.clear();
  values_.clear();
  device_.clear();
  checks_.clear();  // release the step's tensors
  taps_.clear();
  copied_ = false;
  copy_after_ = nullptr;
  lent_.clear();
  std::fill(before_.begin(), before_.end(), torch::Tensor());
}

torch::Tensor Monitor::copy_target(const std::string& name, const torch::Tensor& t) {
  if (copy_after_ == nullptr) return {};
  std::vector<StateCopy>& ready = *copy_after_;
  // The names come in the same order every step: look where the last one was found first.
  auto it = copy_cursor_ < ready.size() && ready[copy_cursor_].name == name
                ? ready.begin() + std::ptrdiff_t(copy_cursor_)
                : std::find_if(ready.begin(), ready.end(), [&](const StateCopy& c) { return c.name == name; });
  if (it == ready.end()) it = ready.insert(ready.end(), StateCopy{name, {}, nullptr, -1});
  copy_cursor_ = size_t(it - ready.begin()) + 1;
  torch::Tensor& b = it->copy;
  if (!b.defined() || b.sizes() != t.sizes() || b.dtype() != t.dtype() || b.device() != t.device() || !b.is_contiguous()) {
    b = torch::empty_like(t, torch::MemoryFormat::Contiguous);
  }
  it->source = t.data_ptr();
  it->version = int64_t(t._version());
  return b;
}

void Monitor::lend_before(const std::vector<NamedTensor>& entering) {
  lent_.assign(params_.size(), Lent{});
  for (size_t i = 0; i < params_.size() && i < entering.size(); ++i) {
    const torch::Tensor& t = params_[i].tensor;
    const torch::Tensor& c = entering[i].tensor;
    if (entering[i].name != "model." + params_[i].name || !holds_copy_of(c, t)) {
      continue;
    }
    lent_[i] = {c, int64_t(t._version())};
  }
}

}  // namespace spikehunt
