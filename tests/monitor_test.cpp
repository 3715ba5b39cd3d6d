// Tests harness/monitor.h: per-tensor statistics against an element-by-element
// double-precision reference, fault localization in every stage, and that the
// record's numbers agree with each other.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "harness/burst.h"
#include "harness/monitor.h"
#include "harness/report.h"
#include "test_util.h"

namespace spikehunt {
namespace {

using testing::Plant;
using testing::PlantedScenario;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Reference {
  double norm = 0, max_abs = 0;
  int64_t nan = 0, pos_inf = 0, neg_inf = 0;
};

// Element by element in double (long double for the sum of squares).
Reference reference(const torch::Tensor& t) {
  Reference r;
  const torch::Tensor d = t.to(torch::kFloat64).contiguous();
  const double* p = d.data_ptr<double>();
  long double sq = 0;
  bool any_nan = false;
  for (int64_t i = 0; i < d.numel(); ++i) {
    const double x = p[i];
    if (std::isnan(x)) ++r.nan, any_nan = true;
    else if (std::isinf(x)) ++(x > 0 ? r.pos_inf : r.neg_inf);
    r.max_abs = std::max(r.max_abs, std::fabs(x));
    sq += static_cast<long double>(x) * x;
  }
  if (any_nan) r.max_abs = std::numeric_limits<double>::quiet_NaN();
  r.norm = any_nan ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(std::sqrt(sq));
  return r;
}

// Compares the monitor's statistics with the reference: max |x| and counts
// exactly, the norm within `rel` relative error (reported as the largest difference).
void expect_matches(const torch::Tensor& t, double rel, const std::string& what) {
  const Reference ref = reference(t);
  const TensorSummary s = summarize(t);
  EXPECT_EQ(s.numel, t.numel()) << what;
  EXPECT_EQ(s.counts.nan, ref.nan) << what;
  EXPECT_EQ(s.counts.pos_inf, ref.pos_inf) << what;
  EXPECT_EQ(s.counts.neg_inf, ref.neg_inf) << what;
  if (std::isnan(ref.max_abs)) {
    EXPECT_TRUE(std::isnan(s.max_abs)) << what;
    EXPECT_TRUE(std::isnan(s.norm)) << what;
  } else {
    EXPECT_EQ(s.max_abs, ref.max_abs) << what;
    if (std::isinf(ref.norm) || ref.norm == 0) {
      EXPECT_EQ(s.norm, ref.norm) << what;
    } else {
      const double diff = std::fabs(s.norm - ref.norm) / ref.norm;
      EXPECT_LE(diff, rel) << what << ": norm " << s.norm << " vs reference " << ref.norm
                           << ", largest relative difference " << diff;
    }
  }
  EXPECT_EQ(s.finite(), ref.nan + ref.pos_inf + ref.neg_inf == 0) << what;
}

TEST(TensorStats, MatchDoubleReferenceOnPlantedTensors) {
  torch::manual_seed(0);
  const torch::Tensor normal = torch::randn({1000});
  torch::Tensor with_nan = normal.clone();
  with_nan[3] = kNaN;
  with_nan[500] = kNaN;
  torch::Tensor with_inf = normal.clone();
  with_inf[7] = kInf;
  with_inf[8] = -kInf;
  with_inf[9] = -kInf;
  torch::Tensor mixed = torch::zeros({4, 5});
  mixed[0][0] = kNaN;
  mixed[1][1] = kInf;
  mixed[2][2] = -kInf;
  mixed[3][3] = 1e30f;
  const torch::Tensor huge = torch::full({1000}, 1e36f);  // float32 sum of squares overflows
  const torch::Tensor denormal = torch::full({100}, 1e-40f);
  const torch::Tensor empty = torch::empty({0, 3});
  const torch::Tensor doubles = torch::full({10}, 1e200, torch::kFloat64);  // double squares overflow
  for (auto [name, t] : std::vector<std::pair<std::string, torch::Tensor>>{
           {"normal", normal}, {"nan", with_nan}, {"inf", with_inf}, {"mixed", mixed}, {"huge", huge},
           {"denormal", denormal}, {"empty", empty}, {"doubles", doubles},
           {"strided", normal.view({10, 100}).t()}}) {
    expect_matches(t, 1e-12, name);
  }
}

TEST(TensorStats, FiniteHugeTensorIsFiniteWithItsTrueNorm) {
  const TensorSummary s = summarize(torch::full({1000}, 1e36f));
  EXPECT_TRUE(s.finite());
  EXPECT_TRUE(std::isfinite(s.norm));
  EXPECT_NEAR(s.norm / (1e36 * std::sqrt(1000.0)), 1.0, 1e-6);  // 1e36f is not exactly 1e36
  EXPECT_TRUE(std::isinf(torch::full({1000}, 1e36f).norm().item<float>())) << "float32 norm would overflow";
}

TEST(TensorStats, LargeTensorsAreChunkedOnThreadsWithoutChangingTheResult) {
  torch::manual_seed(3);
  torch::Tensor t = torch::randn({1000003});  // 16 chunks of 64Ki and a ragged end
  const torch::Tensor d = t.to(torch::kFloat64);
  const double* ref_in = d.data_ptr<double>();
  double sq = 0, mx = 0;
  for (int64_t i = 0; i < d.numel(); ++i) sq += ref_in[i] * ref_in[i], mx = std::max(mx, std::fabs(ref_in[i]));
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const torch::Tensor one = tensor_stats(t);
  at::set_num_threads(2);
  const torch::Tensor two = tensor_stats(t);
  at::set_num_threads(threads);
  EXPECT_EQ(one[0].item<double>(), two[0].item<double>()) << "bit-identical for any thread count";
  EXPECT_EQ(one[1].item<double>(), two[1].item<double>());
  EXPECT_NEAR(one[0].item<double>(), std::sqrt(sq), 1e-12 * std::sqrt(sq));
  EXPECT_EQ(one[1].item<double>(), mx);
  t[900000] = std::numeric_limits<float>::infinity();  // in a late chunk
  EXPECT_TRUE(std::isinf(tensor_stats(t)[1].item<double>()));
  t[500000] = std::nanf("");
  EXPECT_TRUE(std::isnan(tensor_stats(t)[0].item<double>()));
  EXPECT_TRUE(std::isnan(tensor_stats(t)[1].item<double>()));
}

TEST(TensorStats, DenormalsAreNotFlushed) {
  const TensorSummary s = summarize(torch::full({4}, 1e-40f));
  EXPECT_GT(s.max_abs, 0.0);
  EXPECT_GT(s.norm, 0.0);
}

TEST(TensorStats, MaxAbsStatWorksForEveryFloatDtype) {
  // Regression: fuzz_monitor found that float16 max |x| threw (no CPU aminmax for Half).
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kFloat16, torch::kBFloat16}) {
    torch::Tensor t = torch::tensor({1.0f, -3.0f, 2.0f}).to(dtype);
    EXPECT_EQ(max_abs_stat(t).item<double>(), 3.0) << c10::toString(dtype);
    t[1] = kNaN;
    EXPECT_TRUE(std::isnan(max_abs_stat(t).item<double>())) << c10::toString(dtype);
  }
}

TEST(TensorStats, HalfAndBFloat16MatchTheReference) {
  torch::manual_seed(1);
  for (auto dtype : {torch::kFloat16, torch::kBFloat16}) {
    torch::Tensor t = (torch::randn({257}) * 100).to(dtype);
    t[10] = kNaN;
    expect_matches(t, 1e-12, std::string(c10::toString(dtype)) + " with NaN");
    torch::Tensor u = (torch::randn({257}) * 100).to(dtype);
    u[11] = -kInf;
    expect_matches(u, 1e-12, std::string(c10::toString(dtype)) + " with -Inf");
    expect_matches((torch::randn({257}) * 1e3).to(dtype), 1e-12, c10::toString(dtype));
  }
}

// ---- localization ----

BurstResult run_planted(Plant plant, int64_t at, bool fail_fast = false) {
  PlantedScenario s(plant, at, /*steps=*/10);
  BurstOptions o;
  o.fail_fast = fail_fast;
  return run_burst(s, HealthRules{}, o);
}

TEST(Localization, NaNInAForwardTap) {
  const BurstResult r = run_planted(Plant::kForwardNaN, 3);
  ASSERT_EQ(r.verdict.outcome, Outcome::kNonFinite);
  EXPECT_EQ(r.verdict.failure_step, 3);
  ASSERT_TRUE(r.verdict.fault);
  EXPECT_EQ(r.verdict.fault->tensor, "fc1_act");
  EXPECT_EQ(r.verdict.fault->stage, Stage::kForward);
  EXPECT_EQ(r.verdict.fault->nan, 1);
  EXPECT_EQ(r.verdict.fault->numel, 8 * 8);
  EXPECT_EQ(r.verdict.steps_run, 4) << "the burst stops at the first non-finite step";
}

TEST(Localization, LogOfZeroInTheLoss) {
  const BurstResult r = run_planted(Plant::kLogZeroLoss, 2);
  ASSERT_TRUE(r.verdict.fault);
  EXPECT_EQ(r.verdict.fault->tensor, "loss");
  EXPECT_EQ(r.verdict.fault->stage, Stage::kLoss);
  EXPECT_EQ(r.verdict.fault->pos_inf, 1);
  EXPECT_EQ(r.verdict.failure_step, 2);
}

TEST(Localization, NonFiniteGradientWithFiniteForward) {
  const BurstResult r = run_planted(Plant::kSqrtZeroGrad, 4);
  ASSERT_TRUE(r.verdict.fault);
  EXPECT_EQ(r.verdict.fault->tensor, "zero.grad");
  EXPECT_EQ(r.verdict.fault->stage, Stage::kBackward);
  EXPECT_EQ(r.verdict.fault->nan + r.verdict.fault->pos_inf + r.verdict.fault->neg_inf, 4);
}

TEST(Localization, OptimizerStepThatOverflows) {
  const BurstResult r = run_planted(Plant::kOverflowStep, 5);
  ASSERT_TRUE(r.verdict.fault);
  EXPECT_EQ(r.verdict.fault->stage, Stage::kOptimizerStep);
  EXPECT_EQ(r.verdict.fault->tensor, "fc1.weight");
  EXPECT_GT(r.verdict.fault->pos_inf + r.verdict.fault->neg_inf + r.verdict.fault->nan, 0);
  const StepRecord* bad = r.trace.find(5);
  ASSERT_NE(bad, nullptr);
  EXPECT_TRUE(std::isfinite(bad->grad_norm)) << "the gradients were finite";
  EXPECT_TRUE(std::isfinite(bad->param_norm_before));
}

TEST(Localization, FailFastNamesTheSameTensorAndStopsTheStepThere) {
  for (const auto& [plant, at] : {std::pair{Plant::kForwardNaN, 3}, std::pair{Plant::kLogZeroLoss, 2},
                                  std::pair{Plant::kSqrtZeroGrad, 4}, std::pair{Plant::kOverflowStep, 5}}) {
    const BurstResult normal = run_planted(plant, at);
    const BurstResult fast = run_planted(plant, at, /*fail_fast=*/true);
    ASSERT_TRUE(normal.verdict.fault && fast.verdict.fault);
    EXPECT_EQ(fast.verdict.failure_step, normal.verdict.failure_step);
    EXPECT_EQ(fast.verdict.fault->tensor, normal.verdict.fault->tensor);
    EXPECT_EQ(fast.verdict.fault->stage, normal.verdict.fault->stage);
    EXPECT_EQ(fast.verdict.fault->nan, normal.verdict.fault->nan);
    EXPECT_EQ(fast.verdict.fault->pos_inf + fast.verdict.fault->neg_inf,
              normal.verdict.fault->pos_inf + normal.verdict.fault->neg_inf);
    const StepRecord* n = normal.trace.find(at);
    const StepRecord* f = fast.trace.find(at);
    ASSERT_TRUE(n && f);
    if (fast.verdict.fault->stage == Stage::kOptimizerStep) continue;  // nothing left to cut
    // Cut short before the optimizer step: the parameters did not move.
    EXPECT_EQ(f->param_norm_after, f->param_norm_before) << fast.verdict.fault->tensor;
    EXPECT_NE(n->param_norm_after, n->param_norm_before) << fast.verdict.fault->tensor;
    if (fast.verdict.fault->stage != Stage::kBackward) {
      EXPECT_EQ(f->grad_norm, 0.0) << "no backward pass after a non-finite " << fast.verdict.fault->tensor;
      EXPECT_FALSE(std::isfinite(n->grad_norm)) << "the normal step backpropagated the non-finite value";
    }
  }
}

TEST(Localization, ThrowingTrainingCodeIsACrashVerdict) {
  const BurstResult r = run_planted(Plant::kThrow, 2);
  EXPECT_EQ(r.verdict.outcome, Outcome::kCrashed);
  EXPECT_NE(r.verdict.message.find("planted failure in forward"), std::string::npos);
  EXPECT_EQ(r.verdict.message.find("Exception raised from"), std::string::npos) << "no LibTorch source location";
  EXPECT_EQ(r.verdict.crash_stage, "forward");
  EXPECT_EQ(r.verdict.steps_run, 2);
  const Verdict back = verdict_from_json(to_json(r.verdict), "v.json");
  EXPECT_EQ(back.crash_stage, "forward") << "the stage is in verdict.json and repro files";
  EXPECT_NE(verdict_text(r.verdict, r.trace).find("the training code threw in the forward stage"), std::string::npos);
}

// ---- record consistency ----

TEST(Monitor, RecordNumbersAgree) {
  PlantedScenario s(Plant::kNone, -1, 6);
  const BurstResult r = run_burst(s, HealthRules{}, BurstOptions{});
  ASSERT_EQ(r.verdict.outcome, Outcome::kHealthy);
  ASSERT_EQ(r.trace.recent().size(), 6u);
  const StepRecord* prev = nullptr;
  for (const StepRecord& rec : r.trace.recent()) {
    double sq = 0, gmax = 0;
    for (const LayerStats& l : rec.layers) sq += l.grad_norm * l.grad_norm, gmax = std::max(gmax, l.grad_max);
    EXPECT_DOUBLE_EQ(rec.grad_norm, std::sqrt(sq));
    EXPECT_EQ(rec.grad_max, gmax);
    int64_t labels = 0;
    for (int64_t n : rec.label_histogram) labels += n;
    EXPECT_EQ(labels, 8);
    EXPECT_EQ(rec.taps.size(), 2u);
    EXPECT_EQ(rec.taps[0].name, "fc1_act");
    if (prev != nullptr) {
      // The parameters entering a step are the ones the previous step left.
      for (size_t i = 0; i < rec.layers.size(); ++i) {
        EXPECT_EQ(rec.layers[i].param_norm_before, prev->layers[i].param_norm_after) << rec.layers[i].name;
      }
      EXPECT_GT(rec.state_max, 0.0) << "SGD momentum buffers exist after the first step";
    }
    prev = &rec;
  }
}

// The parameters' "before" statistics are reused from the last step's "after"
// only while the tensors are untouched: an in-place change in between is seen.
TEST(Monitor, ParametersChangedBetweenStepsAreMeasuredAgain) {
  PlantedScenario s(Plant::kNone, -1, 2);
  Monitor m(s, HealthRules{});
  Trainer trainer(s);
  int64_t i = 0;
  auto step = [&] {
    const std::vector<Batch> b = trainer.next_batches();
    m.begin_step(i, b);
    trainer.step(i++, b, &m);
    return m.finish_step();
  };
  const StepRecord first = step();
  {
    torch::NoGradGuard no_grad;
    s.model().parameters()[0].mul_(2.0);  // e.g. a user's weight rescaling between steps
  }
  const StepRecord second = step();
  EXPECT_DOUBLE_EQ(second.layers[0].param_norm_before, 2 * first.layers[0].param_norm_after);
  EXPECT_EQ(second.layers[1].param_norm_before, first.layers[1].param_norm_after) << "untouched: reused";
}

// The step is measured as ‖after − before‖ per parameter (its global L2 in
// the record); SGD does not normalize its steps, so no update ratio.
TEST(Monitor, TheUpdateIsTheNormOfTheStepItself) {
  PlantedScenario s(Plant::kNone, -1, 3);
  Monitor m(s, HealthRules{});
  Trainer trainer(s);
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<torch::Tensor> before;
    for (const auto& p : s.model().parameters()) before.push_back(p.detach().clone());
    const std::vector<Batch> b = trainer.next_batches();
    m.begin_step(i, b);
    trainer.step(i, b, &m);
    const StepRecord r = m.finish_step();
    ASSERT_EQ(r.layers.size(), before.size());
    double sq = 0;
    for (size_t k = 0; k < before.size(); ++k) {
      const double want = (s.model().parameters()[k].detach().to(torch::kFloat64) - before[k].to(torch::kFloat64))
                              .norm()
                              .item<double>();
      EXPECT_NEAR(r.layers[k].update_norm, want, 1e-6 * want + 1e-12) << r.layers[k].name << " step " << i;
      EXPECT_FALSE(r.layers[k].adaptive) << "SGD";
      EXPECT_EQ(r.layers[k].update_ratio, 0.0);
      sq += want * want;
    }
    EXPECT_NEAR(r.update_norm, std::sqrt(sq), 1e-6 * std::sqrt(sq));
    EXPECT_GT(r.update_norm, 0.0) << "the step moved the weights";
  }
}

TEST(Monitor, HashesAreXxh3OfTheBatchBytes) {
  PlantedScenario s(Plant::kNone, -1, 1);
  std::optional<Batch> b = s.next_batch();
  Monitor m(s, HealthRules{});
  m.begin_step(*b);
  auto out = s.forward(b->inputs, m.tap());
  auto loss = s.loss(out, b->targets);
  m.after_loss(loss);
  loss.backward();
  m.after_backward();
  s.optimizer().step();
  const StepRecord r = m.finish_step();
  EXPECT_EQ(r.input_hash, hash_bytes(b->host_inputs.data_ptr(), b->host_inputs.nbytes()));
  EXPECT_EQ(r.label_hash, hash_bytes(b->host_targets.data_ptr(), b->host_targets.nbytes()));
  EXPECT_EQ(m.hash_chain(), chain(Hash128{}, r.input_hash, r.label_hash));
  EXPECT_DOUBLE_EQ(r.loss, loss.item<double>());
}

}  // namespace
}  // namespace spikehunt
