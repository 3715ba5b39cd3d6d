// The doctor on a user's code it has never seen: for each planted bug of
// fashion.h the top-ranked cause is the expected sign, and healthy runs
// over several seeds, learning rates and both optimizers raise no alarm.
#include <gtest/gtest.h>

#include <spikehunt/spikehunt.h>

#include "fashion.h"

#ifndef FASHION_DIR
#define FASHION_DIR "."
#endif

namespace {

class Register : public ::testing::Environment {
 public:
  void SetUp() override { register_fashion(); }
};
const auto* const kRegistered = ::testing::AddGlobalTestEnvironment(new Register);

spikehunt::DoctorReport doctor(const std::vector<std::string>& sets) {
  const spikehunt::TrainingConfig config = spikehunt::load_config(FASHION_DIR "/fashion.json", sets);
  spikehunt::configure_runtime(config);
  spikehunt::DoctorOptions o;
  o.rules = config.health;
  return spikehunt::run_doctor([&] { return spikehunt::make_scenario(config); }, o);
}

std::string failed(const spikehunt::DoctorReport& r) {
  std::string out;
  for (const auto& s : r.signs) {
    if (!s.passed) out += s.name + " ";
  }
  return out;
}

struct Case {
  const char* bug;
  const char* sign;   // the expected top-ranked sign
  const char* cause;  // a phrase of its cause
};

class PlantedBug : public ::testing::TestWithParam<Case> {};

TEST_P(PlantedBug, TopRankedCauseIsTheExpectedSign) {
  const Case c = GetParam();
  const spikehunt::DoctorReport r = doctor({std::string("params.bug=") + c.bug});
  const spikehunt::VitalSign* top = r.top();
  ASSERT_NE(top, nullptr) << c.bug << ": no sign failed\n" << spikehunt::doctor_text(r);
  EXPECT_EQ(top->name, c.sign) << c.bug << ": top cause " << top->cause << "\n" << spikehunt::doctor_text(r);
  EXPECT_NE(top->cause.find(c.cause), std::string::npos) << top->cause;
}

INSTANTIATE_TEST_SUITE_P(
    Fashion, PlantedBug,
    ::testing::Values(Case{"lr_units", "faulty_part", "the optimizer's learning rate"},
                      Case{"raw_pixels", "input_scale", "not normalized"},
                      Case{"softmax_twice", "loss_output_mismatch", "softmax is applied twice"},
                      Case{"softmax_in_loss", "loss_output_mismatch", "the loss takes a softmax"},
                      Case{"five_outputs", "training_code_error", "the output has 5 classes but a label is"},
                      Case{"labels_float", "training_code_error", "not as int64 class ids"},
                      Case{"dead_bias", "dead_units", "hidden1 (rectifier) are dead"},
                      Case{"sharp_log_softmax", "non_finite_source", "the loss itself"},
                      Case{"imbalanced", "prediction_collapse", "majority"},
                      Case{"off_by_one_labels", "overfit_one_batch", "shifted"},
                      Case{"detached_hidden", "gradient_flow", "no gradient reaches fc1"},
                      Case{"saturated_sigmoid", "dead_units", "saturated"},
                      Case{"deep_sigmoid", "gradient_flow", "vanishing"},
                      Case{"blank_image_nan", "input_scale", "NaN"},
                      Case{"head_not_optimized", "optimizer_coverage", "out.weight"},
                      // Publicly reported bugs (sources in fashion.cpp).
                      Case{"functional_dropout", "eval_consistency", "evaluation is random"},
                      Case{"validation_leaves_eval", "eval_consistency", "trains in eval mode"},
                      Case{"nll_on_softmax", "loss_domain", "below 0"},
                      Case{"hand_written_softmax", "loss_domain", "exp of a large output"},
                      Case{"labels_all_zero", "label_balance", "every training label is class 0"},
                      Case{"test_not_normalized", "heldout_inputs", "preprocessed differently"},
                      Case{"shuffled_apart", "prediction_collapse", "unrelated to the inputs"},
                      Case{"softmax_over_batch", "eval_consistency", "other samples of its batch"},
                      Case{"grads_never_zeroed", "grad_accumulation", "never reset"},
                      Case{"step_never_applied", "optimizer_coverage", "never changes"},
                      Case{"lr_decay_per_batch", "lr_schedule", "falls to under 1%"}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.bug); });

class Healthy : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(Healthy, NoSignFails) {
  const spikehunt::DoctorReport r = doctor(GetParam());
  EXPECT_TRUE(r.passed()) << "false alarm: " << failed(r) << "\n" << spikehunt::doctor_text(r);
  EXPECT_EQ(r.top(), nullptr);
}

INSTANTIATE_TEST_SUITE_P(
    Fashion, Healthy,
    ::testing::Values(std::vector<std::string>{"seed=0"}, std::vector<std::string>{"seed=1"},
                      std::vector<std::string>{"seed=2"}, std::vector<std::string>{"optimizer.lr=0.01"},
                      std::vector<std::string>{"optimizer.lr=0.1", "seed=3"},
                      std::vector<std::string>{"optimizer.kind=adam", "optimizer.lr=0.001"},
                      std::vector<std::string>{"params.hidden=32", "seed=4"},
                      // The head's optimizer stepped inside optimizer_step() without being declared.
                      std::vector<std::string>{"params.bug=head_stepped_in_step"}));

TEST(FashionCli, AThrowIsAFindingWithItsCauseAndJsonIsADocument) {
  const std::string binary = std::string(FASHION_BUGS_BINARY);
  const std::string cmd = binary + " doctor --config " FASHION_DIR "/fashion.json --set params.bug=five_outputs";
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("most likely cause: the output has 5 classes but a label is"), std::string::npos) << out;
  EXPECT_EQ(out.find("frame #"), std::string::npos) << "no backtrace without --verbose:\n" << out;
}

}  // namespace
