// doctor/references.cpp — what a correct program of the task's kind is judged
// by: the task's skill on held-out data (0 at chance, read from the outputs'
// and targets' shapes: accuracy over the majority's share, AUC, correlation),
// the reference loss for those shapes, and the program's loss against it.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include <ATen/CPUGeneratorImpl.h>

#include "base/number_format.h"
#include "harness/doctor/signs.h"
#include "harness/trainer.h"
#include "scenarios/models.h"
#include "scenarios/optimizers.h"

namespace spikehunt::doctor_detail {

namespace {

bool integer_ids(const torch::Tensor& y) {
  return y.defined() && !y.is_floating_point() && !y.is_complex() && y.scalar_type() != torch::kBool;
}

bool binary_values(const torch::Tensor& y) {
  return y.is_floating_point() && ((y == 0) | (y == 1)).all().item<bool>();
}

// Area under the ROC curve of scores for 0/1 labels (ties counted half); NAN with one class.
double auc(const torch::Tensor& scores, const torch::Tensor& labels) {
  const torch::Tensor s = scores.to(torch::kFloat64).flatten(), y = labels.to(torch::kFloat64).flatten();
  const int64_t pos = y.sum().item<int64_t>(), n = y.numel();
  if (pos == 0 || pos == n) return NAN;
  // Mean rank of the positives (average ranks for ties).
  const torch::Tensor order = std::get<1>(s.sort());
  const torch::Tensor sorted = s.index_select(0, order);
  std::vector<double> ranks(static_cast<size_t>(n));
  const double* v = sorted.data_ptr<double>();
  const int64_t* o = order.data_ptr<int64_t>();
  for (int64_t i = 0; i < n;) {
    int64_t j = i;
    while (j + 1 < n && v[j + 1] == v[i]) ++j;
    for (int64_t k = i; k <= j; ++k) ranks[size_t(o[k])] = 0.5 * double(i + j) + 1;
    i = j + 1;
  }
  const double* yy = y.data_ptr<double>();
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += yy[i] > 0.5 ? ranks[size_t(i)] : 0;
  return (sum - double(pos) * double(pos + 1) / 2) / (double(pos) * double(n - pos));
}

}  // namespace

Skill task_skill(const torch::Tensor& outputs, const torch::Tensor& targets) {
  Skill k;
  if (!outputs.defined() || !targets.defined() || outputs.dim() == 0 || targets.dim() == 0) return k;
  torch::NoGradGuard no_grad;
  const torch::Tensor out = outputs.detach().to(torch::kCPU).to(torch::kFloat64);
  const torch::Tensor y = targets.detach().to(torch::kCPU);
  if (!torch::isfinite(out).all().item<bool>()) {
    k.metric = "non-finite outputs";
    return k;
  }
  // Class ids: (B) against (B, C), or (B, T) against (B, T, C); ids outside [0, C) (an ignore index) left out.
  if (integer_ids(y) && out.dim() == y.dim() + 1 && out.sizes().slice(0, y.dim()) == y.sizes() && out.size(-1) > 1) {
    const int64_t c = out.size(-1);
    const torch::Tensor ids = y.to(torch::kInt64).flatten();
    const torch::Tensor keep = (ids >= 0) & (ids < c);
    if (keep.sum().item<int64_t>() == 0) return k;
    const torch::Tensor labels = ids.masked_select(keep);
    const torch::Tensor predicted = out.reshape({-1, c}).argmax(1).masked_select(keep);
    const double accuracy = (predicted == labels).to(torch::kFloat64).mean().item<double>();
    const double majority =
        torch::bincount(labels, {}, c).max().item<double>() / double(labels.numel());
    k.metric = "accuracy";
    k.raw = accuracy;
    k.chance = majority;
    k.value = majority < 1 ? (accuracy - majority) / (1 - majority) : 0;
    return k;
  }
  if (!y.is_floating_point() || out.numel() != y.numel() || out.size(0) != y.size(0)) return k;
  const torch::Tensor o2 = out.reshape({out.size(0), -1}), y2 = y.to(torch::kFloat64).reshape({y.size(0), -1});
  if (binary_values(y2)) {  // binary or multi-label targets: the mean AUC of the columns that hold both
    double sum = 0;
    int n = 0;
    for (int64_t j = 0; j < o2.size(1); ++j) {
      const double a = auc(o2.select(1, j), y2.select(1, j));
      if (std::isfinite(a)) sum += a, ++n;
    }
    if (n == 0) return k;
    k.metric = "AUC";
    k.raw = sum / n;
    k.chance = 0.5;
    k.value = 2 * k.raw - 1;
    return k;
  }
  // Real targets: the mean correlation of each output column with its target.
  double sum = 0;
  int n = 0;
  for (int64_t j = 0; j < o2.size(1); ++j) {
    const torch::Tensor a = o2.select(1, j) - o2.select(1, j).mean(), b = y2.select(1, j) - y2.select(1, j).mean();
    const double den = std::sqrt(a.square().sum().item<double>() * b.square().sum().item<double>());
    if (den > 0) sum += (a * b).sum().item<double>() / den, ++n;
    else if (b.square().sum().item<double>() > 0) ++n;  // a constant output: no correlation
  }
  if (n == 0) return k;
  k.metric = "correlation";
  k.raw = sum / n;
  k.chance = 0;
  k.value = k.raw;
  return k;
}

LossReference compare_with_reference(Scenario& s, const Batch& b) {
  LossReference r;
  EvalMode eval(s.model());
  torch::NoGradGuard no_grad;
  KeepRng rng;
  // Each part through forward and loss as the code runs them (a scenario's loss may read its forward's batch).
  auto both = [&](const torch::Tensor& x, const torch::Tensor& y) {
    const torch::Tensor o = guarded("forward", [&] { return s.forward(x, Tap()); }).detach();
    if (r.name.empty()) r.name = reference_loss_name(o, y);
    if (r.name.empty()) return std::make_pair(double(NAN), double(NAN));
    return std::make_pair(guarded("loss", [&] { return s.loss(o, y); }).item<double>(), reference_loss(o, y).item<double>());
  };
  std::tie(r.program, r.reference) = both(b.inputs, b.targets);
  if (r.name.empty()) return r;
  const int64_t n = b.inputs.dim() ? b.inputs.size(0) : 0;
  if (n >= 4 && b.targets.dim() && b.targets.size(0) == n) {
    const auto [p1, r1] = both(b.inputs.slice(0, 0, n / 2), b.targets.slice(0, 0, n / 2));
    const auto [p2, r2] = both(b.inputs.slice(0, n / 2), b.targets.slice(0, n / 2));
    r.consistent = r1 > 0 && r2 > 0 && std::fabs(p1 / r1 - p2 / r2) <= 0.01 * std::fabs(p1 / r1);
  }
  return r;
}

std::string reference_loss_name(const torch::Tensor& outputs, const torch::Tensor& targets) {
  if (!outputs.defined() || !targets.defined() || outputs.dim() == 0) return "";
  if (integer_ids(targets) && outputs.dim() == targets.dim() + 1 && outputs.size(-1) > 1 &&
      outputs.sizes().slice(0, targets.dim()) == targets.sizes()) {
    return "cross-entropy";
  }
  if (targets.is_floating_point() && outputs.numel() == targets.numel()) {
    return binary_values(targets) ? "binary cross-entropy on the logits" : "mean squared error";
  }
  return "";
}

torch::Tensor reference_loss(const torch::Tensor& outputs, const torch::Tensor& targets) {
  namespace F = torch::nn::functional;
  const std::string name = reference_loss_name(outputs, targets);
  if (name == "cross-entropy") {
    return F::cross_entropy(outputs.reshape({-1, outputs.size(-1)}).to(torch::kFloat32),
                            targets.reshape({-1}).to(torch::kInt64), F::CrossEntropyFuncOptions().ignore_index(-100));
  }
  if (name == "binary cross-entropy on the logits") {
    return F::binary_cross_entropy_with_logits(outputs.reshape(targets.sizes()).to(torch::kFloat32),
                                               targets.to(torch::kFloat32));
  }
  if (name == "mean squared error") return F::mse_loss(outputs.reshape(targets.sizes()).to(torch::kFloat32), targets.to(torch::kFloat32));
  return {};
}


}  // namespace spikehunt::doctor_detail
