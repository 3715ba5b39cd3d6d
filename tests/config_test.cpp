// Tests scenarios/config.h: JSON round trips, strict parsing, validation
// messages, --set overrides, and the committed configs.
#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/did_you_mean.h"
#include "base/files.h"
#include "scenarios/config.h"
#include "scenarios/lr_schedule.h"
#include "scenarios/registry.h"
#include "test_util.h"

namespace spikehunt {
namespace {

using json = nlohmann::json;
using testing::TempDir;

// The error text of the built-in default with these overrides ("no error" when none).
std::string override_error(const std::vector<std::string>& sets) {
  try {
    default_config(sets);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// Parses and expects an InputError; returns its text.
std::string parse_error(const json& j) {
  try {
    config_from_json(j, "cfg.json");
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << j.dump();
  return "";
}

TEST(Config, DefaultsRoundTripExactly) {
  const TrainingConfig c;
  const json j = config_to_json(c);
  EXPECT_EQ(config_to_json(config_from_json(j, "x")), j);
}

TEST(Config, DoublesNeedingSeventeenDigitsRoundTripBitExactly) {
  TrainingConfig c;
  c.optimizer.lr = 0.1 + 0.2;  // 0.30000000000000004
  c.optimizer.momentum = 1.0 / 3.0;
  c.activation.slope = 5e-324;  // the smallest denormal
  c.optimizer.eps = 1.0000000000000002e-8;
  c.seed = UINT64_MAX;
  const std::string text = config_to_json(c).dump(2);
  const TrainingConfig back = config_from_json(json::parse(text), "x");
  EXPECT_EQ(back.optimizer.lr, c.optimizer.lr);
  EXPECT_EQ(back.optimizer.momentum, c.optimizer.momentum);
  EXPECT_EQ(back.activation.slope, c.activation.slope);
  EXPECT_EQ(back.optimizer.eps, c.optimizer.eps);
  EXPECT_EQ(back.seed, UINT64_MAX);
  EXPECT_EQ(config_to_json(back).dump(2), text);
}

TEST(Config, SaveAndLoadRoundTripThroughAFile) {
  TempDir dir;
  TrainingConfig c = default_config();
  c.protocol.domains = {{3}, {1, 2}, {0, 9}};
  c.protocol.task_order = {2, 0, 1};
  c.optimizer.kind = OptimizerKind::kAdamW;
  save_config(c, dir.file("c.json"));
  EXPECT_EQ(config_to_json(load_config(dir.file("c.json"))), config_to_json(c));
}

TEST(Config, CommittedDefaultEqualsTheBuiltInDefault) {
  EXPECT_EQ(config_to_json(load_config(testing::source_path("configs/default.json"))),
            config_to_json(default_config()));
}

TEST(Config, HealthyControlDiffersFromTheDefaultOnlyInLearningRate) {
  json healthy = config_to_json(load_config(testing::source_path("configs/healthy.json")));
  json base = config_to_json(default_config());
  EXPECT_NE(healthy["optimizer"]["lr"], base["optimizer"]["lr"]);
  healthy["optimizer"]["lr"] = base["optimizer"]["lr"];
  healthy["name"] = base["name"];
  EXPECT_EQ(healthy, base);
}

TEST(Config, MotivatingCaseConfigsDescribeTheReport) {
  for (const char* name : {"configs/motivating_a_then_b.json", "configs/motivating_b_then_a.json"}) {
    const TrainingConfig c = load_config(testing::source_path(name));
    EXPECT_EQ(c.model.kind, "simple_cnn");
    EXPECT_EQ(c.activation.kind, ActivationKind::kLeakyRelu);
    EXPECT_EQ(c.activation.slope, 0.01);
    EXPECT_EQ(c.optimizer.kind, OptimizerKind::kSgd);
    EXPECT_EQ(c.optimizer.lr, 0.05);
    EXPECT_EQ(c.optimizer.momentum, 0.9);
    EXPECT_EQ(c.batch_size, 64);
    EXPECT_EQ(c.protocol.epochs_per_phase, 10);
    EXPECT_GT(c.protocol.relaxation_epochs, 0);
    EXPECT_EQ(c.dataset.kind, DatasetKind::kIdx);
    EXPECT_EQ(c.protocol.domains, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}}));
  }
  EXPECT_EQ(load_config(testing::source_path("configs/motivating_b_then_a.json")).protocol.task_order,
            (std::vector<int64_t>{1, 0}));
}

TEST(Config, UnknownKeysAreErrorsWithASuggestion) {
  const std::string e = parse_error({{"optimizer", {{"lrr", 0.1}}}});
  EXPECT_NE(e.find("error: cfg.json: optimizer.lrr is not a config field"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean \"lr\"?"), std::string::npos) << e;
  EXPECT_NE(parse_error({{"colour", 1}}).find("colour is not a config field"), std::string::npos);
}

TEST(Config, WrongTypesNameFieldAndValue) {
  EXPECT_NE(parse_error({{"optimizer", {{"lr", "fast"}}}}).find("optimizer.lr = \"fast\" must be a number"),
            std::string::npos);
  EXPECT_NE(parse_error({{"batch_size", 6.5}}).find("batch_size = 6.5 must be an integer"), std::string::npos);
  EXPECT_NE(parse_error({{"seed", -1}}).find("seed = -1 must be an integer in [0, 2^64)"), std::string::npos);
  EXPECT_NE(parse_error({{"activation", {{"kind", "relu6"}}}}).find("is not one of relu | leaky_relu"),
            std::string::npos);
  EXPECT_NE(parse_error({{"model", 3}}).find("model = 3 must be an object"), std::string::npos);
  EXPECT_NE(parse_error(json::array()).find("must hold a JSON object"), std::string::npos);
}

TEST(Config, EveryProblemIsReportedAtOnce) {
  try {
    config_from_json({{"optimizer", {{"lr", "x"}, {"momentun", 0.9}}}, {"extra", 1}}, "cfg.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.problems().size(), 3u) << e.what();
    EXPECT_EQ(e.file(), "cfg.json");
  }
}

TEST(Config, ValidationNamesFieldValueAndRange) {
  TrainingConfig c;
  c.optimizer.lr = -0.05;
  const std::vector<Problem> p = validate(c);
  ASSERT_EQ(p.size(), 1u);
  const std::string text = InputError("configs/sweep.json", p).what();
  EXPECT_EQ(text,
            "error: configs/sweep.json: optimizer.lr = -0.05 is not in (0, 10]\n"
            "hint: learning rates are positive; did you mean 0.05?");
}

TEST(Config, ScenarioMustBeRegistered) {
  TrainingConfig c;
  c.scenario = "standart";
  const std::vector<Problem> p = validate(c);
  ASSERT_EQ(p.size(), 1u);
  const std::string text = InputError("my.json", p).what();
  EXPECT_NE(text.find("scenario = \"standart\" is not a registered scenario"), std::string::npos) << text;
  EXPECT_NE(text.find("did you mean \"standard\"?"), std::string::npos) << text;
  add_scenario_name("standart");
  EXPECT_TRUE(validate(c).empty());
}

TEST(Config, ValidationCatchesEveryBadField) {
  TrainingConfig c;
  c.model.kind = "resnet";
  c.activation.slope = 2;
  c.optimizer.momentum = 1.0;
  c.optimizer.nesterov = true;
  c.optimizer.kind = OptimizerKind::kAdam;
  c.protocol.domains = {{0, 0}, {11}};
  c.protocol.task_order = {0, 0};
  c.protocol.epochs_per_phase = 0;
  c.health.window = 1;
  c.health.grad_norm_limit = -1;
  c.batch_size = 0;
  c.grad_clip = -1;
  c.threads = 0;
  std::vector<std::string> fields;
  for (const Problem& p : validate(c)) fields.push_back(p.field);
  for (const char* f : {"model.kind", "activation.slope", "optimizer.momentum", "optimizer.nesterov",
                        "protocol.domains[0]", "protocol.domains[1]", "protocol.task_order",
                        "protocol.epochs_per_phase", "health.window", "health.grad_norm_limit", "batch_size",
                        "grad_clip", "threads"}) {
    EXPECT_NE(std::find(fields.begin(), fields.end(), f), fields.end()) << f;
  }
  EXPECT_TRUE(validate(TrainingConfig{}).empty());
  EXPECT_TRUE(validate(default_config()).empty());
}

TEST(Config, OverridesSetNestedFieldsListsAndBareWords) {
  const TrainingConfig c = default_config({"optimizer.lr=0.01", "optimizer.kind=adam", "protocol.task_order=[1,0]",
                                           "seed=7", "optimizer.nesterov=false", "name=my run"});
  EXPECT_EQ(c.optimizer.lr, 0.01);
  EXPECT_EQ(c.optimizer.kind, OptimizerKind::kAdam);
  EXPECT_EQ(c.protocol.task_order, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.name, "my run");
}

TEST(Config, BadOverridesAreErrorsNamingSet) {
  EXPECT_NE(override_error({"optimizr.lr=1"}).find("error: --set: optimizr is not a config field (in optimizr.lr=1)"),
            std::string::npos);
  EXPECT_NE(override_error({"optimizer.lrr=1"}).find("error: --set: optimizer.lrr is not a config field\n"),
            std::string::npos);  // the whole path named: no "(in ...)"
  EXPECT_NE(override_error({"optimizr.lr=1"}).find("did you mean \"optimizer\"?"), std::string::npos);
  EXPECT_NE(override_error({"lr"}).find("is not key=value"), std::string::npos);
  EXPECT_NE(override_error({"model=3"}).find("is a group of fields"), std::string::npos);
  EXPECT_NE(override_error({"optimizer.lr=-1"}).find("optimizer.lr = -1 is not in (0, 10]"), std::string::npos);
  // Regression (fuzz_config): a bare value with invalid UTF-8 used to throw from json::dump.
  EXPECT_NE(override_error({std::string("name=\x84" "abc")}).find("name has a value that is not valid UTF-8 text"),
            std::string::npos);
}

TEST(Config, LoadReportsMissingFilesAndBadJsonWithTheirNames) {
  TempDir dir;
  try {
    load_config(dir.file("missing.json"));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.json: cannot be read"), std::string::npos) << e.what();
  }
  testing::write_bytes(dir.file("bad.json"), "{\n  \"seed\": 1,\n}\n");
  try {
    load_config(dir.file("bad.json"));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is not valid JSON: parse error at line 3"), std::string::npos) << e.what();
  }
}

// ---- params: a scenario's own knobs ----

std::string problems_of(const TrainingConfig& c) {
  const std::vector<Problem> p = validate(c);
  return p.empty() ? "" : InputError("cfg.json", p).what();
}

TEST(ConfigParams, UndeclaredParamsAreKeptAsGivenAndRoundTripExactly) {
  add_scenario_name("free_knobs");  // registered without declared params: it reads what it likes
  const json j = {{"scenario", "free_knobs"},
                  {"params", {{"warmup", 30}, {"temperature", 0.7}, {"use_bias", true}, {"norm", "layer"},
                              {"widths", {64, 32}}}}};
  const TrainingConfig c = config_from_json(j, "cfg.json");
  EXPECT_EQ(c.params.integer("warmup"), 30);
  EXPECT_EQ(c.params.number("temperature"), 0.7);
  EXPECT_TRUE(c.params.boolean("use_bias"));
  EXPECT_EQ(c.params.string("norm"), "layer");
  EXPECT_EQ(c.params.numbers("widths"), (std::vector<double>{64, 32}));
  EXPECT_EQ(c.params.number("dropout", 0.1), 0.1) << "a fallback for what the config does not set";
  EXPECT_TRUE(validate(c).empty());
  const json out = config_to_json(c);
  EXPECT_EQ(out["params"], j["params"]);
  EXPECT_EQ(config_to_json(config_from_json(out, "x")), out);
  try {
    (void)c.params.string("warmup");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("params.warmup = 30 must be a string"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)c.params.number("missing"), InputError);
}

TEST(ConfigParams, ParamsAreFlatValues) {
  EXPECT_NE(parse_error({{"params", {{"nested", {{"a", 1}}}}}}).find("params.nested = {\"a\":1} must be a number, "
                                                                     "boolean, string or list of them"),
            std::string::npos);
  EXPECT_NE(parse_error({{"params", 3}}).find("params = 3 must be an object"), std::string::npos);
  add_scenario_name("free_knobs");
  const TrainingConfig c = default_config({"scenario=free_knobs", "params.warmup=30", "params.schedule_name=cosine"});
  EXPECT_EQ(c.params.integer("warmup"), 30);
  EXPECT_EQ(c.params.string("schedule_name"), "cosine");
  try {
    default_config({"scenario=free_knobs", "params.a.b=1"});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("params are flat"), std::string::npos) << e.what();
  }
}

TEST(ConfigParams, TheBuiltInScenarioTakesNoParams) {
  // It reads none: a knob given to it would be ignored without a word.
  const std::string e = problems_of(config_from_json({{"params", {{"width", 32}}}}, "cfg.json"));
  EXPECT_NE(e.find("error: cfg.json: params.width = 32 is not a parameter of the built-in scenario: it takes none\n"
                   "hint: params are the knobs of your own scenario"),
            std::string::npos)
      << e;
  EXPECT_NE(override_error({"params.width=32"}).find("params.width = 32 is not a parameter of the built-in scenario"),
            std::string::npos);
  EXPECT_TRUE(validate(default_config({})).empty()) << "an empty params object is fine";
}

TEST(ConfigParams, DeclaredParamsAreCheckedAndTheirDefaultsFilledIn) {
  add_scenario_name("knobs");
  declare_params("knobs", {ParamSpec::integer("warmup_steps", 30, 0, 1000, "linear warm-up length"),
                           ParamSpec::number("label_smoothing", 0.0, 0, 0.5, "of the cross-entropy"),
                           ParamSpec::boolean("tied", false, "tie the embeddings"),
                           ParamSpec::string("norm", "layer", {"layer", "rms", "none"}, "normalization")});
  const TrainingConfig c = default_config({"scenario=knobs", "params.label_smoothing=0.1"});
  EXPECT_EQ(c.params.integer("warmup_steps"), 30) << "the declared default";
  EXPECT_EQ(c.params.number("label_smoothing"), 0.1);
  EXPECT_EQ(config_to_json(c)["params"],
            json({{"warmup_steps", 30}, {"label_smoothing", 0.1}, {"tied", false}, {"norm", "layer"}}))
      << "the config records every value its run used";
  // An integral float (a log_range grid value, 30.0) is an integer.
  const TrainingConfig f = default_config({"scenario=knobs", "params.warmup_steps=40.0"});
  EXPECT_TRUE(config_to_json(f)["params"]["warmup_steps"].is_number_integer());
  const std::string typo = override_error({"scenario=knobs", "params.warmup_step=10"});
  EXPECT_NE(typo.find("params.warmup_step = 10 is not a parameter of scenario \"knobs\""), std::string::npos) << typo;
  EXPECT_NE(typo.find("did you mean \"warmup_steps\"?"), std::string::npos) << typo;
  const std::string range = override_error({"scenario=knobs", "params.label_smoothing=0.9"});
  EXPECT_NE(range.find("params.label_smoothing = 0.9 is not in [0, 0.5]"), std::string::npos) << range;
  EXPECT_NE(range.find("hint: of the cross-entropy"), std::string::npos) << range;
  EXPECT_NE(override_error({"scenario=knobs", "params.warmup_steps=2.5"}).find("params.warmup_steps = 2.5 must be an integer"),
            std::string::npos);
  EXPECT_NE(override_error({"scenario=knobs", "params.norm=batch"}).find("params.norm = \"batch\" is not one of layer | rms | none"),
            std::string::npos);
  EXPECT_NE(override_error({"scenario=knobs", "params.tied=1"}).find("params.tied = 1 must be true or false"),
            std::string::npos);
  // Every bad param at once, beside the other fields' problems.
  TrainingConfig bad = c;
  bad.params.set("warmup_steps", -1);
  bad.params.set("typo", 1);
  bad.optimizer.lr = -1;
  EXPECT_EQ(validate(bad).size(), 3u) << problems_of(bad);
}

TEST(ConfigSchedule, FieldsAreCheckedAndRoundTrip) {
  const TrainingConfig c = default_config({"schedule.kind=cosine", "schedule.warmup_steps=30", "schedule.min_lr=0.001",
                                           "accumulation_steps=4"});
  EXPECT_EQ(c.schedule.kind, ScheduleKind::kCosine);
  EXPECT_EQ(config_to_json(config_from_json(config_to_json(c), "x")), config_to_json(c));
  EXPECT_EQ(describe_schedule(c.schedule), "warm-up 30 steps, then cosine to 0.001");
  EXPECT_EQ(describe_schedule(ScheduleConfig{}), "");
  TrainingConfig bad;
  bad.schedule.min_lr = 1;
  bad.schedule.gamma = 0;
  bad.schedule.step_size = 0;
  bad.accumulation_steps = 0;
  std::vector<std::string> fields;
  for (const Problem& p : validate(bad)) fields.push_back(p.field);
  for (const char* f : {"schedule.min_lr", "schedule.gamma", "schedule.step_size", "accumulation_steps"}) {
    EXPECT_NE(std::find(fields.begin(), fields.end(), f), fields.end()) << f << "\n" << problems_of(bad);
  }
  EXPECT_NE(parse_error({{"schedule", {{"kind", "cosin"}}}}).find("did you mean \"cosine\"?"), std::string::npos);
}

// health.layers: per-tensor thresholds, keyed by tensor names that hold
// dots; read strictly, written only when set, and reachable with --set.
TEST(ConfigHealthLayers, PerTensorRulesRoundTripAndAreSetByTensorAndRule) {
  EXPECT_FALSE(config_to_json(TrainingConfig{})["health"].contains("layers")) << "a config without them keeps its JSON";
  const json j = {{"health", {{"layers", {{"blocks.0.attn_logits", {{"attention_logit_limit", 5000}}},
                                          {"fc1.weight", {{"param_jump_limit", 2}, {"grad_spike_limit", 0}}}}}}}};
  const TrainingConfig c = config_from_json(j, "cfg.json");
  ASSERT_EQ(c.health.layers.size(), 2u);
  EXPECT_EQ(c.health.layers.at("blocks.0.attn_logits").attention_logit_limit, 5000.0);
  EXPECT_FALSE(c.health.layers.at("blocks.0.attn_logits").activation_limit) << "unset stays unset";
  EXPECT_EQ(c.health.layers.at("fc1.weight").param_jump_limit, 2.0);
  EXPECT_EQ(c.health.layers.at("fc1.weight").grad_spike_limit, 0.0);
  EXPECT_EQ(config_to_json(config_from_json(config_to_json(c), "x")), config_to_json(c));
  EXPECT_EQ(config_to_json(c)["health"]["layers"], j["health"]["layers"]);

  // --set: the last part names the rule, the rest the tensor; it adds to a config's own.
  const TrainingConfig s = parse_config(j, "cfg.json", {"health.layers.fc1.weight.update_ratio_limit=3",
                                                         "health.layers.conv2_act.activation_limit=1e5"});
  EXPECT_EQ(s.health.layers.at("fc1.weight").update_ratio_limit, 3.0);
  EXPECT_EQ(s.health.layers.at("fc1.weight").param_jump_limit, 2.0);
  EXPECT_EQ(s.health.layers.at("conv2_act").activation_limit, 1e5);
  // A config diff (what a sweep's variants and a repro carry) applies back to the same config.
  const TrainingConfig back = parse_config(config_to_json(TrainingConfig{}), "x", config_diff(TrainingConfig{}, s));
  EXPECT_EQ(config_to_json(back), config_to_json(s));

  EXPECT_NE(override_error({"health.layers.fc1=2"}).find("is not health.layers.TENSOR.RULE"), std::string::npos);
  const std::string unknown = parse_error({{"health", {{"layers", {{"fc1.weight", {{"param_jump_limt", 2}}}}}}}});
  EXPECT_NE(unknown.find("health.layers.fc1.weight.param_jump_limt"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("did you mean \"param_jump_limit\"?"), std::string::npos) << unknown;
  EXPECT_NE(parse_error({{"health", {{"layers", {{"fc1.weight", 2}}}}}}).find("must be an object of per-tensor rules"),
            std::string::npos);
  EXPECT_NE(parse_error({{"health", {{"layers", {{"", {{"param_jump_limit", 2}}}}}}}}).find("has no tensor name"),
            std::string::npos);
  EXPECT_NE(override_error({"health.layers.fc1.weight.param_jump_limit=-2"})
                .find("health.layers.fc1.weight.param_jump_limit = -2 is not in [0, inf)"),
            std::string::npos)
      << override_error({"health.layers.fc1.weight.param_jump_limit=-2"});
}

TEST(LrSchedule, EachKindFollowsItsFormula) {
  ScheduleConfig s;
  EXPECT_TRUE(lr_is_constant(s));
  EXPECT_EQ(lr_factor(s, 0.1, 50, 100), 1.0);
  s.warmup_steps = 10;
  EXPECT_FALSE(lr_is_constant(s));
  EXPECT_DOUBLE_EQ(lr_factor(s, 0.1, 0, 100), 0.1);
  EXPECT_DOUBLE_EQ(lr_factor(s, 0.1, 9, 100), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 0.1, 60, 100), 1.0) << "constant after the warm-up";
  s.kind = ScheduleKind::kCosine;
  s.min_lr = 0.01;
  EXPECT_DOUBLE_EQ(lr_factor(s, 0.1, 10, 101), 1.0) << "the decay starts at the peak";
  EXPECT_DOUBLE_EQ(lr_factor(s, 0.1, 55, 101), 0.1 + 0.9 * 0.5) << "half way: the mean of peak and floor";
  EXPECT_DOUBLE_EQ(lr_factor(s, 0.1, 100, 101), 0.1) << "min_lr / lr at the last step";
  EXPECT_DOUBLE_EQ(lr_factor(s, 0.1, 500, 101), 0.1) << "and after it";
  s.kind = ScheduleKind::kLinear;
  EXPECT_DOUBLE_EQ(lr_factor(s, 0.1, 55, 101), 1 - 0.9 * 0.5);
  s.decay_steps = 20;
  EXPECT_DOUBLE_EQ(lr_factor(s, 0.1, 15, 1000), 1 - 0.9 * 0.5) << "decay_steps ends the decay early";
  s.kind = ScheduleKind::kStep;
  s.step_size = 5;
  s.gamma = 0.5;
  EXPECT_DOUBLE_EQ(lr_factor(s, 0.1, 14, 100), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 0.1, 15, 100), 0.5);
  EXPECT_DOUBLE_EQ(lr_factor(s, 0.1, 27, 100), 0.125);
}

TEST(Files, AtomicWriteLeavesNoTempFileAndReplacesContent) {
  TempDir dir;
  write_file_atomic(dir.file("a"), "one");
  write_file_atomic(dir.file("a"), "two");
  EXPECT_EQ(read_file(dir.file("a")), "two");
  EXPECT_THROW(write_file_atomic(dir.file("no/such/dir/a"), "x"), std::runtime_error);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(Files, EditDistance) {
  EXPECT_EQ(edit_distance("momentun", "momentum"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("widht", "width"), 1u) << "a swap of neighbours is one edit";
  EXPECT_EQ(edit_distance("ab", "ba"), 1u);
}

}  // namespace
}  // namespace spikehunt
