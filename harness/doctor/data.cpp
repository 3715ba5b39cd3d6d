// doctor/data.cpp — probes of what the training code hands over, read before
// (or beside) training: the labels of each batch, targets against inputs, the
// parameters at step 0, BatchNorm against the batch size. Each states what it
// measured and what a correct program shows.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <set>

#include <ATen/CPUGeneratorImpl.h>

#include "base/hash.h"
#include "base/json.h"
#include "base/number_format.h"
#include "harness/doctor/signs.h"
#include "harness/trainer.h"

namespace spikehunt::doctor_detail {

namespace {

std::string module_kind(const std::string& name) {  // "torch::nn::BatchNorm2d" or a Python class: "BatchNorm2d"
  return name.substr(name.rfind(':') == std::string::npos ? 0 : name.rfind(':') + 1);
}

// The submodules whose class (as module_kind reads it) `is` accepts: "name (Kind)" each.
template <class Is>
std::vector<std::string> modules_of_kind(torch::nn::Module& model, Is&& is) {
  std::vector<std::string> out;
  for (const auto& m : model.named_modules("", /*include_self=*/false)) {
    const std::string kind = module_kind(m.value()->name());
    if (is(kind)) out.push_back(m.key() + " (" + kind + ")");
  }
  return out;
}

bool integer_tokens(const torch::Tensor& t) {
  return t.defined() && !t.is_floating_point() && t.scalar_type() != torch::kBool && t.dim() == 2;
}

}  // namespace

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

double loss_batch_scaling(Scenario& s, const Batch& b) {
  const int64_t n = b.inputs.dim() ? b.inputs.size(0) : 0;
  if (n < 4 || !b.targets.defined() || b.targets.dim() == 0 || b.targets.size(0) != n) return NAN;
  EvalMode eval(s.model());
  torch::NoGradGuard no_grad;
  auto loss_of = [&](int64_t from, int64_t to) {
    const torch::Tensor x = b.inputs.slice(0, from, to), y = b.targets.slice(0, from, to);
    const torch::Tensor out = guarded("forward", [&] { return s.forward(x, Tap()); });
    return guarded("loss", [&] { return s.loss(out, y); }).item<double>();
  };
  const double whole = loss_of(0, n), halves = 0.5 * (loss_of(0, n / 2) + loss_of(n / 2, n));
  if (!std::isfinite(whole) || !std::isfinite(halves) || std::fabs(halves) < 1e-8) return NAN;
  return whole / halves;
}

VitalSign loss_scale(double scaling, int64_t n, const std::vector<StepRecord>& records, const Verdict& verdict) {
  VitalSign v = sign("loss_scale");
  if (!std::isfinite(scaling)) return skipped("loss_scale", "the loss of the batch's halves could not be compared");
  double peak = 0;
  for (const StepRecord& r : records) peak = std::max(peak, std::isfinite(r.grad_norm) ? r.grad_norm : INFINITY);
  const bool summed = scaling > 1.8 && scaling < 2.2;
  const bool divided = scaling > 0.4 && scaling < 0.6;  // a mean divided by the batch size again
  v.data = {{"batch_over_halves", number(scaling)}, {"batch_size", n}, {"peak_grad_norm", number(peak)}};
  v.evidence = "the batch's loss is " + fmt(scaling) + "x the mean of its halves' losses (a mean over samples gives 1, "
               "a sum 2)";
  const double lr = records.empty() ? NAN : records.front().lr;
  if (divided) {
    // What that did: the training loss over the watched run, its first quarter against its last.
    double head = 0, tail = 0;
    size_t nh = 0, nt = 0;
    for (size_t i = 0; i < records.size(); ++i) {
      if (!std::isfinite(records[i].loss)) continue;
      if (i < records.size() / 4) head += records[i].loss, ++nh;
      if (i >= records.size() * 3 / 4) tail += records[i].loss, ++nt;
    }
    // No API divides a mean by the batch size again: a bug whatever the run did, which is stated.
    const double fell = nh == 0 || nt == 0 || head <= 0 ? NAN : 1 - (tail / double(nt)) / (head / double(nh));
    const std::string run = std::isfinite(fell) ? "the training loss fell " + fmt(100 * fell) +
                                                      "% from the first quarter of the watched run to the last"
                                                : std::string("the watched run's losses are not finite");
    v.evidence += ": divided by the batch size on top of the mean; " + run;
    v.named = {"loss"};
    fail(v, kRankLossScale,
         "the loss is divided by the batch size on top of its mean: a batch's loss is " + fmt(scaling) +
             "x the mean of its halves', so its gradient and each step are 1/" + std::to_string(n) +
             " of a mean's at the same learning rate (" + fmt(lr) + "); " + run,
         "drop the extra division: reduction=\"mean\" (the default) already averages over the batch");
    return v;
  }
  if (!summed) return v;
  std::string consequence;
  if (verdict.outcome == Outcome::kNonFinite && verdict.failure_step) {
    consequence = "the run went non-finite at step " + std::to_string(*verdict.failure_step);
  } else if (peak > 100) {
    consequence = "the gradient norm reached " + fmt(peak);
  } else if (verdict.outcome == Outcome::kExtreme && verdict.onset_step) {
    consequence = "the run went extreme at step " + std::to_string(*verdict.onset_step);
  }
  v.evidence += ": summed over the batch" + (consequence.empty() ? "; the watched run stayed within bounds" : "; " + consequence);
  if (consequence.empty()) return v;
  v.named = {"loss"};
  fail(v, kRankLossScale,
       "the loss is summed over the batch, not averaged: a batch's loss is " + fmt(scaling) +
           "x the mean of its halves', so its gradient and each step are " + std::to_string(n) +
           "x a mean's at the same learning rate (" + fmt(lr) + "), and " + consequence,
       "average the loss over the batch (reduction=\"mean\", the default), or divide the learning rate by the batch "
       "size: with a sum, the step grows with the batch");
  return v;
}

VitalSign batch_composition(const std::vector<StepRecord>& records, int64_t classes) {
  VitalSign v = sign("batch_composition");
  std::vector<int64_t> total(size_t(std::max<int64_t>(classes, 0)), 0);
  int64_t batches = 0, single = 0, samples = 0;
  double present_sum = 0;
  for (const StepRecord& r : records) {
    int64_t present = 0, n = 0;
    for (size_t c = 0; c < r.label_histogram.size() && c < total.size(); ++c) {
      present += r.label_histogram[c] > 0;
      n += r.label_histogram[c];
      total[c] += r.label_histogram[c];
    }
    if (n == 0) continue;
    ++batches;
    single += present == 1;
    present_sum += double(present);
    samples += n;
  }
  if (batches < 4) return skipped("batch_composition", "fewer than 4 watched batches with class labels");
  const double per_batch = double(samples) / double(batches);
  // What random draws of that size from the run's own labels would hold: sum over classes of 1 - (1 - p)^n.
  double expected = 0;
  int64_t seen = 0;
  for (int64_t t : total) {
    if (t == 0) continue;
    ++seen;
    expected += 1 - std::pow(1 - double(t) / double(samples), per_batch);
  }
  const double mean = present_sum / double(batches);
  v.data = {{"batches", batches}, {"single_class_batches", single}, {"classes_per_batch", number(mean)},
            {"classes_per_random_batch", number(expected)}, {"classes_in_run", seen}};
  v.evidence = std::to_string(batches) + " watched batches of " + fmt(per_batch) + " labels hold " + fmt(mean) +
               " classes each on average (" + std::to_string(single) + " hold one); random draws of that size from "
               "the same " + std::to_string(seen) + " classes would hold " + fmt(expected);
  if (seen >= 2 && expected >= 2 && mean <= 0.5 * expected) {
    v.named = {"data order"};
    fail(v,
         kRankBatchComposition,
         (single * 2 >= batches ? "each training batch holds one class (" + std::to_string(single) + " of " +
                                      std::to_string(batches) + " watched batches)"
                                : "the training batches hold " + fmt(mean) + " classes each") +
             " where random draws from the same labels hold " + fmt(expected) +
             ": the data arrives in class order, not shuffled",
         "shuffle the training data (DataLoader(shuffle=True) or a random sampler): trained one class at a time, the "
         "model forgets the others and ends up predicting the last class it saw");
  }
  return v;
}

VitalSign target_leak(Scenario& s, const Batch& b) {
  VitalSign v = sign("target_leak");
  const torch::Tensor x = b.inputs, y = b.targets;
  if (!integer_tokens(x) || !y.defined() || y.is_floating_point() || y.sizes() != x.sizes() || x.size(1) < 4) {
    v.evidence = "inputs " + c10::str(x.sizes()) + ", targets " + (y.defined() ? c10::str(y.sizes()) : "none") +
                 ": not token sequences with a target per position";
    return v;
  }
  const torch::Tensor xl = x.to(torch::kCPU).to(torch::kInt64), yl = y.to(torch::kCPU).to(torch::kInt64);
  const double same = (xl == yl).to(torch::kFloat64).mean().item<double>();
  const double next = (yl.slice(1, 0, -1) == xl.slice(1, 1)).to(torch::kFloat64).mean().item<double>();
  // Targets that are inputs at earlier positions (the labels shifted the wrong way): visible to the model.
  int64_t back = 0;
  double previous = 0;
  for (int64_t k = 1; k <= 2; ++k) {
    const double share = (yl.slice(1, k) == xl.slice(1, 0, -k)).to(torch::kFloat64).mean().item<double>();
    if (share > previous) previous = share, back = k;
  }
  v.data = {{"targets_equal_inputs", same}, {"targets_equal_next_inputs", next},
            {"targets_equal_earlier_inputs", previous}, {"positions_back", back}};
  v.evidence = "targets equal the input at their position for " + percent(same) + " of positions, the next input for " +
               percent(next) + ", the input " + std::to_string(back) + " position(s) back for " + percent(previous);
  if (previous >= 0.9 && same < 0.9 && next < 0.9) {
    v.named = {"targets"};
    fail(v, kRankTargetLeak,
         "the targets are the inputs shifted the wrong way: " + percent(previous) + " of the targets at position t "
             "equal the input at t - " + std::to_string(back) + ", a token the model has already seen (an earlier "
             "position), so it learns to copy from " + std::to_string(back) + " position(s) back",
         "for next-token prediction the target at position t is the input at t + 1: shift the labels the other way");
    return v;
  }
  if (same >= 0.9) {
    // Does the loss reward copying? Outputs that copy the input at each position against outputs that
    // predict the next input: a loss that shifts the labels itself (Hugging Face's causal LMs take
    // labels = input_ids) is lowest for the second.
    torch::Tensor out;
    {
      EvalMode eval(s.model());
      torch::NoGradGuard no_grad;
      KeepRng rng;
      out = guarded("forward", [&] { return s.forward(x, Tap()); }).detach();
    }
    if (out.dim() == 3 && out.size(0) == x.size(0) && out.size(1) == x.size(1) && out.is_floating_point() &&
        xl.max().item<int64_t>() < out.size(2)) {
      torch::NoGradGuard no_grad;
      const torch::Tensor ids = x.to(out.device()).to(torch::kInt64);
      const torch::Tensor next_ids = torch::cat({ids.slice(1, 1), ids.slice(1, -1)}, 1);
      auto sharp = [&](const torch::Tensor& t) {
        return torch::nn::functional::one_hot(t, out.size(2)).to(out.scalar_type()) * 30 - 15;
      };
      const double copying = guarded("loss", [&] { return s.loss(sharp(ids), y); }).item<double>();
      const double predicting = guarded("loss", [&] { return s.loss(sharp(next_ids), y); }).item<double>();
      v.data["loss_of_copying"] = number(copying);
      v.data["loss_of_predicting_next"] = number(predicting);
      v.evidence += "; the loss of outputs that copy each input " + fmt(copying) + ", of outputs that predict the next " +
                    "input " + fmt(predicting);
      if (std::isfinite(predicting) && predicting < 1 && copying > predicting + 1) {
        v.evidence += ": the loss shifts the labels itself";
        return v;
      }
      if (std::isfinite(copying) && std::fabs(copying - predicting) <= 0.01 * (1 + std::fabs(copying))) {
        // A framework's loss computed again from the inputs (Lightning's training_step, the Trainer's
        // compute_loss) does not read the outputs it is handed.
        v.evidence += ": the loss does not follow the outputs it is given, so whether it shifts the labels "
                      "cannot be told from here";
        return v;
      }
    }
    v.named = {"targets"};
    fail(v, kRankTargetLeak,
         "the targets are the inputs: " + percent(same) + " of the targets equal the input at their own position, so "
         "the model learns to copy what it sees",
         "for next-token prediction the target at position t is the input at t + 1: shift the labels by one (or pass "
         "labels = input_ids only to models that shift them themselves)");
    return v;
  }
  if (next < 0.9) return v;
  // Next-token prediction: the output at position t must not depend on inputs after t.
  torch::Tensor changed = x.clone();
  const int64_t last = x.size(1) - 1;
  changed.select(1, last).copy_(x.select(1, last).roll(1, 0));  // another sample's token at the last position
  changed.select(1, last).masked_fill_(changed.select(1, last) == x.select(1, last), 0);
  // Each pass from the same random state (a forward left random in eval mode, eval_consistency's
  // finding, then draws the same numbers), the caller's state put back after.
  torch::Tensor a, again, c;
  {
    EvalMode eval(s.model());
    torch::NoGradGuard no_grad;
    KeepRng rng;
    auto pass = [&](const torch::Tensor& in) {
      rng.reseed(0x5eed);
      return guarded("forward", [&] { return s.forward(in, Tap()); }).detach().to(torch::kFloat64);
    };
    a = pass(x);
    again = pass(x);
    c = pass(changed);
  }
  if (a.dim() < 2 || a.size(0) != x.size(0) || a.size(1) != x.size(1) || a.sizes() != c.sizes()) {
    v.evidence += "; outputs " + c10::str(a.sizes()) + ": not one per position";
    return v;
  }
  const double scale = a.abs().max().item<double>();
  const double noise = (a - again).abs().max().item<double>();
  if (noise > 0) {
    v.evidence += "; two passes of the same input from the same random state differ (by " + fmt(noise) +
                  "): whether earlier positions see later ones cannot be told";
    return v;
  }
  const double earlier = (a.slice(1, 0, last) - c.slice(1, 0, last)).abs().max().item<double>();
  v.data["earlier_outputs_change"] = number(earlier);
  v.evidence += "; changing the last position's input changes the outputs at earlier positions by up to " +
                fmt(earlier) + " (outputs up to " + fmt(scale) + ")";
  if (earlier > 1e-5 * (1 + scale)) {
    v.named = {"forward"};
    v.part = "model";
    fail(v, kRankTargetLeak,
         "the outputs at a position depend on the inputs at later positions (up to " + fmt(earlier) +
             "), and each target is the next input: the model sees the token it is asked to predict",
         "mask attention to later positions (a causal mask: tril, is_causal=True), and keep any other mixing along "
         "the sequence one-directional");
  }
  return v;
}

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

VitalSign batchnorm_batch_size(Scenario& s, const Batch& b) {
  VitalSign v = sign("batchnorm_batch_size");
  const std::vector<std::string> norms = modules_of_kind(s.model(), [](const std::string& kind) {
    return kind.rfind("BatchNorm", 0) == 0 || kind.rfind("SyncBatchNorm", 0) == 0;
  });
  const int64_t n = b.inputs.dim() ? b.inputs.size(0) : 0;
  v.data = {{"batch_norm_modules", norms}, {"batch_size", n}};
  if (norms.empty()) {
    v.evidence = "no BatchNorm module";
    return v;
  }
  v.evidence = std::to_string(norms.size()) + " BatchNorm module(s) (" + list(norms, 3) + "), training batches of " +
               std::to_string(n);
  if (n <= 2) {
    v.named = norms;
    fail(v, kRankBatchNormBatch,
         "BatchNorm is trained on batches of " + std::to_string(n) + " sample" + (n == 1 ? "" : "s") +
             ": in training it normalizes with that batch's statistics, which no running average seen in "
             "evaluation matches",
         "train with larger batches, or use a norm that does not depend on the batch (GroupNorm, LayerNorm), or "
         "freeze BatchNorm's statistics");
  }
  return v;
}

VitalSign dropout_rate(Scenario& s, const Batch& b) {
  VitalSign v = sign("dropout_rate");
  const int64_t n = b.inputs.dim() ? b.inputs.size(0) : 0;
  if (n < 2) return skipped("dropout_rate", "a batch of fewer than 2 samples");
  const std::vector<std::string> dropouts =
      modules_of_kind(s.model(), [](const std::string& kind) { return kind.find("Dropout") != std::string::npos; });
  torch::Tensor train, eval;
  {
    torch::NoGradGuard no_grad;
    KeepRng rng;
    const bool was = s.model().is_training();
    s.model().train();
    rng.reseed(0x5eed);
    train = guarded("forward", [&] { return s.forward(b.inputs, Tap()); }).detach().to(torch::kFloat64);
    s.model().train(was);
    EvalMode mode(s.model());
    eval = guarded("forward", [&] { return s.forward(b.inputs, Tap()); }).detach().to(torch::kFloat64);
  }
  if (train.dim() < 1 || train.size(0) != n || eval.sizes() != train.sizes()) {
    v.evidence = "outputs " + c10::str(train.sizes()) + ": not one per sample";
    return v;
  }
  auto spread = [](const torch::Tensor& t) { return (t - t[0]).abs().max().item<double>(); };
  const double in_training = spread(train), in_eval = spread(eval);
  v.data = {{"training_spread", number(in_training)}, {"eval_spread", number(in_eval)}, {"dropout_modules", dropouts}};
  v.evidence = "outputs across the fixed batch's samples differ by up to " + fmt(in_training) + " in training mode, " +
               fmt(in_eval) + " in eval mode" + (dropouts.empty() ? "" : " (dropout: " + list(dropouts, 3) + ")");
  if (in_training == 0 && in_eval > 0) {
    v.named = dropouts.empty() ? std::vector<std::string>{"forward"} : dropouts;
    fail(v, kRankEvalRandom,
         "in training mode every sample gets the same output (eval mode's differ by up to " + fmt(in_eval) +
             "): something zeroes every activation in training" +
             (dropouts.empty() ? std::string() : ", and the model has " + list(dropouts, 3) +
                                                     ": a Dropout's p is the probability of zeroing, so p = 1 "
                                                     "zeroes every unit (a keep probability given as p?)"),
         "give nn.Dropout the probability of dropping (TensorFlow 1's keep_prob is 1 - p)");
  }
  return v;
}

VitalSign target_padding(Scenario& s, const Batch& b) {
  VitalSign v = sign("target_padding");
  const torch::Tensor x = b.inputs, y = b.targets;
  if (!integer_tokens(x) || !integer_tokens(y) || y.sizes() != x.sizes()) {
    v.evidence = "not token sequences with a target per position";
    return v;
  }
  const torch::Tensor yl = y.to(torch::kCPU).to(torch::kInt64).contiguous();
  const int64_t rows = yl.size(0), t = yl.size(1);
  // Each sequence's trailing run of one token, and the token most sequences end in.
  std::map<int64_t, int64_t> endings;
  const auto tokens = yl.accessor<int64_t, 2>();  // read in place: no tensor op per element
  for (int64_t i = 0; i < rows; ++i) ++endings[tokens[i][t - 1]];
  const auto common = std::max_element(endings.begin(), endings.end(),
                                        [](const auto& a, const auto& c) { return a.second < c.second; });
  const int64_t pad = common->first;
  torch::Tensor in_run = torch::zeros_like(yl, torch::kBool);
  int64_t padded_rows = 0;
  for (int64_t i = 0; i < rows; ++i) {
    int64_t k = t;
    while (k > 0 && tokens[i][k - 1] == pad) --k;
    if (t - k >= 2) {
      in_run[i].slice(0, k).fill_(true);
      ++padded_rows;
    }
  }
  const double share = in_run.to(torch::kFloat64).mean().item<double>();
  v.data = {{"token", pad}, {"share_of_targets", share}, {"sequences_ending_in_it", padded_rows}};
  v.evidence = percent(share) + " of the targets are trailing runs of token " + std::to_string(pad) + " (" +
               std::to_string(padded_rows) + " of " + std::to_string(rows) + " sequences end in one)";
  if (share < 0.2 || padded_rows * 4 < rows) return v;
  double with = NAN, without = NAN;
  {
    EvalMode eval(s.model());
    torch::NoGradGuard no_grad;
    KeepRng rng;
    rng.reseed(0x5eed);
    const torch::Tensor out = guarded("forward", [&] { return s.forward(x, Tap()); });
    with = guarded("loss", [&] { return s.loss(out, y); }).item<double>();
    try {
      without = s.loss(out, y.masked_fill(in_run.to(y.device()), -100)).item<double>();
    } catch (const std::exception&) {
      v.evidence += "; the loss does not take -100 (ignore_index) for them: whether it counts them cannot be told";
      return v;
    }
  }
  v.data["loss"] = number(with);
  v.data["loss_without_them"] = number(without);
  v.evidence += "; the loss is " + fmt(with) + " with them, " + fmt(without) + " with them set to -100 (ignore_index)";
  if (std::isfinite(with) && std::isfinite(without) && std::fabs(with - without) > 1e-6 * (1 + std::fabs(with))) {
    v.named = {"loss"};
    fail(v, kRankTargetLeak,
         percent(share) + " of the targets are padding (runs of token " + std::to_string(pad) + " that end " +
             std::to_string(padded_rows) + " of " + std::to_string(rows) +
             " sequences) and the loss counts them: it is " + fmt(with) + " with them and " + fmt(without) +
             " without",
         "give the loss ignore_index=<the padding token> (cross_entropy ignores -100 by default), or set the "
         "padded targets to -100");
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

}  // namespace spikehunt::doctor_detail

namespace spikehunt::doctor_detail {

VitalSign batch_repeats(const std::vector<StepRecord>& records) {
  VitalSign v = sign("batch_repeats");
  constexpr size_t kWindow = 8;  // a batch identical to one of the 8 before it
  std::vector<Hash128> distinct;
  int64_t repeats = 0, batches = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const Hash128 h = records[i].input_hash;
    if (h == Hash128{}) continue;  // no inputs hashed
    ++batches;
    bool near = false;
    for (size_t k = i >= kWindow ? i - kWindow : 0; k < i && !near; ++k) near = records[k].input_hash == h;
    repeats += near;
    if (std::find(distinct.begin(), distinct.end(), h) == distinct.end()) distinct.push_back(h);
  }
  if (batches < 8) return skipped("batch_repeats", "fewer than 8 watched batches");
  v.data = {{"batches", batches}, {"repeats_within_8", repeats}, {"distinct_batches", distinct.size()}};
  v.evidence = std::to_string(batches) + " watched batches, " + std::to_string(distinct.size()) +
               " distinct (by the hash of their inputs); " + std::to_string(repeats) +
               " repeat one of the 8 batches before them";
  if (distinct.size() == 1) {
    v.named = {"data loader"};
    fail(v, kRankBatchComposition,
         "every watched batch is the same batch (1 distinct in " + std::to_string(batches) +
             ", by the hash of their inputs): each step trains on the same samples",
         "a new iterator every step (next(iter(loader))) restarts an unshuffled loader at its first batch: create the "
         "iterator once and keep drawing from it (if the whole training set is one batch, this is full-batch training "
         "and expected)");
    return v;
  }
  // A data set of 8 batches or fewer cycles within the window: nothing to say.
  if (distinct.size() > kWindow && repeats * 4 >= batches) {
    v.named = {"data loader"};
    fail(v, kRankBatchComposition,
         std::to_string(repeats) + " of " + std::to_string(batches) + " watched batches are identical to one of the " +
             "8 batches before them (" + std::to_string(distinct.size()) + " distinct in " + std::to_string(batches) +
             "): the loader hands out the same batch several times before the rest of the data",
         "DataLoader workers forked with one random state (numpy's) draw the same samples: seed each worker "
         "(worker_init_fn, or torch's generator), or draw indices in the main process (a Sampler)");
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

std::string output_range_miss(const torch::Tensor& out, const torch::Tensor& targets) {
  if (!out.defined() || !targets.defined() || !out.is_floating_point() || !targets.is_floating_point() ||
      out.sizes() != targets.sizes() || out.numel() == 0) {
    return {};
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor o = out.detach().to(torch::kFloat64), y = targets.detach().to(out.device()).to(torch::kFloat64);
  const double lo = o.min().item<double>(), hi = o.max().item<double>();
  const double zeros = (o == 0).to(torch::kFloat64).mean().item<double>();
  auto share = [&](const torch::Tensor& outside) { return outside.to(torch::kFloat64).mean().item<double>(); };
  const std::string span = " (targets from " + fmt(y.min().item<double>()) + " to " + fmt(y.max().item<double>()) + ")";
  if (lo >= 0 && zeros >= 0.1) {  // a rectifier's: exactly 0 beside positive values
    const double negative = share(y < 0);
    if (negative < 0.1) return {};
    return "every output is at least 0 and " + fmt(100 * zeros) + "% are exactly 0 (a rectifier's range), but " +
           fmt(100 * negative) + "% of the targets are negative" + span;
  }
  struct Range {
    double lo, hi;
    const char* what;
  };
  for (const Range r : {Range{0, 1, "(0, 1), a sigmoid's range"}, Range{-1, 1, "(-1, 1), a tanh's range"}}) {
    if (lo < r.lo || hi > r.hi) continue;
    const double outside = share((y < r.lo) | (y > r.hi));
    if (outside < 0.1) return {};
    return "every output lies in " + std::string(r.what) + ", but " + fmt(100 * outside) +
           "% of the targets are outside it" + span;
  }
  return {};
}

std::string bounded_logits(Scenario& s, const torch::Tensor& out, const Batch& b) {
  const torch::Tensor& y = b.targets;
  if (!out.defined() || out.dim() != 2 || out.size(1) < 3 || !y.defined() || y.is_floating_point() || y.dim() != 1 ||
      y.size(0) != out.size(0)) {
    return {};
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor o = out.detach().to(torch::kFloat64);
  if (o.min().item<double>() < 0 || o.max().item<double>() > 1) return {};
  if ((o.sum(1) - 1).abs().max().item<double>() < 1e-3) return {};  // distributions: softmax twice, checked apart
  const int64_t c = out.size(1);
  if (y.min().item<int64_t>() < 0 || y.max().item<int64_t>() >= c) return {};
  // The best outputs that range allows: 1 for the label, 0 for every other class.
  const torch::Tensor best = torch::one_hot(y.to(out.device()), c).to(out.scalar_type());
  const double floor = guarded("loss", [&] { return s.loss(best, y); }).item<double>();
  if (!std::isfinite(floor) || floor < 0.3) return {};
  return "every output lies in (0, 1), a sigmoid's range, and the loss takes them as logits: at the best outputs "
         "that range allows (1 for the label, 0 for the other " + std::to_string(c - 1) + " classes) it is still " +
         fmt(floor) + ", so no prediction can become confident";
}

std::string log_probability_logits(Scenario& s, const torch::Tensor& out, const Batch& b) {
  const torch::Tensor& y = b.targets;
  if (!out.defined() || !out.is_floating_point() || out.numel() == 0 || !y.defined()) return {};
  torch::NoGradGuard no_grad;
  const torch::Tensor o = out.detach().to(torch::kFloat64);
  if (o.max().item<double>() > 0) return {};
  torch::Tensor best;  // 0 where the target is, far below 0 elsewhere
  std::string where;
  if (y.is_floating_point() && y.sizes() == out.sizes() && ((y == 0) | (y == 1)).all().item<bool>()) {
    if (!(y == 1).any().item<bool>()) return {};
    best = torch::where(y.to(out.device()) == 1, torch::zeros_like(out), torch::full_like(out, -30.0));
    where = "0 for a target of 1, -30 for a target of 0";
  } else if (out.dim() == 2 && class_ids(y) && y.size(0) == out.size(0) && y.min().item<int64_t>() >= 0 &&
             y.max().item<int64_t>() < out.size(1)) {
    best = torch::full_like(out, -30.0).scatter(1, y.to(out.device()).to(torch::kInt64).unsqueeze(1), 0.0);
    where = "0 for the label, -30 for the other classes";
  } else {
    return {};
  }
  const double floor = guarded("loss", [&] { return s.loss(best, y); }).item<double>();
  if (!std::isfinite(floor) || floor < 0.05) return {};  // a loss that takes log-probabilities reaches 0 there
  return "every output is at most 0 (log-probabilities: a log-sigmoid's or log-softmax's range) and the loss takes "
         "them as logits: at the best outputs that range allows (" + where + ") it is still " + fmt(floor) +
         ", so a target of 1 can never be predicted above 0.5";
}

VitalSign batchnorm_momentum(Scenario& s, const Batch& b) {
  VitalSign v = sign("batchnorm_momentum");
  torch::nn::Module& model = s.model();
  struct Stat {
    std::string layer;
    torch::Tensor mean, saved;
  };
  std::vector<Stat> stats;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> restore;  // every buffer the probe touches, and its value
  for (const auto& item : model.named_buffers()) {
    const std::string& name = item.key();
    const torch::Tensor& t = item.value();
    const bool mean = name.size() > 13 && name.compare(name.size() - 13, 13, ".running_mean") == 0;
    const bool var = name.size() > 12 && name.compare(name.size() - 12, 12, ".running_var") == 0;
    const bool tracked = name.size() > 20 && name.compare(name.size() - 20, 20, ".num_batches_tracked") == 0;
    if (!mean && !var && !tracked) continue;
    restore.push_back({t, t.detach().clone()});
    if (mean) stats.push_back({name.substr(0, name.size() - 13), t, {}});
  }
  if (stats.empty()) {
    v.evidence = "no BatchNorm running statistics";
    return v;
  }
  torch::NoGradGuard no_grad;
  const bool was = model.is_training();
  std::vector<double> measured;
  std::vector<std::string> high, frozen;
  try {
    KeepRng keep;
    model.train();
    for (auto& [t, saved] : restore) {
      if (t.scalar_type() == torch::kLong) t.fill_(1000);  // a cumulative average (momentum None) moves by 1/1000
    }
    for (Stat& st : stats) st.mean.zero_();
    std::vector<torch::Tensor> first;
    for (int pass = 0; pass < 2; ++pass) {  // the same batch twice, with the same dropout masks
      keep.reseed(4321);
      guarded("forward", [&] { return s.forward(b.inputs, Tap()); });
      if (pass == 0) {
        for (Stat& st : stats) first.push_back(st.mean.detach().to(torch::kFloat64).clone());
      }
    }
    // From a zero mean: m1 = momentum * mu, m2 = (1 - momentum) * m1 + momentum * mu = (2 - momentum) * m1.
    for (size_t i = 0; i < stats.size(); ++i) {
      const torch::Tensor m1 = first[i], m2 = stats[i].mean.detach().to(torch::kFloat64);
      const torch::Tensor ok = m1.abs() > 1e-6;
      if (!ok.any().item<bool>()) {
        // Two training passes left the running mean at exactly 0: the new batch's weight is 0.
        if (m2.abs().max().item<double>() == 0) measured.push_back(0), frozen.push_back(stats[i].layer);
        continue;
      }
      const double momentum = (2 - m2.masked_select(ok) / m1.masked_select(ok)).median().item<double>();
      measured.push_back(momentum);
      if (momentum >= 0.5) high.push_back(fmt(momentum) + " in " + stats[i].layer);
    }
  } catch (...) {
    for (auto& [t, saved] : restore) t.copy_(saved);
    model.train(was);
    throw;
  }
  for (auto& [t, saved] : restore) t.copy_(saved);
  model.train(was);
  v.data = {{"layers", stats.size()}, {"momentum_measured", measured}};
  v.evidence = std::to_string(stats.size()) + " BatchNorm layer(s); the weight of a new batch in their running "
               "statistics, measured from the running mean after one and two training passes of one batch:";
  for (size_t i = 0; i < measured.size() && i < 6; ++i) v.evidence += (i ? ", " : " ") + fmt(measured[i]);
  if (!frozen.empty()) {
    v.named = frozen;
    fail(v, kRankBatchNormBatch,
         "BatchNorm's running statistics never update in " + list(frozen, 3) + ": the new batch's weight (momentum) "
             "is 0 (measured: the running mean stays at 0 through two training passes of one batch), so evaluation "
             "normalizes with the initial mean 0 and variance 1, not the data's",
         "PyTorch's momentum is the new batch's weight in the running statistics: 0.1 by default, never 0 (momentum="
         "None for a cumulative average)");
  } else if (!high.empty()) {
    v.named = high;
    fail(v, kRankBatchNormBatch,
         "BatchNorm's running statistics follow the last batch: the new batch's weight (momentum) is " + list(high, 3) +
             " (measured: the running mean after one and two passes of one batch), where PyTorch's default is 0.1: "
             "its momentum is the new batch's weight, so TensorFlow's 0.99 is PyTorch's 0.01, and evaluation "
             "normalizes with the statistics of the last few training batches",
         "give BatchNorm momentum = 1 - (the TensorFlow/Keras value), e.g. 0.01 for 0.99");
  }
  return v;
}

VitalSign target_scale(const Batch& b, const torch::Tensor& out, const std::vector<StepRecord>& records,
                       const Verdict& verdict) {
  VitalSign v = sign("target_scale");
  const torch::Tensor& y = b.targets;
  if (!y.defined() || !y.is_floating_point() || !out.defined() || out.sizes() != y.sizes() || y.numel() < 2 ||
      ((y == 0) | (y == 1)).all().item<bool>()) {
    v.evidence = "no float regression targets of the outputs' shape";
    return v;
  }
  torch::NoGradGuard no_grad;
  const double rms = y.to(torch::kFloat64).square().mean().sqrt().item<double>();
  const double out_rms = out.detach().to(torch::kFloat64).square().mean().sqrt().item<double>();
  v.data = {{"target_rms", number(rms)}, {"output_rms_at_start", number(out_rms)}};
  v.evidence = "the targets' rms is " + fmt(rms) + ", the outputs' at step 0 " + fmt(out_rms);
  if (!(rms >= 100 && rms >= 100 * std::max(out_rms, 1e-3))) return v;
  std::string consequence;
  double peak = 0;
  for (const StepRecord& r : records) peak = std::max(peak, std::isfinite(r.grad_norm) ? r.grad_norm : 0.0);
  if (verdict.failure_step) consequence = "the watched run went non-finite at step " + std::to_string(*verdict.failure_step);
  else if (verdict.onset_step) consequence = "the watched run went extreme at step " + std::to_string(*verdict.onset_step);
  else consequence = "the gradient norm reached " + fmt(peak);
  v.named = {"targets"};
  fail(v, kRankInputScale,
       "unnormalized regression targets: their rms is " + fmt(rms) + " where the outputs start at " + fmt(out_rms) +
           ", so the squared error and its gradient are of that scale at a learning rate meant for unit-scale "
           "targets; " + consequence,
       "standardize the targets ((y - mean) / std over the training set) and undo it on the predictions, or "
       "predict log(y)");
  return v;
}

}  // namespace spikehunt::doctor_detail

namespace spikehunt::doctor_detail {

VitalSign ignored_class(Scenario& s, const Batch& b) {
  VitalSign v = sign("ignored_class");
  const torch::Tensor& y = b.targets;
  if (!y.defined() || y.is_floating_point() || y.dim() != 1 || y.size(0) < 4) {
    v.evidence = "no class-id targets of one dimension";
    return v;
  }
  EvalMode eval(s.model());
  torch::NoGradGuard no_grad;
  // Each part through forward and loss as the code runs them (a scenario's loss may read its forward's batch).
  auto loss_of = [&](const torch::Tensor& rows) {
    const torch::Tensor x = b.inputs.index_select(0, rows.to(b.inputs.device()));
    const torch::Tensor out = guarded("forward", [&] { return s.forward(x, Tap()); });
    return guarded("loss", [&] { return s.loss(out, y.index_select(0, rows.to(y.device()))); }).item<double>();
  };
  const torch::Tensor first_out = guarded("forward", [&] { return s.forward(b.inputs, Tap()); });
  if (first_out.dim() != 2 || first_out.size(0) != y.size(0)) {
    v.evidence = "the outputs are not one row of class scores a sample";
    return v;
  }
  const torch::Tensor labels = y.to(torch::kCPU);
  std::vector<std::string> ignored;
  nlohmann::json per_class = nlohmann::json::object();
  std::string example;
  const torch::Tensor classes = std::get<0>(at::_unique(labels)).to(torch::kLong).contiguous();
  if (classes.numel() > 32) {
    v.evidence = "more than 32 classes in the batch: not probed";
    return v;
  }
  for (const int64_t c : std::vector<int64_t>(classes.data_ptr<int64_t>(), classes.data_ptr<int64_t>() + classes.numel())) {
    const torch::Tensor in = labels == c;
    const int64_t n = in.sum().item<int64_t>();
    if (n == 0 || n == labels.size(0)) continue;
    const double alone = loss_of(in.nonzero().flatten()), others = loss_of((~in).nonzero().flatten());
    per_class[std::to_string(c)] = {{"samples", n}, {"loss_alone", number(alone)}};
    if ((std::isnan(alone) || alone == 0) && std::isfinite(others) && others > 0) {
      ignored.push_back("class " + std::to_string(c));
      if (example.empty()) {
        example = "on the batch's " + std::to_string(n) + " samples of class " + std::to_string(c) + " alone it is " +
                  fmt(alone) + (std::isnan(alone) ? " (no sample counted)" : "") + ", on the other " +
                  std::to_string(labels.size(0) - n) + " " + fmt(others);
      }
    }
  }
  v.data = {{"classes", per_class}, {"ignored", ignored}};
  v.evidence = "the loss of each class's samples alone, in eval mode: every class counted";
  if (ignored.empty()) return v;
  v.named = ignored;
  v.evidence = "the loss ignores " + list(ignored) + ": " + example;
  fail(v, kRankTargetLeak,
       "the loss ignores " + list(ignored, 3) + ": " + example + ", so " + list(ignored, 3) +
           " is never trained",
       "an ignore_index (or a class weight of 0) equal to a real class: give the padding its own index (-100, the "
       "default) and keep the real classes out of it");
  return v;
}

}  // namespace spikehunt::doctor_detail

namespace spikehunt::doctor_detail {

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

}  // namespace spikehunt::doctor_detail

namespace spikehunt::doctor_detail {

// The loss's weight of each class, read from the loss of single samples and of pairs (in eval mode):
// for a weighted mean, the pair (i, r) gives L = (w_i l_i + w_r l_r) / (w_i + w_r), so
// w_i / w_r = (L - l_r) / (l_i - L). Weights that grow with the classes' frequency in the training
// labels (counts where their inverse was meant) push every prediction toward the majority.
VitalSign class_weights(Scenario& s, const std::vector<Batch>& batches) {
  VitalSign v = sign("class_weights");
  const Batch& b = batches.front();
  const torch::Tensor& y = b.targets;
  if (!y.defined() || y.is_floating_point() || y.dim() != 1 || y.size(0) < 4) {
    v.evidence = "no class-id targets of one dimension";
    return v;
  }
  EvalMode eval(s.model());
  torch::NoGradGuard no_grad;
  const torch::Tensor out = guarded("forward", [&] { return s.forward(b.inputs, Tap()); }).detach();
  if (out.dim() != 2 || out.size(0) != y.size(0) || out.size(1) < 2) {
    v.evidence = "the outputs are not one row of class scores a sample";
    return v;
  }
  const torch::Tensor labels = y.to(torch::kCPU).to(torch::kInt64);
  const torch::Tensor reference = torch::nn::functional::cross_entropy(
      out.to(torch::kCPU).to(torch::kFloat64), labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  auto loss_of = [&](std::vector<int64_t> rows) {
    const torch::Tensor idx = torch::tensor(rows, torch::kInt64);
    const torch::Tensor o = out.index_select(0, idx.to(out.device()));
    return guarded("loss", [&] { return s.loss(o, y.index_select(0, idx.to(y.device()))); }).item<double>();
  };
  const int64_t* lab = labels.data_ptr<int64_t>();
  const double* ref = reference.data_ptr<double>();
  // A sample of each class present, and whether the loss of one sample is its cross-entropy.
  std::map<int64_t, int64_t> sample_of;
  for (int64_t i = 0; i < labels.size(0); ++i) sample_of.emplace(lab[i], i);
  if (sample_of.size() < 2 || sample_of.size() > 32) {
    v.evidence = std::to_string(sample_of.size()) + " classes in the first batch: not probed";
    return v;
  }
  for (const auto& [c, i] : sample_of) {
    const double alone = loss_of({i});
    if (!std::isfinite(alone) || std::fabs(alone - ref[i]) > 1e-3 * (1 + ref[i])) {
      v.evidence = "the loss of one sample is not its cross-entropy (" + fmt(alone) + " against " + fmt(ref[i]) +
                   "): not a weighted cross-entropy, not probed";
      return v;
    }
  }
  const int64_t r = sample_of.begin()->second;
  std::map<int64_t, double> weight;
  for (const auto& [c, i] : sample_of) {
    if (i == r) {
      weight[c] = 1;
      continue;
    }
    if (std::fabs(ref[i] - ref[r]) < 1e-4) continue;
    const double pair = loss_of({i, r});
    const double ratio = (pair - ref[r]) / (ref[i] - pair);
    if (std::isfinite(ratio) && ratio > 0) weight[c] = ratio;
  }
  std::map<int64_t, int64_t> count;
  int64_t total = 0;
  for (const Batch& x : batches) {
    if (!x.targets.defined() || x.targets.is_floating_point()) continue;
    const torch::Tensor t = x.targets.to(torch::kCPU).to(torch::kInt64).flatten();
    for (int64_t k = 0; k < t.numel(); ++k) ++count[t.data_ptr<int64_t>()[k]], ++total;
  }
  double lo = INFINITY, hi = 0, mean = 0;
  for (const auto& [c, w] : weight) lo = std::min(lo, w), hi = std::max(hi, w), mean += w;
  mean /= double(std::max<size_t>(weight.size(), 1));
  nlohmann::json per_class = nlohmann::json::object();
  std::vector<std::pair<double, double>> pairs;  // (weight, share)
  for (const auto& [c, w] : weight) {
    const double share = total ? double(count[c]) / double(total) : 0;
    per_class[std::to_string(c)] = {{"weight", w / mean}, {"share", share}};
    pairs.emplace_back(w, share);
  }
  // The correlation of log weight with log share: 1 when the weights are proportional to the counts, -1 for
  // their inverse, undefined (0) for equal weights.
  double mw = 0, ms = 0;
  int used = 0;
  for (auto& [w, share] : pairs) {
    if (share <= 0) {
      share = NAN;
      continue;
    }
    w = std::log(w), share = std::log(share);
    mw += w, ms += share, ++used;
  }
  double sxy = 0, sxx = 0, syy = 0;
  for (const auto& [w, share] : pairs) {
    if (!std::isfinite(share)) continue;
    sxy += (w - mw / used) * (share - ms / used), sxx += (w - mw / used) * (w - mw / used);
    syy += (share - ms / used) * (share - ms / used);
  }
  const double rho = used > 2 && sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0;
  int64_t top = -1, major = -1;
  double top_w = 0, major_share = 0;
  for (const auto& [c, w] : weight) {
    if (w > top_w) top_w = w, top = c;
    const double share = total ? double(count[c]) / double(total) : 0;
    if (share > major_share) major_share = share, major = c;
  }
  v.data = {{"classes", per_class}, {"spread", number(hi / lo)}, {"log_correlation_with_share", number(rho)}};
  v.evidence = "the loss's weight of each class (read from single samples and pairs, mean 1): from " + fmt(lo / mean) +
               " to " + fmt(hi / mean) + "; correlation of log weight with log share of the training labels " + fmt(rho);
  if (hi / lo >= 3 && rho >= 0.5 && top == major && major_share >= 2.0 / double(std::max<size_t>(sample_of.size(), 2))) {
    v.named = {"class " + std::to_string(top)};
    fail(v, kRankLossMismatch,
         "the loss's class weights grow with the classes' frequency: class " + std::to_string(top) + ", " +
             percent(major_share) + " of the training labels, weighs " + fmt(top_w / lo) + "x the least weighted "
             "class (log weight against log share: correlation " + fmt(rho) + "), which pushes every prediction "
             "further toward the majority",
         "weight each class by the inverse of its frequency (total / count), not by its count");
  }
  return v;
}

}  // namespace spikehunt::doctor_detail

namespace spikehunt::doctor_detail {

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

}  // namespace spikehunt::doctor_detail
