// doctor/model.cpp — the model as the training code hands it over, read at
// step 0: units that start identical, an initialization too large for the
// layers' fan-in, one module registered under several names, weights frozen,
// the positions of a sequence the output reads. KeepRng (common.h) lives here.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "base/hash.h"
#include "base/number_format.h"
#include "harness/doctor/signs.h"
#include "harness/trainer.h"

namespace spikehunt::doctor_detail {

VitalSign init_symmetry(Scenario& s) {
  VitalSign v = sign("init_symmetry");
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  for (const auto& p : s.model().named_parameters()) {
    if (p.value().dim() >= 2 && p.value().size(0) >= 2) weights.emplace_back(p.key(), p.value().detach());
  }
  std::vector<std::string> identical;
  std::string example;
  for (size_t i = 0; i + 1 < weights.size(); ++i) {  // the last weight (the output layer) may start equal
    const torch::Tensor rows = weights[i].second.reshape({weights[i].second.size(0), -1}).to(torch::kFloat64);
    const double spread = (rows - rows[0]).abs().max().item<double>();
    const double size = rows[0].abs().max().item<double>();
    if (spread == 0 && size > 0) {
      identical.push_back(weights[i].first);
      if (example.empty()) {
        example = weights[i].first + ": all " + std::to_string(rows.size(0)) + " rows equal, largest |w| " + fmt(size);
      }
    }
  }
  v.data = {{"weights_checked", int64_t(weights.size() > 0 ? weights.size() - 1 : 0)}, {"identical_units", identical}};
  v.evidence = identical.empty()
                   ? "at step 0, no hidden weight has identical units (rows), of " +
                         std::to_string(weights.size() > 0 ? weights.size() - 1 : 0)
                   : "at step 0, " + std::to_string(identical.size()) + " weight(s) have every unit identical: " + example;
  if (!identical.empty()) {
    v.named = identical;
    fail(v, kRankInitSymmetry,
         "the units of " + list(identical, 4) + " are identical at step 0 (symmetric initialization: " + example +
             "): units that start equal get equal gradients and can stay equal",
         "initialize weights randomly (the layers' default init, or nn.init.kaiming_uniform_ / xavier_uniform_); a "
         "constant or zero fill is only for an output layer or a residual branch meant to start at zero");
  }
  return v;
}

VitalSign shared_modules(Scenario& s) {
  VitalSign v = sign("shared_modules");
  const std::vector<std::vector<std::string>> groups = s.shared_modules();
  // List multiplication's signature: one module under indexed names of one container.
  auto indexed = [](const std::string& name, std::string* container) {
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos || dot + 1 == name.size()) return false;
    for (size_t i = dot + 1; i < name.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
    }
    *container = name.substr(0, dot);
    return true;
  };
  std::vector<std::string> found;
  std::string example;
  for (const std::vector<std::string>& g : groups) {
    std::map<std::string, std::vector<std::string>> by_container;
    for (const std::string& name : g) {
      std::string container;
      if (indexed(name, &container)) by_container[container].push_back(name);
    }
    for (const auto& [container, names] : by_container) {
      if (names.size() < 2) continue;
      found.push_back(container);
      if (example.empty()) {
        example = "the same module is " + list(names, 4) + " (" + std::to_string(names.size()) + " entries of " +
                  container + ")";
      }
    }
  }
  v.data = {{"shared_groups", groups.size()}, {"containers", found}};
  v.evidence = groups.empty() ? "every submodule is reached by one name"
                              : std::to_string(groups.size()) + " submodule(s) reached by several names" +
                                    (example.empty() ? "" : ": " + example);
  if (!found.empty()) {
    v.named = found;
    fail(v, kRankInitSymmetry,
         example + ": the layers the code lays out share one set of weights ([block] * n repeats a reference to one "
         "module, not n modules)",
         "build each entry: nn.ModuleList([Block(...) for _ in range(n)]), or copy.deepcopy(block) per entry; share "
         "a module across entries only on purpose");
  }
  return v;
}

VitalSign frozen_parameters(Scenario& s) {
  VitalSign v = sign("frozen_parameters");
  int64_t total = 0, trained = 0, weights = 0, trained_weights = 0;
  std::vector<std::string> training, frozen_weights;
  for (const auto& p : s.model().named_parameters()) {
    const torch::Tensor& t = p.value();
    total += t.numel();
    const bool weight = t.dim() >= 2;
    weights += weight;
    if (t.requires_grad()) {
      trained += t.numel();
      trained_weights += weight;
      training.push_back(p.key());
    } else if (weight) {
      frozen_weights.push_back(p.key());
    }
  }
  v.data = {{"parameters", total}, {"trained", trained}, {"weights", weights}, {"trained_weights", trained_weights},
            {"training", training}};
  v.evidence = std::to_string(trained) + " of " + std::to_string(total) + " parameters require grad; " +
               std::to_string(trained_weights) + " of " + std::to_string(weights) + " weights (tensors of 2 or more "
               "dimensions)";
  if (weights > 0 && trained_weights == 0) {
    v.named = frozen_weights;
    const double share = total ? 100.0 * double(total - trained) / double(total) : 100.0;
    fail(v, kRankCoverage,
         "every weight is frozen (requires_grad=False): " + list(frozen_weights, 4) + ", " + fmt(share) +
             "% of the parameters; " +
             (training.empty() ? std::string("nothing trains")
                               : "what trains is " + std::to_string(training.size()) + " one-dimensional tensor(s) (" +
                                     list(training, 4) + "): no layer can change what it computes"),
         "unfreeze the layers meant to learn (at least the output layer when fine-tuning): a name filter such as "
         "`if \"bn\" not in name: p.requires_grad = False` freezes more than intended");
  }
  return v;
}

// The scale of each layer's output at step 0 against its fan-in: a Linear or convolution whose
// weights have a standard deviation of s over a fan-in of n multiplies its input's scale by about
// s sqrt(n); the modules' default initializations keep that near 1 (0.58 for PyTorch's Linear, 1.41
// for Kaiming's normal), a plain normal_() (std 1) makes it sqrt(n).
VitalSign init_scale(Scenario& s, const std::vector<ModuleOutput>& modules, const torch::Tensor& outputs) {
  VitalSign v = sign("init_scale");
  struct Layer {
    std::string name, kind;
    double gain = NAN, amplification = NAN, std = NAN;
    int64_t fan_in = 0;
  };
  std::vector<Layer> layers;
  for (const ModuleOutput& m : modules) {
    if (m.fan_in <= 0 || !std::isfinite(m.weight_std)) continue;
    Layer l{m.name, m.kind, m.weight_std * std::sqrt(double(m.fan_in)), NAN, m.weight_std, m.fan_in};
    if (std::isfinite(m.input_rms) && m.input_rms > 0 && m.non_finite == 0) l.amplification = m.rms / m.input_rms;
    layers.push_back(l);
  }
  if (layers.empty()) {  // LibTorch modules: their weights
    torch::NoGradGuard no_grad;
    for (const auto& m : s.model().named_modules("", /*include_self=*/false)) {
      torch::Tensor w;
      std::string kind;
      if (auto* l = dynamic_cast<torch::nn::LinearImpl*>(m.value().get())) w = l->weight, kind = "Linear";
      else if (auto* c = dynamic_cast<torch::nn::Conv2dImpl*>(m.value().get())) w = c->weight, kind = "Conv2d";
      else if (auto* c1 = dynamic_cast<torch::nn::Conv1dImpl*>(m.value().get())) w = c1->weight, kind = "Conv1d";
      if (!w.defined() || w.dim() < 2) continue;
      const int64_t fan_in = w[0].numel();
      const double sd = w.to(torch::kFloat64).std().item<double>();
      layers.push_back({m.key(), kind, sd * std::sqrt(double(fan_in)), NAN, sd, fan_in});
    }
  }
  if (layers.empty()) return skipped("init_scale", "no Linear or convolution whose weights could be read");
  double out_rms = NAN, out_max = NAN;
  bool out_finite = true;
  if (outputs.defined() && outputs.is_floating_point() && outputs.numel()) {
    const torch::Tensor o = outputs.detach().to(torch::kFloat64);
    out_finite = torch::isfinite(o).all().item<bool>();
    const torch::Tensor f = torch::where(torch::isfinite(o), o, torch::zeros_like(o));
    out_rms = f.square().mean().sqrt().item<double>();
    out_max = f.abs().max().item<double>();
  }
  std::vector<std::string> hot;
  std::string detail, table;
  nlohmann::json rows = nlohmann::json::array();
  for (const Layer& l : layers) {
    rows.push_back({{"layer", l.name}, {"kind", l.kind}, {"fan_in", l.fan_in}, {"weight_std", number(l.std)},
                    {"gain", number(l.gain)}, {"output_over_input_rms", number(l.amplification)}});
    table += (table.empty() ? "" : ", ") + l.name + " " + fmt(l.gain);
    const double measured = std::isfinite(l.amplification) ? l.amplification : l.gain;
    if (l.gain >= 8 && measured >= 8) {
      hot.push_back(l.name);
      if (hot.size() <= 3) {
        detail += (detail.empty() ? "" : "; ") + l.name + " (" + l.kind + ", fan-in " + std::to_string(l.fan_in) +
                  ") has weights of std " + fmt(l.std) + " where 1/sqrt(fan-in) = " + fmt(1 / std::sqrt(double(l.fan_in))) +
                  (std::isfinite(l.amplification) ? ", and multiplies its input's rms by " + fmt(l.amplification)
                                                  : ", " + fmt(l.gain) + "x that");
      }
    }
  }
  v.data = {{"layers", rows}, {"output_rms", number(out_rms)}, {"output_max", number(out_max)}, {"output_finite", out_finite}};
  v.evidence = "at step 0, weight std x sqrt(fan-in) per layer: " + table + " (the defaults keep it near 1); outputs rms " +
               fmt(out_rms) + (out_finite ? "" : ", with NaN/Inf");
  if (!hot.empty() && (out_rms >= 30 || !out_finite)) {
    v.named = hot;
    fail(v, kRankInitSymmetry,
         "the initialization is too large for the layers' fan-in: " + detail + "; at step 0 the outputs have rms " +
             fmt(out_rms) + (out_finite ? " (max " + fmt(out_max) + ")" : " and hold NaN/Inf") +
             ", so the first loss and gradients are of that scale",
         "initialize with the modules' defaults or a fan-in-scaled init (nn.init.kaiming_normal_, xavier_uniform_, "
         "normal_(std=1/sqrt(fan_in))); normal_() without a std draws std 1");
  }
  return v;
}

// Which positions of a sequence input the output reads: for inputs (batch, time, features) or token ids
// (batch, time) and one output row a sample, each position in turn takes another sample's values there,
// and the positions whose change moves the output are the ones read. A sequence classifier reads its
// sequence; one that reads only its first position (an RNN's out[:, 0], whose summary is at out[:, -1])
// has thrown the rest away.
VitalSign position_dependence(Scenario& s, const Batch& b) {
  VitalSign v = sign("position_dependence");
  const torch::Tensor& x = b.inputs;
  const bool tokens = x.defined() && !x.is_floating_point() && x.dim() == 2;
  const bool rows = x.defined() && x.is_floating_point() && x.dim() == 3;
  if ((!tokens && !rows) || x.size(0) < 4 || x.size(1) < 4) {
    v.evidence = "inputs " + (x.defined() ? c10::str(x.sizes()) : std::string("none")) + ": not sequences";
    return v;
  }
  const int64_t n = std::min<int64_t>(x.size(0), 8), t = x.size(1);
  const torch::Tensor xs = x.slice(0, 0, n);
  EvalMode eval(s.model());
  torch::NoGradGuard no_grad;
  KeepRng rng;
  const torch::Tensor base = guarded("forward", [&] { return s.forward(xs, Tap()); }).detach().to(torch::kFloat64);
  if (base.dim() != 2 || base.size(0) != n) {
    v.evidence = "the output is " + c10::str(base.sizes()) + ": not one row a sample";
    return v;
  }
  const double scale = base.abs().max().item<double>();
  const torch::Tensor other = torch::roll(xs, 1, 0);  // each sample takes the next sample's values at one position
  std::vector<int64_t> read;
  for (int64_t p = 0; p < t; ++p) {
    torch::Tensor changed = xs.clone();
    changed.select(1, p).copy_(other.select(1, p));
    const torch::Tensor out = guarded("forward", [&] { return s.forward(changed, Tap()); }).detach().to(torch::kFloat64);
    if (out.sizes() != base.sizes()) return skipped("position_dependence", "the output's shape changes with the inputs");
    if ((out - base).abs().max().item<double>() > 1e-6 * (1 + scale)) read.push_back(p);
  }
  v.data = {{"positions", t}, {"positions_read", read}};
  v.evidence = "the output reads " + std::to_string(read.size()) + " of the " + std::to_string(t) +
               " positions of the sequence (each position swapped between samples in turn)";
  if (!read.empty() && double(read.size()) <= 0.25 * double(t) && read.back() < t / 4) {
    v.named = {"forward"};
    fail(v, kRankConstantOutput,
         "the output depends only on the first " + std::to_string(read.back() + 1) + " of the " + std::to_string(t) +
             " positions of the input sequence (changing any later position changes nothing): the model reads its "
             "sequence's first time step, not the whole sequence",
         "a recurrent network's summary of the whole sequence is its output at the last time step (out[:, -1] with "
         "batch_first, or the final hidden state), not out[:, 0]; or pool over the positions");
  }
  return v;
}

KeepRng::KeepRng() {
  at::Generator cpu = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(cpu.mutex());
  saved_ = cpu.get_state();
}

KeepRng::~KeepRng() {
  at::Generator cpu = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(cpu.mutex());
  cpu.set_state(saved_);
}

void KeepRng::reseed(uint64_t seed) {
  at::Generator cpu = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(cpu.mutex());
  cpu.set_current_seed(seed);
}

}  // namespace spikehunt::doctor_detail
