// Tests harness/doctor.h on the planted-bug catalog (scenarios/planted.h):
// each bug is diagnosed by the right vital sign naming the right layer, and
// the healthy control passes every sign.
#include <gtest/gtest.h>

#include "harness/burst.h"
#include "harness/doctor.h"
#include "scenarios/planted.h"
#include "test_util.h"

namespace spikehunt {
namespace {

DoctorReport doctor(const std::string& planted) {
  configure_runtime(planted_config(planted));
  return run_doctor([planted] { return make_planted_scenario(planted); }, DoctorOptions{});
}

const VitalSign& sign(const DoctorReport& r, const std::string& name) {
  const VitalSign* s = r.find(name);
  if (s == nullptr) throw std::runtime_error("no vital sign " + name);
  return *s;
}

bool names(const VitalSign& s, const std::string& what) {
  return std::find(s.named.begin(), s.named.end(), what) != s.named.end();
}

std::string failed(const DoctorReport& r) {
  std::string out;
  for (const VitalSign& s : r.signs) {
    if (!s.passed) out += s.name + " ";
  }
  return out;
}

TEST(Doctor, HealthyControlPassesEverySign) {
  const DoctorReport r = doctor("healthy");
  EXPECT_TRUE(r.passed()) << doctor_text(r);
  EXPECT_EQ(r.signs.size(), 7u);
  for (const VitalSign& s : r.signs) EXPECT_FALSE(s.skipped) << s.name << ": " << s.evidence;
}

TEST(Doctor, DetachedLogitsFreezeTheOutputLayer) {
  const DoctorReport r = doctor("detached_logits");
  const VitalSign& frozen = sign(r, "frozen_output");
  EXPECT_FALSE(frozen.passed) << doctor_text(r);
  EXPECT_EQ(frozen.named, std::vector<std::string>{"out"});
  EXPECT_EQ(frozen.data["logits_moved"], 0.0);
  EXPECT_TRUE(names(sign(r, "gradient_flow"), "out")) << "and every layer has exactly zero gradient";
}

TEST(Doctor, LogOfZeroIsTracedToTheLoss) {
  const DoctorReport r = doctor("log_zero_loss");
  const VitalSign& source = sign(r, "non_finite_source");
  EXPECT_FALSE(source.passed) << doctor_text(r);
  EXPECT_EQ(source.named, std::vector<std::string>{"loss"});
  EXPECT_NE(source.hint.find("epsilon"), std::string::npos);
  EXPECT_NE(source.evidence.find("with every logit finite"), std::string::npos);
}

TEST(Doctor, ShiftedLabelsAreSeenAfterOverfittingOneBatch) {
  const DoctorReport r = doctor("shifted_labels");
  const VitalSign& overfit = sign(r, "overfit_one_batch");
  EXPECT_FALSE(overfit.passed) << doctor_text(r);
  EXPECT_LE(overfit.data["final_loss"].get<double>(), 0.05) << "it does memorize the batch";
  EXPECT_TRUE(names(overfit, "class 0 -> 1")) << doctor_text(r);
  EXPECT_TRUE(names(overfit, "class 9 -> 0")) << doctor_text(r);
  EXPECT_NE(overfit.hint.find("shifted"), std::string::npos);
}

TEST(Doctor, AMajorityClassModelCollapses) {
  const DoctorReport r = doctor("imbalanced_majority");
  const VitalSign& collapse = sign(r, "prediction_collapse");
  EXPECT_FALSE(collapse.passed) << doctor_text(r);
  EXPECT_EQ(collapse.named, std::vector<std::string>{"class 0"});
  EXPECT_GE(collapse.data["most_predicted_share"].get<double>(), 0.9);
  EXPECT_TRUE(sign(r, "overfit_one_batch").passed) << "the loss falls: only the predictions give it away";
  EXPECT_EQ(failed(r), "prediction_collapse ") << doctor_text(r);
}

TEST(Doctor, DeepSigmoidGradientsVanishInTheFirstLayers) {
  const DoctorReport r = doctor("vanishing_deep_sigmoid");
  const VitalSign& flow = sign(r, "gradient_flow");
  EXPECT_FALSE(flow.passed) << doctor_text(r);
  EXPECT_TRUE(names(flow, "fc1")) << doctor_text(r);
  EXPECT_TRUE(names(flow, "fc5"));
  EXPECT_FALSE(names(flow, "out")) << "the output layer is the best fed";
  EXPECT_GE(flow.data["spread"].get<double>(), 1000);
  EXPECT_NE(flow.hint.find("vanishing"), std::string::npos);
}

TEST(Doctor, ExplodingGradientsAreCaughtAndNamed) {
  const DoctorReport r = doctor("exploding_no_clip");
  const VitalSign& flow = sign(r, "gradient_flow");
  EXPECT_FALSE(flow.passed) << doctor_text(r);
  EXPECT_NE(flow.hint.find("exploding"), std::string::npos);
  EXPECT_FALSE(flow.named.empty());
  const VitalSign& source = sign(r, "non_finite_source");
  EXPECT_FALSE(source.passed);
  EXPECT_NE(source.hint.find("explosion"), std::string::npos);
}

TEST(Doctor, DeadReluUnitsAreNamed) {
  const DoctorReport r = doctor("dead_relu");
  const VitalSign& dead = sign(r, "dead_units");
  EXPECT_FALSE(dead.passed) << doctor_text(r);
  EXPECT_EQ(dead.named, std::vector<std::string>{"fc1_act"});
  EXPECT_EQ(dead.data["fc1_act"]["zero_first"], 1.0);
}

TEST(Doctor, UnknownPlantedBugIsBadInput) {
  EXPECT_THROW(planted_config("missing_bug"), InputError);
}

TEST(DoctorCli, ExitCodesAndJson) {
  auto r = testing::run_spikehunt("doctor --planted healthy");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("7 vital signs: 7 passed, 0 failed"), std::string::npos) << r.output;
  r = testing::run_spikehunt("doctor --planted dead_relu --json");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_FALSE(j["passed"].get<bool>());
  bool dead = false;
  for (const auto& s : j["signs"]) dead = dead || (s["name"] == "dead_units" && !s["passed"].get<bool>());
  EXPECT_TRUE(dead);
  r = testing::run_spikehunt("doctor --planted no_such_bug");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--planted = no_such_bug is not a planted-bug scenario"), std::string::npos) << r.output;
  r = testing::run_spikehunt("doctor --config " + testing::source_path("configs/healthy.json") + " --steps 0");
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace spikehunt
