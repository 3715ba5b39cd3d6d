// Tests generators/space.h and generators/gen.h: spaces parse strictly, every
// generated point stays in its space, and every shrink step is strictly simpler.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "generators/gen.h"
#include "generators/space.h"
#include "scenarios/registry.h"
#include "test_util.h"

namespace spikehunt {
namespace {

using json = nlohmann::json;

const SearchSpace& builtin() {
  static const SearchSpace space = SearchSpace::builtin();
  return space;
}

std::string space_error(const json& j) {
  try {
    SearchSpace::from_json(j, "space.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// ---- parsing ----

TEST(Space, CommittedSpaceEqualsTheBuiltIn) {
  const SearchSpace file = SearchSpace::load(testing::source_path("configs/space.json"));
  ASSERT_EQ(file.dimensions().size(), builtin().dimensions().size());
  for (size_t i = 0; i < file.dimensions().size(); ++i) {
    EXPECT_EQ(file.dimensions()[i].field, builtin().dimensions()[i].field);
    EXPECT_EQ(file.dimensions()[i].values, builtin().dimensions()[i].values);
  }
  EXPECT_EQ(file.base(), builtin().base());
}

TEST(Space, BuiltInCoversTheFactorsTheIssueNames) {
  std::vector<std::string> fields;
  for (const Dimension& d : builtin().dimensions()) fields.push_back(d.field);
  for (const char* f : {"optimizer.lr", "optimizer.momentum", "activation.kind", "activation.slope", "optimizer.kind",
                        "protocol.task_order", "seed", "batch_size", "grad_clip", "protocol.epochs_per_phase",
                        "max_batches_per_epoch"}) {
    EXPECT_NE(std::find(fields.begin(), fields.end(), f), fields.end()) << f;
  }
}

TEST(Space, DimensionsAreOrderedFromTheirSimplestValue) {
  const SearchSpace s = SearchSpace::from_json(
      {{"dimensions",
        {{"optimizer.lr", {{"log_range", {0.01, 0.5}}}},
         {"optimizer.momentum", {{"range", {0, 0.99}}, {"step", 0.01}, {"simplest", 0.9}}},
         {"activation.kind", {{"set", {"gelu", "relu", "tanh"}}, {"simplest", "relu"}}},
         {"seed", {{"range", {3, 7}}}},
         {"protocol.task_order", {{"permutations", true}}}}}},
      "s");
  const auto& d = s.dimensions();
  ASSERT_EQ(d.size(), 5u);
  const Dimension* lr = &d[0];
  for (const Dimension& x : d) {
    if (x.field == "optimizer.lr") lr = &x;
  }
  EXPECT_EQ(lr->values.front(), 0.01);
  EXPECT_EQ(lr->values.back(), 0.5);
  EXPECT_TRUE(std::is_sorted(lr->values.begin(), lr->values.end()));
  for (const Dimension& x : d) {
    if (x.field == "optimizer.momentum") {
      EXPECT_EQ(x.values[0], 0.9);
      EXPECT_EQ(x.values.size(), 100u);
      EXPECT_TRUE(x.values[1] == 0.89 || x.values[1] == 0.91);
      EXPECT_NE(std::find(x.values.begin(), x.values.end(), json(0.3)), x.values.end()) << "tidy decimal values";
    }
    if (x.field == "activation.kind") {
      EXPECT_EQ(x.values, (std::vector<json>{"relu", "gelu", "tanh"}));
    }
    if (x.field == "seed") {
      EXPECT_EQ(x.values, (std::vector<json>{3, 4, 5, 6, 7}));
    }
    if (x.field == "protocol.task_order") {
      EXPECT_EQ(x.arity(), 1);
    }
  }
}

TEST(Space, LogGridHasTwoSignificantDigitsAndBothEnds) {
  const std::vector<double> g = log_grid(0.013, 0.5);
  EXPECT_EQ(g.front(), 0.013);
  EXPECT_EQ(g.back(), 0.5);
  EXPECT_EQ(g, (std::vector<double>{0.013, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2,
                                    0.25, 0.3, 0.4, 0.5}));
  for (double v : log_grid(1e-4, 10)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2g", v);
    EXPECT_EQ(std::strtod(buf, nullptr), v) << v;
  }
}

TEST(Space, BadSpacesAreClearErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([])", "must hold a JSON object"},
      {R"({"dimensions": {}})", "dimensions = {} must be a non-empty object"},
      {R"({"dimensions": {"optimizer.lr": {"log_range": [0.5, 0.01]}}})",
       "dimensions.optimizer.lr = [0.5,0.01] is empty: min > max"},
      {R"({"dimensions": {"optimizer.lr": {"log_range": [0, 1]}}})", "must be positive for a log range"},
      {R"({"dimensions": {"optimizer.lrr": {"range": [0, 1]}}})", "dimensions.optimizer.lrr is not a config field"},
      {R"({"dimensions": {"optimizer": {"range": [0, 1]}}})", "is a group of fields"},
      {R"({"dimensions": {"optimizer.lr": {"range": [0.1, 1], "stepp": 1}}})", "unknown key \"stepp\""},
      {R"({"dimensions": {"optimizer.lr": {"range": [0.1, 1], "set": [1]}}})", "exactly one of"},
      {R"({"dimensions": {"optimizer.kind": {"set": ["sgd", "adamm"]}}})",
       "dimensions.optimizer.kind = \"adamm\" is rejected by optimizer.kind: is not one of sgd | adam | adamw"},
      {R"({"dimensions": {"optimizer.lr": {"range": [0.1, 20]}}})", "= 20 is rejected by optimizer.lr: is not in (0, 10]"},
      {R"({"dimensions": {"optimizer.momentum": {"range": [0, 0.9], "simplest": 0.95}}})", "simplest is outside"},
      {R"({"dimensions": {"activation.kind": {"set": []}}})", "must be a non-empty list"},
      {R"({"dimensions": {"activation.kind": {"set": ["relu", "relu"]}}})", "is listed twice"},
      {R"({"dimensions": {"seed": {"permutations": true}}})", "permutations apply to protocol.task_order only"},
      {R"({"base": {"optimizer": {"lr": -1}}, "dimensions": {"seed": {"range": [0, 3]}}})",
       "base.optimizer.lr = -1 is not in (0, 10]"},
      {R"({"dimension": {"seed": {"range": [0, 3]}}})", "dimension is not a search-space key"},
      // Regressions found by fuzz_space: these threw from nlohmann::json or overflowed.
      {R"({"dimensions": {"seed": {"range": [0, 3], "step": "x"}}})", "step must be a number"},
      {R"({"dimensions": {"seed": {"range": [0, 18446744073709551615]}}})", "has an integer beyond 2^63 - 1"},
      {R"({"dimensions": {"seed": {"range": [0, 9223372036854775807]}}})", "holds more than 100,000 values"},
  };
  for (const auto& [text, expected] : cases) {
    const json j = json::parse(text);
    const std::string e = space_error(j);
    EXPECT_NE(e.find(expected), std::string::npos) << "expected \"" << expected << "\" in:\n" << e;
    EXPECT_NE(e.find("error: space.json: "), std::string::npos) << e;
  }
}

TEST(Space, PermutationCodesRoundTrip) {
  for (const std::vector<int64_t>& perm : std::vector<std::vector<int64_t>>{{0, 1, 2}, {2, 0, 1}, {1, 0}, {3, 1, 0, 2}}) {
    std::vector<int64_t> code = code_from_permutation(perm);
    EXPECT_EQ(permutation_from_code(code, int64_t(perm.size())), perm);
  }
  EXPECT_EQ(permutation_from_code({0, 0}, 3), (std::vector<int64_t>{0, 1, 2}));
}

// ---- generators ----

RC_GTEST_PROP(Gen, PointsStayInTheirSpace, ()) {
  const SearchSpace& s = builtin();
  const SpacePoint p = *gen_point(s);
  RC_ASSERT(int64_t(p.size()) == s.digits());
  for (size_t i = 0; i < p.size(); ++i) RC_ASSERT(p[i] >= 0 && p[i] < s.digit_limit(int64_t(i)));
  RC_PRE(s.valid(p));
  const TrainingConfig c = s.config(p);
  RC_ASSERT(c.optimizer.lr >= 0.01 && c.optimizer.lr <= 0.5);
  RC_ASSERT(c.optimizer.momentum >= 0.0 && c.optimizer.momentum <= 0.99);
  RC_ASSERT(c.activation.slope >= 0.0 && c.activation.slope <= 0.3);
  RC_ASSERT(c.max_batches_per_epoch >= 5 && c.max_batches_per_epoch <= 30);
  RC_ASSERT(c.seed <= 9u);
  RC_ASSERT(s.point_of(c) == p);
}

RC_GTEST_PROP(Gen, GeneratedConfigsAreValid, ()) {
  const TrainingConfig c = *gen_config(builtin());
  RC_ASSERT(validate(c).empty());
}

RC_GTEST_PROP(Gen, EveryShrinkIsStrictlySimplerAndInRange, ()) {
  const SearchSpace& s = builtin();
  const SpacePoint p = *gen_point(s);
  for (const SpacePoint& q : shrink_candidates(s, p)) {
    bool some_lower = false;
    for (size_t i = 0; i < q.size(); ++i) {
      RC_ASSERT(q[i] >= 0 && q[i] < s.digit_limit(int64_t(i)));
      RC_ASSERT(q[i] <= p[i]);
      some_lower |= q[i] < p[i];
    }
    RC_ASSERT(some_lower);
    RC_ASSERT(s.fields_differing(q) < s.fields_differing(p) ||
              (s.fields_differing(q) == s.fields_differing(p) && s.distance(q) < s.distance(p)));
  }
}

RC_GTEST_PROP(Gen, DigitShrinksMoveTowardZero, (void)) {
  const int64_t limit = *rc::gen::inRange<int64_t>(1, 1000);
  const rc::Shrinkable<int64_t> d = gen_digit(limit)(rc::Random(*rc::gen::arbitrary<uint64_t>()));
  RC_ASSERT(d.value() >= 0 && d.value() < limit);
  for (const rc::Shrinkable<int64_t>& s : to_vector(d.shrinks())) {
    RC_ASSERT(s.value() >= 0 && s.value() < d.value());
  }
}

RC_GTEST_PROP(Gen, GreedyShrinkingReachesTheSimplestConfig, ()) {
  const SearchSpace& s = builtin();
  rc::Shrinkable<SpacePoint> current = gen_point(s)(rc::Random(*rc::gen::arbitrary<uint64_t>()));
  int steps = 0;
  while (true) {
    const auto shrinks = to_vector(current.shrinks());
    if (shrinks.empty()) break;
    current = shrinks.front();  // "always still fails": accept the first candidate
    RC_ASSERT(++steps < 1000);
  }
  RC_ASSERT(s.fields_differing(current.value()) == 0);
  const TrainingConfig c = s.config(current.value());
  RC_ASSERT(c.optimizer.lr == 0.01);
  RC_ASSERT(c.optimizer.momentum == 0.0);
  RC_ASSERT(c.activation.kind == ActivationKind::kRelu);
  RC_ASSERT(c.activation.slope == 0.0);
  RC_ASSERT(c.protocol.task_order == (std::vector<int64_t>{0, 1}));
  RC_ASSERT(c.seed == 0u);
  RC_ASSERT(c.max_batches_per_epoch == 5);
}

TEST(Gen, SamplesAreDeterministicPerIndexAndDiffer) {
  const SearchSpace& s = builtin();
  EXPECT_EQ(sample_point(s, 1, 5), sample_point(s, 1, 5));
  EXPECT_NE(sample_point(s, 1, 5), sample_point(s, 1, 6));
  EXPECT_NE(sample_point(s, 1, 5), sample_point(s, 2, 5));
  // Log-uniform: about as many lr samples below 0.1 (1 decade of 1.7) as above.
  int below = 0;
  for (uint64_t i = 0; i < 400; ++i) below += s.config(sample_point(s, 3, i)).optimizer.lr < 0.1;
  EXPECT_GT(below, 160);
  EXPECT_LT(below, 320);
}

TEST(Space, TheFailureMapsAxesComeFromTheSpace) {
  EXPECT_EQ(SearchSpace::builtin().map_axes(), (std::vector<std::string>{"optimizer.lr", "optimizer.momentum"}))
      << "the log range, then the numeric dimension of its group with the most values";
  add_scenario_name("free_knobs");  // a user's scenario: it reads params.warmup
  const auto space = [](const std::string& extra) {
    return SearchSpace::from_json(nlohmann::json::parse(R"({"base": {"scenario": "free_knobs"}, "dimensions": {
      "params.warmup": {"range": [0, 100], "step": 10}, "max_batches_per_epoch": {"range": [2, 6]},
      "seed": {"range": [0, 3]}, "activation.kind": {"set": ["relu", "tanh"]}})" + extra + "}"), "s.json");
  };
  EXPECT_EQ(space("").map_axes(), (std::vector<std::string>{"max_batches_per_epoch", "params.warmup"}))
      << "no log range: the first numeric dimension, then the one with the most values";
  EXPECT_EQ(space(R"(, "map": ["seed", "params.warmup"])").map_axes(),
            (std::vector<std::string>{"seed", "params.warmup"}));
  try {
    space(R"(, "map": ["seed", "activation.kind"])");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("map = [\"seed\",\"activation.kind\"] must name two different numeric"),
              std::string::npos)
        << e.what();
  }
}

TEST(Space, AScenariosParamsAreDimensions) {
  add_scenario_name("space_knobs");
  declare_params("space_knobs", {ParamSpec::integer("warmup", 10, 0, 100, "warm-up steps")});
  const SearchSpace s = SearchSpace::from_json(nlohmann::json::parse(R"({"base": {"scenario": "space_knobs"},
      "dimensions": {"params.warmup": {"range": [0, 50], "step": 10}}})"), "s.json");
  EXPECT_EQ(s.config({3}).params.integer("warmup"), 30);
  EXPECT_EQ(s.simplest().params.integer("warmup"), 0);
  EXPECT_EQ(s.point_of(s.config({4})), (SpacePoint{4}));
  try {
    SearchSpace::from_json(nlohmann::json::parse(R"({"base": {"scenario": "space_knobs"},
        "dimensions": {"params.warmpu": {"range": [0, 50], "step": 10}}})"), "s.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean \"warmup\"?"), std::string::npos) << e.what();
  }
  try {
    SearchSpace::from_json(nlohmann::json::parse(R"({"base": {"scenario": "space_knobs"},
        "dimensions": {"params.warmup": {"range": [0, 500], "step": 10}}})"), "s.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is not in [0, 100]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spikehunt

namespace spikehunt {
namespace {

TEST(Space, TheGptSpaceSweepsWortsmansFactorsOverValidGptConfigs) {
  const SearchSpace space = SearchSpace::load(testing::source_path("configs/gpt_space.json"));
  std::vector<std::string> fields;
  for (const auto& d : space.dimensions()) fields.push_back(d.field);
  for (const char* f : {"optimizer.lr", "schedule.warmup_steps", "model.gpt.qk_layernorm", "model.gpt.z_loss",
                        "optimizer.weight_decay", "optimizer.betas", "optimizer.eps", "precision", "seed"}) {
    EXPECT_NE(std::find(fields.begin(), fields.end(), f), fields.end()) << f;
  }
  const TrainingConfig simplest = space.simplest();
  EXPECT_EQ(simplest.model.kind, "gpt");
  EXPECT_EQ(simplest.dataset.kind, DatasetKind::kText);
  EXPECT_EQ(simplest.optimizer.lr, 3e-4) << "the grid's low end";
  EXPECT_FALSE(simplest.model.gpt.qk_layernorm);
  for (uint64_t i = 0; i < 20; ++i) {
    const TrainingConfig c = space.config(sample_point(space, 0, i));
    EXPECT_TRUE(validate(c).empty()) << "sample " << i;
  }
  // The config the README starts from, too.
  EXPECT_EQ(load_config(testing::source_path("configs/gpt.json")).model.kind, "gpt");
}

}  // namespace
}  // namespace spikehunt
