// Tests generators/shrinker.h (and evaluator.h, memo.h, shrink_ahead.h) on planted properties: pure functions of the
// config, no training, so the minimal failing boundary is known exactly.
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "generators/finish.h"
#include "generators/gen.h"
#include "generators/rates.h"
#include "generators/shrink_ahead.h"
#include "generators/shrinker.h"
#include "generators/sweep.h"
#include "harness/results.h"
#include "scenarios/registry.h"
#include "test_util.h"
#include "tests/planted.h"

namespace spikehunt {
namespace {

using json = nlohmann::json;

TEST(Shrinker, ShrinksAPlantedPropertyToItsKnownBoundary) {
  const SearchSpace s = planted_space();
  const SpacePoint start = non_finite_start(s);
  FunctionEvaluator evaluator(planted);
  EvalCache cache;
  Budget budget;
  budget.evaluations = 400;
  const ShrinkResult r = shrink(s, start, planted(s.config(start)), evaluator, cache, budget);
  const TrainingConfig minimal = s.config(r.minimal);
  EXPECT_EQ(minimal.optimizer.lr, 0.3) << "the smallest failing lr on the grid";
  EXPECT_EQ(minimal.optimizer.momentum, 0.5);
  EXPECT_EQ(minimal.activation.kind, ActivationKind::kRelu);
  EXPECT_EQ(minimal.protocol.task_order, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(minimal.seed, 0u);
  EXPECT_EQ(minimal.max_batches_per_epoch, 5);
  EXPECT_EQ(s.fields_differing(r.minimal), 2);
  EXPECT_FALSE(r.budget_exhausted);
  // Resets farthest first, then a binary search per ordered value, and no burst
  // for a candidate below one seen healthy: 18 bursts here (the greedy walk of
  // RapidCheck's shrink tree it replaced took 34).
  EXPECT_LE(r.evaluations, 18) << "found within a small budget";
  EXPECT_EQ(r.evaluations, evaluator.calls()) << "every evaluation is a distinct config: the memo holds the rest";
  EXPECT_EQ(failure_class(r.summary.verdict), "non_finite:forward");
}

TEST(Shrinker, SeedsAndSetsAreScannedNotBisected) {
  // Extreme iff lr >= 0.12 and the seed is 2 or 7: not monotone in the seed,
  // so no seed is inferred healthy from another and a binary search would
  // stop at 7.
  const SearchSpace s = planted_space();
  auto property = [](const TrainingConfig& c) {
    return verdict_of(c.optimizer.lr >= 0.12 && (c.seed == 2 || c.seed == 7) ? Outcome::kExtreme : Outcome::kHealthy);
  };
  const SpacePoint start = far_point(s, [&](const TrainingConfig& c) {
    return c.seed == 7 && property(c).verdict.outcome == Outcome::kExtreme;
  });
  FunctionEvaluator evaluator(property);
  EvalCache cache;
  Budget budget;
  const ShrinkResult r = shrink(s, start, property(s.config(start)), evaluator, cache, budget);
  const TrainingConfig minimal = s.config(r.minimal);
  EXPECT_EQ(minimal.seed, 2u);
  EXPECT_EQ(minimal.optimizer.lr, 0.12);
  EXPECT_EQ(s.fields_differing(r.minimal), 2);
  EXPECT_FALSE(r.budget_exhausted);
  EXPECT_GT(r.implied, 0) << "lower learning rates than a healthy one are not run";
}

TEST(Shrinker, AShrinkStaysWithinItsFaultSignature) {
  // The planted pair: non-finite at fc1_act (momentum 0.5 to 0.8) and at
  // fc2_logits (from 0.8). Each shrinks to its own boundary, and its
  // minimal config fails as its start did.
  const SearchSpace s = planted_space();
  FunctionEvaluator evaluator(planted_pair);
  for (const std::string tensor : {"fc1_act", "fc2_logits"}) {
    const SpacePoint start = far_point(s, [&](const TrainingConfig& c) {
      const BurstSummary b = planted_pair(c);
      return b.verdict.fault && b.verdict.fault->tensor == tensor;
    });
    EvalCache cache;
    const ShrinkResult r = shrink(s, start, planted_pair(s.config(start)), evaluator, cache, Budget{});
    const TrainingConfig minimal = s.config(r.minimal);
    EXPECT_EQ(fault_signature(planted_pair(minimal).verdict), "non_finite:forward:" + tensor);
    EXPECT_EQ(fault_signature(r.summary.verdict), "non_finite:forward:" + tensor);
    EXPECT_EQ(minimal.optimizer.lr, 0.3) << tensor;
    EXPECT_EQ(minimal.optimizer.momentum, tensor == "fc1_act" ? 0.5 : 0.8) << tensor;
    for (const SpacePoint& p : r.path) {
      EXPECT_EQ(fault_signature(planted_pair(s.config(p)).verdict), "non_finite:forward:" + tensor)
          << "every step taken fails as the start did";
    }
  }
}

// The options finish_sweep gets for a sweep of two search runs over `s`.
SweepOptions two_run_sweep(const SearchSpace& s) {
  SweepOptions o;
  o.space = s;
  o.runs = 2;
  o.binary = SPIKEHUNT_BINARY;
  o.timeout_seconds = 120;
  o.progress = false;
  return o;
}

TEST(SweepFinish, NearbyFailuresShrinkEachToItsOwnMinimalConfig) {
  // Two search runs of the planted pair, non-finite at fc1_act and at
  // fc2_logits: each is a failure of its own with a minimal config that
  // fails at its tensor (a shrink by class alone took fc2_logits to
  // fc1_act's boundary and reported one failure).
  testing::TempDir dir;
  const SearchSpace s = planted_space();
  SweepStore store(dir.file("sweep.db"), s.to_json().dump(), 0);
  EvalCache cache(&store);
  const auto at = [&](const std::string& tensor) {
    return far_point(s, [&](const TrainingConfig& c) {
      const BurstSummary b = planted_pair(c);
      return b.verdict.fault && b.verdict.fault->tensor == tensor;
    });
  };
  const SpacePoint a = at("fc1_act"), b = at("fc2_logits");
  cache.add("search", 0, s.config(a), planted_pair(s.config(a)));
  cache.add("search", 1, s.config(b), planted_pair(s.config(b)));
  SweepOptions o = two_run_sweep(s);
  o.shrinker = ShrinkMethod::kPasses;
  FunctionEvaluator evaluator(planted_pair);
  Budget budget;
  std::ostringstream out;
  finish_sweep(FinishContext{o, dir.path(), store, o.binary, evaluator, cache, budget, std::chrono::steady_clock::now(), 0}, out);
  const std::string text = out.str();
  EXPECT_TRUE(testing::has(text, "2 distinct failure(s) by fault signature\n")) << text;
  EXPECT_FALSE(testing::has(text, "one failure with")) << text;
  const std::vector<FailureRow> rows = store.failures();
  ASSERT_EQ(rows.size(), 2u);
  for (const FailureRow& f : rows) {
    ASSERT_FALSE(f.minimal_config_json.empty()) << f.signature;
    const TrainingConfig minimal = config_from_json(nlohmann::json::parse(f.minimal_config_json), "row");
    EXPECT_EQ(fault_signature(planted_pair(minimal).verdict), f.signature) << "its minimal config fails as its title says";
  }
  EXPECT_NE(rows[0].minimal_config_json, rows[1].minimal_config_json);
}

TEST(SweepFinish, TheMostHarmfulFailureIsShrunkFirstAndTheRestSayWhyNot) {
  // Two search runs extreme with one signature, one non-finite: under --max-shrinks 1 the non-finite
  // one is shrunk though the extreme one is twice as frequent and came first.
  testing::TempDir dir;
  const SearchSpace s = planted_space();
  SweepStore store(dir.file("sweep.db"), s.to_json().dump(), 0);
  EvalCache cache(&store);
  const SpacePoint extreme = far_point(s, [](const TrainingConfig& c) { return planted(c).verdict.outcome == Outcome::kExtreme; });
  const SpacePoint nan = non_finite_start(s);
  cache.add("search", 0, s.config(extreme), planted(s.config(extreme)));
  cache.add("search", 1, s.config(extreme), planted(s.config(extreme)));
  cache.add("search", 2, s.config(nan), planted(s.config(nan)));
  SweepOptions o = two_run_sweep(s);
  o.runs = 3;
  o.max_shrinks = 1;
  FunctionEvaluator evaluator(planted);
  Budget budget;
  std::ostringstream out;
  finish_sweep(FinishContext{o, dir.path(), store, o.binary, evaluator, cache, budget, std::chrono::steady_clock::now(), 0}, out);
  const std::string text = out.str();
  const size_t first = text.find("\n1. non_finite:forward"), second = text.find("\n2. extreme");
  ASSERT_NE(first, std::string::npos) << text;
  ASSERT_NE(second, std::string::npos) << text;
  EXPECT_TRUE(testing::has(text.substr(second), "not shrunk: --max-shrinks 1 shrinks the 1 most harmful (crashed, "
                                                "non-finite, extreme, timeout; the most frequent first), and this one is 2nd"))
      << text;
  for (const FailureRow& f : store.failures()) {
    EXPECT_EQ(f.minimal_config_json.empty(), f.signature.rfind("extreme", 0) == 0) << f.signature;
  }
}

TEST(Shrinker, AcceptsOnlyTheSameFailureClass) {
  // From a non-finite start, candidates that are merely extreme (0.12 <= lr < 0.3) are refused.
  const SearchSpace s = planted_space();
  const SpacePoint start = non_finite_start(s);
  FunctionEvaluator evaluator(planted);
  EvalCache cache;
  const ShrinkResult r = shrink(s, start, planted(s.config(start)), evaluator, cache, Budget{});
  EXPECT_GE(s.config(r.minimal).optimizer.lr, 0.3);
  // From an extreme start, the boundary is lr 0.12 with momentum at its simplest.
  const SpacePoint extreme = far_point(s, [](const TrainingConfig& c) { return planted(c).verdict.outcome == Outcome::kExtreme; });
  EvalCache cache2;
  const ShrinkResult e = shrink(s, extreme, planted(s.config(extreme)), evaluator, cache2, Budget{});
  EXPECT_EQ(s.config(e.minimal).optimizer.lr, 0.12);
  EXPECT_EQ(s.config(e.minimal).optimizer.momentum, 0.0);
  EXPECT_EQ(s.fields_differing(e.minimal), 1);
}

TEST(Shrinker, StageAndTensorDistinguishFailures) {
  Verdict a = verdict_of(Outcome::kNonFinite, Stage::kForward, "fc1_act").verdict;
  Verdict b = verdict_of(Outcome::kNonFinite, Stage::kBackward, "fc1.weight.grad").verdict;
  EXPECT_EQ(failure_class(a), "non_finite:forward");
  EXPECT_EQ(failure_class(b), "non_finite:backward");
  EXPECT_EQ(fault_signature(a), "non_finite:forward:fc1_act");
  EXPECT_EQ(failure_class(verdict_of(Outcome::kHealthy).verdict), "");
  EXPECT_EQ(failure_class(verdict_of(Outcome::kTimeout).verdict), "timeout");
  Verdict e = verdict_of(Outcome::kExtreme).verdict;
  e.onset_rules = {"param_jump_limit", "grad_norm_limit"};
  EXPECT_EQ(failure_class(e), "extreme");
  EXPECT_EQ(fault_signature(e), "extreme:param_jump_limit");
}

TEST(Shrinker, BudgetStopsTheShrinkAndSaysSo) {
  const SearchSpace s = planted_space();
  const SpacePoint start = non_finite_start(s);
  FunctionEvaluator evaluator(planted);
  EvalCache cache;
  Budget budget;
  budget.evaluations = 5;
  const ShrinkResult r = shrink(s, start, planted(s.config(start)), evaluator, cache, budget);
  EXPECT_TRUE(r.budget_exhausted);
  EXPECT_LE(r.evaluations, 5);
  EXPECT_LE(s.fields_differing(r.minimal), s.fields_differing(start));
  EXPECT_EQ(failure_class(planted(s.config(r.minimal)).verdict), "non_finite:forward") << "still fails the same way";
}

// The same walk with windows of 3 candidates evaluated at once ends at the same minimum.
class WindowedEvaluator : public FunctionEvaluator {
 public:
  using FunctionEvaluator::FunctionEvaluator;
  int parallelism() const override { return 3; }
  void evaluate(const std::vector<TrainingConfig>& configs,
                const std::function<void(size_t, const BurstSummary&)>& on_result,
                const std::function<bool()>& stop = {}) override {
    rounds_ += !configs.empty();
    // A round takes a little while, as bursts do: shrinks running ahead in
    // threads of their own ask for their next configs meanwhile.
    if (!configs.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    FunctionEvaluator::evaluate(configs, on_result, stop);
  }
  int64_t rounds() const { return rounds_; }  // waits for bursts, one after another

 private:
  int64_t rounds_ = 0;
};

TEST(Shrinker, ResultDoesNotDependOnTheJobCount) {
  const SearchSpace s = planted_space();
  const SpacePoint start = non_finite_start(s);
  // With a tight budget too: the bursts run ahead on idle slots count only
  // when the search asks for them, so the budget runs out at the same point.
  for (const int64_t bursts : {int64_t(100), int64_t(9)}) {
    Budget budget;
    budget.evaluations = bursts;
    FunctionEvaluator one(planted);
    WindowedEvaluator three(planted);
    EvalCache c1, c3;
    const ShrinkResult a = shrink(s, start, planted(s.config(start)), one, c1, budget);
    const ShrinkResult b = shrink(s, start, planted(s.config(start)), three, c3, budget);
    EXPECT_EQ(a.minimal, b.minimal) << "budget " << bursts;
    EXPECT_EQ(a.path, b.path) << "budget " << bursts;
    EXPECT_EQ(a.evaluations, b.evaluations) << "budget " << bursts;
    EXPECT_EQ(a.budget_exhausted, b.budget_exhausted) << "budget " << bursts;
    EXPECT_EQ(a.ran, a.evaluations) << "one job: nothing runs ahead";
    EXPECT_EQ(c1.held(), 0);
    EXPECT_EQ(one.calls(), a.evaluations);
    EXPECT_EQ(three.calls(), b.ran);
    EXPECT_EQ(b.ran, b.evaluations + c3.held()) << "every burst is counted or still held, never asked for";
    EXPECT_LT(three.rounds(), a.evaluations) << "budget " << bursts << ": fewer waits than bursts, on three slots";
  }
}

// A sweep's shrinks with one job and with three: the same failures, minimal
// configs and counted bursts; with three, the shrinks first run at once
// (shrink_ahead), sharing the slots, and then find their bursts held.
TEST(SweepFinish, ShrinksDoNotDependOnTheJobCountAndRunAtOnceOnTheSlots) {
  const SearchSpace s = planted_space();
  const SpacePoint a = non_finite_start(s);
  const SpacePoint b = far_point(s, [](const TrainingConfig& c) { return planted(c).verdict.outcome == Outcome::kExtreme; });
  std::vector<std::vector<FailureRow>> rows;
  std::vector<int64_t> calls;
  int64_t rounds = 0;
  for (const bool windows : {false, true}) {
    testing::TempDir dir;
    SweepStore store(dir.file("sweep.db"), s.to_json().dump(), 0);
    EvalCache cache(&store);
    cache.add("search", 0, s.config(a), planted(s.config(a)));
    cache.add("search", 1, s.config(b), planted(s.config(b)));
    const SweepOptions o = two_run_sweep(s);
    FunctionEvaluator one(planted);
    WindowedEvaluator three(planted);
    Evaluator& e = windows ? static_cast<Evaluator&>(three) : one;
    std::ostringstream out;
    finish_sweep(FinishContext{o, dir.path(), store, o.binary, e, cache, Budget{}, std::chrono::steady_clock::now(), 0}, out);
    rows.push_back(store.failures());
    calls.push_back(windows ? three.calls() : one.calls());
    if (windows) {
      rounds = three.rounds();
    } else {
      EXPECT_FALSE(testing::has(out.str(), "trained on idle slots")) << out.str();
    }
  }
  ASSERT_EQ(rows[0].size(), 2u);
  ASSERT_EQ(rows[1].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(rows[0][i].signature, rows[1][i].signature);
    EXPECT_EQ(rows[0][i].minimal_config_json, rows[1][i].minimal_config_json) << rows[0][i].signature;
    EXPECT_EQ(rows[0][i].shrink_evaluations, rows[1][i].shrink_evaluations) << rows[0][i].signature;
    EXPECT_EQ(rows[0][i].shrink_steps, rows[1][i].shrink_steps) << rows[0][i].signature;
  }
  EXPECT_GE(calls[1], calls[0]) << "three slots train at least what one does";
  EXPECT_LT(rounds, rows[0][0].shrink_evaluations + rows[0][1].shrink_evaluations)
      << "fewer waits than bursts counted: the slots worked in parallel";
}

// Shrinks run ahead at once (shrink_ahead, three slots) leave the shrinks in
// order nothing to train, and change none of their results, the bursts they
// count or where a tight budget stops them.
TEST(Shrinker, ShrinksRunAheadAtOnceChangeNothingTheShrinksInOrderFind) {
  const SearchSpace s = planted_space();
  const SpacePoint a = non_finite_start(s);
  const SpacePoint b = other_non_finite_start(s, a);
  const SpacePoint c = far_point(s, [](const TrainingConfig& t) { return planted(t).verdict.outcome == Outcome::kExtreme; });
  const std::vector<std::pair<SpacePoint, BurstSummary>> starts = {
      {a, planted(s.config(a))}, {b, planted(s.config(b))}, {c, planted(s.config(c))}};
  for (const int64_t bursts : {int64_t(100), int64_t(9)}) {
    Budget budget;
    budget.evaluations = bursts;
    // In order, as a sweep does.
    auto in_order = [&](Evaluator& evaluator, EvalCache& cache) {
      std::vector<ShrinkResult> out;
      for (const auto& [p, summary] : starts) out.push_back(shrink(s, p, summary, evaluator, cache, budget));
      return out;
    };
    EvalCache alone;
    FunctionEvaluator one(planted);
    const std::vector<ShrinkResult> expected = in_order(one, alone);
    // Ahead at once on three slots, then in order.
    EvalCache cache;
    WindowedEvaluator three(planted);
    const int64_t trained = shrink_ahead(s, starts, three, cache, budget);
    EXPECT_EQ(trained, three.calls());
    EXPECT_EQ(cache.held(), trained) << "run ahead, nothing counted";
    FunctionEvaluator after(planted);
    int64_t counted = 0;
    const std::vector<ShrinkResult> got = in_order(after, cache);
    for (size_t i = 0; i < starts.size(); ++i) {
      const ShrinkResult& r = got[i];
      EXPECT_EQ(r.minimal, expected[i].minimal) << "budget " << bursts << ", shrink " << i;
      EXPECT_EQ(r.path, expected[i].path) << "budget " << bursts << ", shrink " << i;
      EXPECT_EQ(r.evaluations, expected[i].evaluations) << "budget " << bursts << ", shrink " << i;
      EXPECT_EQ(r.budget_exhausted, expected[i].budget_exhausted) << "budget " << bursts << ", shrink " << i;
      counted += r.evaluations;
    }
    if (bursts == 100) {
      EXPECT_EQ(after.calls(), 0) << "every burst the shrinks in order asked for was trained ahead";
      EXPECT_EQ(trained, counted + cache.held()) << "what ran ahead and was not needed is still held";
    }
    EXPECT_LT(three.rounds(), counted) << "budget " << bursts << ": the shrinks shared the slots";
  }
}

// An evaluator that fails part way fails shrink_ahead with its message, and
// nothing is left waiting.
TEST(Shrinker, ShrinksRunAheadStopWithTheEvaluatorsError) {
  const SearchSpace s = planted_space();
  const SpacePoint a = non_finite_start(s);
  const SpacePoint b = other_non_finite_start(s, a);
  int64_t calls = 0;
  WindowedEvaluator failing([&](const TrainingConfig& c) {
    if (++calls == 4) throw std::runtime_error("cannot start build/spikehunt: No such file or directory");
    return planted(c);
  });
  EvalCache cache;
  try {
    shrink_ahead(s, {{a, planted(s.config(a))}, {b, planted(s.config(b))}}, failing, cache, Budget{});
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(testing::has(e.what(), "cannot start build/spikehunt")) << e.what();
  }
}

// The passes end equal or simpler than the shrinker they replaced (the greedy
// walk of RapidCheck's shrink tree, sweep --shrinker tree), in at most half
// its bursts.
TEST(Shrinker, PassesEndEqualOrSimplerThanTheTreeInHalfTheBursts) {
  const SearchSpace s = planted_space();
  int64_t passes_bursts = 0, tree_bursts = 0;
  for (uint64_t k = 0; k < 4; ++k) {
    const SpacePoint start = far_point(s, [&](const TrainingConfig& c) {
      return planted(c).verdict.outcome == (k % 2 ? Outcome::kExtreme : Outcome::kNonFinite) && c.seed == k + 3;
    });
    EvalCache c1, c2;
    FunctionEvaluator e1(planted), e2(planted);
    Budget budget;
    budget.evaluations = 400;
    const ShrinkResult passes = shrink(s, start, planted(s.config(start)), e1, c1, budget);
    const ShrinkResult tree = shrink_tree(s, start, planted(s.config(start)), e2, c2, budget);
    EXPECT_FALSE(tree.budget_exhausted);
    EXPECT_EQ(failure_class(passes.summary.verdict), failure_class(tree.summary.verdict));
    const int64_t pf = s.fields_differing(passes.minimal), tf = s.fields_differing(tree.minimal);
    EXPECT_LE(pf, tf) << "start " << k;
    if (pf == tf) {
      EXPECT_LE(s.distance(passes.minimal), s.distance(tree.minimal)) << "start " << k;
    }
    passes_bursts += passes.evaluations;
    tree_bursts += tree.evaluations;
  }
  EXPECT_LE(2 * passes_bursts, tree_bursts) << passes_bursts << " vs " << tree_bursts;
}

// `sweep --shrinker tree`: the same sweep shrunk by the tree walk, one
// failure after another, for comparison: the same failures, the passes'
// minimal configs as simple or simpler, in fewer bursts.
TEST(SweepFinish, TheTreeShrinkerIsThePathBeforeToCompareWith) {
  const SearchSpace s = planted_space();
  const SpacePoint a = non_finite_start(s);
  const SpacePoint b = far_point(s, [](const TrainingConfig& c) { return planted(c).verdict.outcome == Outcome::kExtreme; });
  std::map<ShrinkMethod, std::vector<FailureRow>> rows;
  for (const ShrinkMethod method : {ShrinkMethod::kPasses, ShrinkMethod::kTree}) {
    testing::TempDir dir;
    SweepStore store(dir.file("sweep.db"), s.to_json().dump(), 0);
    EvalCache cache(&store);
    cache.add("search", 0, s.config(a), planted(s.config(a)));
    cache.add("search", 1, s.config(b), planted(s.config(b)));
    SweepOptions o = two_run_sweep(s);
    o.shrinker = method;
    FunctionEvaluator one(planted);
    std::ostringstream out;
    finish_sweep(FinishContext{o, dir.path(), store, o.binary, one, cache, Budget{}, std::chrono::steady_clock::now(), 0}, out);
    rows[method] = store.failures();
  }
  const std::vector<FailureRow>& passes = rows[ShrinkMethod::kPasses];
  const std::vector<FailureRow>& tree = rows[ShrinkMethod::kTree];
  ASSERT_EQ(passes.size(), 2u);
  ASSERT_EQ(tree.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(passes[i].signature, tree[i].signature);
    const SpacePoint p = s.point_of(config_from_json(json::parse(passes[i].minimal_config_json), "passes"));
    const SpacePoint t = s.point_of(config_from_json(json::parse(tree[i].minimal_config_json), "tree"));
    EXPECT_LE(s.fields_differing(p), s.fields_differing(t)) << passes[i].signature;
    if (s.fields_differing(p) == s.fields_differing(t)) {
      EXPECT_LE(s.distance(p), s.distance(t)) << passes[i].signature;
    }
    EXPECT_LT(passes[i].shrink_evaluations, tree[i].shrink_evaluations) << passes[i].signature;
  }
}

TEST(Shrinker, TheMemoAnswersRepeatedConfigs) {
  const SearchSpace s = planted_space();
  const SpacePoint start = non_finite_start(s);
  FunctionEvaluator evaluator(planted);
  EvalCache cache;
  shrink(s, start, planted(s.config(start)), evaluator, cache, Budget{});
  const int64_t first = evaluator.calls();
  const ShrinkResult again = shrink(s, start, planted(s.config(start)), evaluator, cache, Budget{});
  EXPECT_EQ(evaluator.calls(), first) << "a second identical shrink trains nothing";
  EXPECT_EQ(again.evaluations, 0);
  EXPECT_GT(again.memo_hits, 0);
}

TEST(Sweep, WilsonIntervals) {
  auto [lo, hi] = wilson_interval(0, 10);
  EXPECT_NEAR(lo, 0.0, 1e-12);
  EXPECT_NEAR(hi, 0.2775, 1e-4);
  std::tie(lo, hi) = wilson_interval(5, 10);
  EXPECT_NEAR(lo, 0.2366, 1e-4);
  EXPECT_NEAR(hi, 0.7634, 1e-4);
  std::tie(lo, hi) = wilson_interval(10, 10);
  EXPECT_NEAR(lo, 0.7225, 1e-4);
  EXPECT_NEAR(hi, 1.0, 1e-12);
}

TEST(Sweep, FactorsComeFromTheSpacesOwnDimensions) {
  add_scenario_name("free_knobs");  // a user's scenario reading undeclared params
  const SearchSpace space = SearchSpace::from_json(nlohmann::json::parse(R"({
    "base": {"scenario": "free_knobs", "params": {"warmup": 10}},
    "dimensions": {
      "optimizer.lr": {"log_range": [0.01, 0.5]},
      "optimizer.momentum": {"range": [0, 0.99], "step": 0.01},
      "protocol.task_order": {"permutations": true},
      "params.warmup": {"range": [0, 40], "step": 10},
      "params.norm": {"set": ["layer", "rms"]},
      "seed": {"range": [0, 9]},
      "max_batches_per_epoch": {"range": [5, 30]}
    }})"), "space.json");
  TrainingConfig c;
  c.scenario = "free_knobs";
  c.optimizer.lr = 0.15;
  c.optimizer.momentum = 0.9;
  c.protocol.task_order = {1, 0};
  c.params.set("warmup", 30);
  c.params.set("norm", "rms");
  c.seed = 3;
  std::map<std::string, std::string> m;
  for (const Factor& f : factors_of(space, config_to_json(c))) m[f.field] = f.bucket;
  EXPECT_EQ(m.size(), 7u) << "one factor per dimension, nothing else";
  EXPECT_EQ(m.at("max_batches_per_epoch"), "[5, 11.2)") << "26 values in four bins";
  EXPECT_EQ(m.at("optimizer.lr"), "[0.1, 1)") << "a log range by decade";
  EXPECT_EQ(m.at("optimizer.momentum"), "[0.742, 0.99]") << "a long range in four bins";
  EXPECT_EQ(m.at("protocol.task_order"), "B>A");
  EXPECT_EQ(m.at("params.warmup"), "30") << "a short range by value: the user's own knob";
  EXPECT_EQ(m.at("params.norm"), "rms");
  EXPECT_EQ(m.at("seed"), "3") << "ten values or fewer: by value";
  c.params = Params{};
  for (const Factor& f : factors_of(space, config_to_json(c))) {
    if (f.field == "params.norm") {
      EXPECT_EQ(f.bucket, "(unset)");
    }
  }
}

}  // namespace
}  // namespace spikehunt
