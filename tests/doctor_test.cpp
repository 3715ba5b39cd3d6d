// Tests harness/doctor/doctor.h on the planted-bug catalog (scenarios/planted.h):
// each bug is the top-ranked cause of the right vital sign naming the right
// layer, and the healthy control passes every sign; a throw in the training
// code is a diagnosis (stage and cause), in the library and on the CLI.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "harness/burst.h"
#include "harness/doctor/doctor.h"
#include "harness/doctor/common.h"
#include "harness/doctor/signs.h"
#include "harness/training_error.h"
#include "scenarios/planted.h"
#include "test_util.h"

namespace spikehunt {
namespace {

// Every report holds the registry's signs in its order, fails each sign only at a rank the
// registry lists for it, and a consequence failed at its consequence rank names its causes.
DoctorReport checked(DoctorReport r) {
  const std::vector<SignInfo> all = doctor_signs();
  std::vector<std::string> want, got;
  for (const SignInfo& s : all) want.push_back(s.name);
  for (const VitalSign& v : r.signs) got.push_back(v.name);
  EXPECT_EQ(got, want);
  for (const VitalSign& v : r.signs) {
    const auto spec = std::find_if(all.begin(), all.end(), [&](const SignInfo& s) { return s.name == v.name; });
    if (v.passed || spec == all.end()) continue;
    // A sign of the part the experiments found faulty ranks above the rest (harness/doctor/run_doctor.cpp).
    if (v.data.is_object() && v.data.value("found_by_experiment", false)) continue;
    EXPECT_NE(std::find(spec->ranks.begin(), spec->ranks.end(), v.rank), spec->ranks.end())
        << v.name << " failed at rank " << v.rank << ", which the registry does not list: " << v.cause;
    if (spec->consequence_rank != 0 && v.rank == spec->consequence_rank) {
      EXPECT_TRUE(v.data.contains("consequence_of")) << v.name;
      EXPECT_NE(v.cause.find("a consequence"), std::string::npos) << v.cause;
    }
  }
  return r;
}

DoctorReport doctor(const std::string& planted) {
  configure_runtime(planted_config(planted));
  return checked(run_doctor([planted] { return make_planted_scenario(planted); }, DoctorOptions{}));
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

std::string top(const DoctorReport& r) { return r.top() ? r.top()->name : "none"; }

TEST(Doctor, HealthyControlPassesEverySign) {
  const DoctorReport r = doctor("healthy");
  EXPECT_TRUE(r.passed()) << doctor_text(r);
  EXPECT_EQ(r.top(), nullptr);
  EXPECT_EQ(r.signs.size(), 44u);
  for (const VitalSign& s : r.signs) {  // SGD keeps no step count to compare with the steps taken
    EXPECT_EQ(s.skipped, s.name == "optimizer_steps") << s.name << ": " << s.evidence;
  }
  EXPECT_EQ(r.parameters, 55050);
  EXPECT_NE(doctor_text(r).find("no vital sign failed"), std::string::npos);
}

TEST(Doctor, DetachedLogitsFreezeTheOutputLayer) {
  const DoctorReport r = doctor("detached_logits");
  const VitalSign& frozen = sign(r, "frozen_output");
  EXPECT_FALSE(frozen.passed) << doctor_text(r);
  EXPECT_EQ(top(r), "frozen_output") << doctor_text(r);
  EXPECT_EQ(frozen.named, std::vector<std::string>{"out"});
  EXPECT_EQ(frozen.data["outputs_moved"], 0.0);
  EXPECT_TRUE(names(sign(r, "gradient_flow"), "out")) << "and every layer has exactly zero gradient";
}

TEST(Doctor, LogOfZeroIsTracedToTheLoss) {
  const DoctorReport r = doctor("log_zero_loss");
  const VitalSign& source = sign(r, "non_finite_source");
  EXPECT_FALSE(source.passed) << doctor_text(r);
  EXPECT_EQ(top(r), "non_finite_source") << doctor_text(r);
  EXPECT_EQ(source.named, std::vector<std::string>{"loss"});
  EXPECT_EQ(source.data["kind"], "loss");
  EXPECT_NE(source.hint.find("epsilon"), std::string::npos);
  EXPECT_NE(source.evidence.find("from finite outputs"), std::string::npos) << source.evidence;
}

TEST(Doctor, ShiftedLabelsAreSeenAfterOverfittingOneBatch) {
  const DoctorReport r = doctor("shifted_labels");
  const VitalSign& overfit = sign(r, "overfit_one_batch");
  EXPECT_FALSE(overfit.passed) << doctor_text(r);
  EXPECT_LE(overfit.data["final_loss"].get<double>(), 0.05) << "it does memorize the batch";
  EXPECT_TRUE(names(overfit, "class 0 -> 1")) << doctor_text(r);
  EXPECT_TRUE(names(overfit, "class 9 -> 0")) << doctor_text(r);
  EXPECT_NE(overfit.hint.find("shifted"), std::string::npos);
  EXPECT_EQ(top(r), "overfit_one_batch") << "ranked above the collapse it causes\n" << doctor_text(r);
}

TEST(Doctor, AMajorityClassModelCollapses) {
  const DoctorReport r = doctor("imbalanced_majority");
  const VitalSign& collapse = sign(r, "prediction_collapse");
  EXPECT_FALSE(collapse.passed) << doctor_text(r);
  EXPECT_EQ(collapse.named, std::vector<std::string>{"class 0"});
  EXPECT_GE(collapse.data["most_predicted_share"].get<double>(), 0.9);
  EXPECT_TRUE(sign(r, "overfit_one_batch").passed) << "the loss falls: only the predictions give it away";
  EXPECT_EQ(failed(r), "prediction_collapse ") << doctor_text(r);
  EXPECT_NE(collapse.hint.find("rebalance"), std::string::npos) << "the training data is imbalanced: " << collapse.hint;
  EXPECT_GE(collapse.data["training_majority_share"].get<double>(), 0.9);
}

TEST(Doctor, DeepSigmoidGradientsVanishInTheFirstLayers) {
  const DoctorReport r = doctor("vanishing_deep_sigmoid");
  const VitalSign& flow = sign(r, "gradient_flow");
  EXPECT_FALSE(flow.passed) << doctor_text(r);
  EXPECT_TRUE(names(flow, "fc1")) << doctor_text(r);
  EXPECT_TRUE(names(flow, "fc5"));
  EXPECT_FALSE(names(flow, "out")) << "the output layer is the best fed";
  EXPECT_GE(flow.data["spread"].get<double>(), 1000);
  EXPECT_NE(flow.cause.find("vanishing gradients: fc1"), std::string::npos) << flow.cause;
  EXPECT_EQ(top(r), "gradient_flow") << doctor_text(r);
  EXPECT_FALSE(sign(r, "prediction_collapse").passed) << "it learns nothing in 100 steps";
  EXPECT_EQ(sign(r, "prediction_collapse").hint.find("rebalance"), std::string::npos)
      << "balanced data: the hint is not about class balance";
}

TEST(Doctor, ExplodingGradientsAreCaughtAndNamed) {
  const DoctorReport r = doctor("exploding_no_clip");
  const VitalSign& flow = sign(r, "gradient_flow");
  EXPECT_FALSE(flow.passed) << doctor_text(r);
  EXPECT_NE(flow.cause.find("exploding gradients in"), std::string::npos) << flow.cause;
  EXPECT_FALSE(flow.named.empty());
  const VitalSign& range = sign(r, "grad_norm_range");  // peaks past 1,000: a consequence, its causes named
  EXPECT_FALSE(range.passed);
  EXPECT_NE(range.cause.find("(a consequence, its cause not found: loss_scale, input_scale"), std::string::npos)
      << range.cause;
  const VitalSign& source = sign(r, "non_finite_source");
  EXPECT_FALSE(source.passed);
  EXPECT_EQ(source.data["kind"], "overflow") << doctor_text(r);
  // Above the overflow it leads to: what the experiments found, a tenth of the learning rate among the swaps that
  // make the program learn.
  EXPECT_EQ(top(r), "faulty_part") << doctor_text(r);
  EXPECT_NE(r.top()->cause.find("optimizer's learning rate"), std::string::npos) << r.top()->cause;
  EXPECT_NE(r.top()->cause.find("a tenth of their learning rate (0.1 -> 0.01)"), std::string::npos) << r.top()->cause;
  EXPECT_NE(r.top()->cause.find("non-finite after"), std::string::npos) << r.top()->cause;
  EXPECT_FALSE(sign(r, "monitor_health").passed) << "the monitor saw the onset before the NaN";
}

TEST(Doctor, DeadReluUnitsAreNamed) {
  const DoctorReport r = doctor("dead_relu");
  const VitalSign& dead = sign(r, "dead_units");
  EXPECT_FALSE(dead.passed) << doctor_text(r);
  EXPECT_TRUE(names(dead, "fc1_act")) << doctor_text(r);
  EXPECT_EQ(dead.data["fc1_act"]["dead_first"], 1.0);
  EXPECT_EQ(dead.data["fc1_act"]["kind"], "rectifier");
  EXPECT_EQ(top(r), "dead_units") << "ranked above the zero gradients it causes\n" << doctor_text(r);
  // A consequence says so, and which probes of its causes ran: here none failed (dead_relu's cause is a bias,
  // which no cause probe reads), and init_symmetry and input_scale passed.
  EXPECT_NE(dead.cause.find("(a consequence, its cause not found: init_symmetry, init_scale, input_scale"), std::string::npos)
      << dead.cause;
  EXPECT_EQ(dead.data["causes_ruled_out"].size(), 4u) << dead.data.dump();
  EXPECT_EQ(dead.part, "init") << "dead from step 0";
}

TEST(Doctor, UnknownPlantedBugIsBadInput) {
  EXPECT_THROW(planted_config("missing_bug"), InputError);
}

TEST(DoctorCli, ExitCodesAndJson) {
  auto r = testing::run_spikehunt("doctor --planted healthy");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("44 vital signs: 43 passed, 0 failed, 1 skipped"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("planted bug healthy: mlp 2x64, relu, 55,050 parameters"), std::string::npos) << r.output;
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
  EXPECT_EQ(j["most_likely_cause"]["sign"], "dead_units") << r.output;
  r = testing::run_spikehunt("doctor --config " + testing::source_path("configs/healthy.json") + " --steps 0");
  EXPECT_EQ(r.exit_code, 2);
  r = testing::run_spikehunt("doctor --json --set optimizer.lr=-1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const nlohmann::json bad = nlohmann::json::parse(r.output);  // a document, also on bad input
  EXPECT_EQ(bad["error"]["kind"], "bad_input");
  EXPECT_EQ(bad["error"]["problems"][0]["field"], "optimizer.lr");
  // --signs lists the registry: every sign of a report, once, with its ranks.
  r = testing::run_spikehunt("doctor --signs --json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json listed = nlohmann::json::parse(r.output);
  ASSERT_EQ(listed.size(), j["signs"].size());
  for (size_t i = 0; i < listed.size(); ++i) EXPECT_EQ(listed[i]["name"], j["signs"][i]["name"]);
  r = testing::run_spikehunt("doctor --signs");
  EXPECT_NE(r.output.find("dead_units              rank 24; at 24 a consequence of: init_symmetry, init_scale, input_scale"),
            std::string::npos) << r.output;
  r = testing::run_spikehunt("doctor --signs --planted healthy");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

// ---- user code it has never seen: throws, mismatches, scales ----

// A tiny user scenario: a 16 -> 8 -> OUT MLP on fixed random batches of 8
// with labels 0..3, SGD. `kind` plants one bug.
class Tiny : public Scenario {
 public:
  Tiny(std::string kind, int64_t outputs) : kind_(std::move(kind)) {
    torch::manual_seed(0);
    fc1_ = torch::nn::Linear(16, 8);
    out_ = torch::nn::Linear(8, outputs);
    net_->register_module("fc1", fc1_);
    net_->register_module("out", out_);
    const bool split = kind_ == "second_optimizer_in_step";  // the head's optimizer is stepped, not declared
    optimizer_ = std::make_unique<torch::optim::SGD>(split ? fc1_->parameters() : net_->parameters(),
                                                     torch::optim::SGDOptions(0.1).momentum(0.9));
    if (split) head_ = std::make_unique<torch::optim::SGD>(out_->parameters(), torch::optim::SGDOptions(0.1));
    if (kind_ == "shared_stack") {  // nn.ModuleList([block] * 2) in LibTorch: one module under two names
      torch::nn::Linear block(8, 8);
      torch::nn::ModuleList stack;
      stack->push_back(block);
      stack->push_back(block);
      net_->register_module("stack", stack);
    }
    x_ = torch::randn({8, 16});
    if (kind_ == "raw_scale") x_ = x_ * 200;
    y_ = torch::arange(8) % 4;
    if (kind_ == "prior_bias_bce") {  // RetinaNet's prior: every logit starts below 0 (p = 0.01)
      torch::NoGradGuard no_grad;
      out_->bias.fill_(-4.6);
      out_->weight.mul_(0.01);
    }
    if (kind_ == "mse_column") y_ = x_.sum(1) / 4;  // a regression target of shape (8) against outputs (8, 1)
    if (kind_ == "zero_init") {  // every weight and bias 0: no unit fires, nothing below the head trains
      torch::NoGradGuard no_grad;
      for (auto& p : net_->parameters()) p.zero_();
    }
  }
  torch::nn::Module& model() override { return *net_; }
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }
  torch::Tensor forward(const torch::Tensor& x, const Tap& tap) override {
    torch::Tensor h = torch::relu(fc1_->forward(x));
    if (kind_ == "unregistered") h = h + outside_->forward(h);                    // a layer kept outside the module
    if (kind_ == "built_in_forward") h = h + torch::nn::Linear(8, 8)->forward(h);  // a layer built per call
    if (kind_ == "no_grad_body") h = h.detach();                                  // fc1 cut from the loss
    tap("hidden", h);
    if (kind_ == "functional_dropout") h = torch::dropout(h, 0.5, /*train=*/true);  // on in eval too
    torch::Tensor y = out_->forward(h);
    if (kind_ == "log_sigmoid_bce") return torch::log_sigmoid(y);  // log-probabilities to a loss taking logits
    if (kind_ == "log_softmax_ce") return torch::log_softmax(y, 1);   // cross-entropy's log_softmax: harmless
    return kind_ == "softmax" ? torch::softmax(y, 1) : y;
  }
  torch::Tensor loss(const torch::Tensor& outputs, const torch::Tensor& targets) override {
    if (kind_ == "mse_column") return torch::nn::functional::mse_loss(outputs, targets);
    if (kind_ == "nll_of_scores") return torch::nn::functional::nll_loss(outputs, targets);
    if (kind_ == "log_sigmoid_bce" || kind_ == "prior_bias_bce") {
      return torch::nn::functional::binary_cross_entropy_with_logits(outputs, targets);
    }
    return Scenario::loss(outputs, targets);
  }
  void optimizer_step() override {
    if (kind_ == "zero_grad_in_step") optimizer_->zero_grad();  // between backward and step
    if (kind_ == "noop_step") return;                           // the update never applied
    Scenario::optimizer_step();
    if (head_) head_->step();
  }
  std::optional<Batch> next_batch() override {
    if (step_ >= 60) return std::nullopt;
    Batch b;
    b.inputs = x_;
    b.targets = y_;
    // Each epoch (a step here) shuffled: inputs and labels by one permutation, or each by its own.
    const torch::Tensor perm = torch::randperm(x_.size(0));
    if (kind_ == "shuffled_together") b.inputs = x_.index_select(0, perm), b.targets = y_.index_select(0, perm);
    if (kind_ == "log_sigmoid_bce" || kind_ == "prior_bias_bce") {  // multi-label targets, one positive in 4
      b.targets = torch::one_hot(y_, 4).to(torch::kFloat32);
    }
    if (kind_ == "shuffled_apart") b.inputs = x_.index_select(0, perm), b.targets = y_.index_select(0, torch::randperm(8));
    b.step = step_++;
    return b;
  }
  int64_t planned_steps() const override { return 60; }
  std::vector<std::string> phase_names() const override { return {"train"}; }
  int64_t num_classes() const override { return 4; }

 private:
  std::string kind_;
  std::shared_ptr<torch::nn::Module> net_ = std::make_shared<torch::nn::Module>();
  torch::nn::Linear fc1_{nullptr}, out_{nullptr}, outside_{8, 8};
  std::unique_ptr<torch::optim::SGD> optimizer_, head_;
  torch::Tensor x_, y_;
  int64_t step_ = 0;
};

DoctorReport tiny(const std::string& kind, int64_t outputs = 4) {
  DoctorOptions o;
  o.steps = 40;
  o.overfit_steps = 300;
  return checked(run_doctor([=] { return std::make_unique<Tiny>(kind, outputs); }, o));
}

// docs/doctor.md's table of signs is the registry's: every sign, once, with the ranks it can fail at.
TEST(DoctorRegistry, TheDocsTableListsEverySignWithItsRanks) {
  std::map<std::string, std::string> table, parts;  // sign -> its rank column, its part column
  const auto rows = testing::markdown_table("docs/doctor.md", "| sign | part | fails when | rank |");
  ASSERT_FALSE(rows.empty()) << "docs/doctor.md has no table of signs";
  for (const std::vector<std::string>& row : rows) {
    ASSERT_GE(row.size(), 4u);
    const std::string name = row[0].substr(1, row[0].find('`', 1) - 1);
    EXPECT_EQ(table.count(name), 0u) << name << " is in the table twice";
    parts[name] = row[1] == "-" ? "" : row[1];
    table[name] = row.back();
  }
  const std::vector<SignInfo> all = doctor_signs();
  EXPECT_EQ(table.size(), all.size());
  for (const SignInfo& s : all) {
    std::string ranks;
    std::vector<int> sorted = s.ranks;
    std::sort(sorted.begin(), sorted.end());
    for (int r : sorted) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    ASSERT_TRUE(table.count(s.name)) << s.name << " is not in docs/doctor.md's table";
    EXPECT_EQ(table[s.name], ranks) << s.name;
    EXPECT_EQ(parts[s.name], s.part) << s.name;
  }
  // A consequence names only signs the registry has, each a cause ranked above it or another consequence.
  for (const SignInfo& s : all) {
    for (const std::string& c : s.causes) {
      EXPECT_NE(std::find_if(all.begin(), all.end(), [&](const SignInfo& x) { return x.name == c; }), all.end())
          << s.name << " names " << c;
    }
  }
}

TEST(DoctorUserCode, OneModuleUnderSeveralIndexedNamesIsNamed) {
  Tiny shared("shared_stack", 4), plain("healthy", 4);
  EXPECT_EQ(shared.shared_modules(), (std::vector<std::vector<std::string>>{{"stack.0", "stack.1"}}));
  EXPECT_TRUE(plain.shared_modules().empty());
  const VitalSign v = doctor_detail::shared_modules(shared);
  ASSERT_FALSE(v.passed) << v.evidence;
  EXPECT_NE(v.cause.find("the same module is stack.0, stack.1 (2 entries of stack)"), std::string::npos) << v.cause;
  EXPECT_TRUE(doctor_detail::shared_modules(plain).passed);
}

TEST(DoctorProbes, BatchesRepeatedWithinEightAreNamedAndAnEpochCycleIsNot) {
  auto records = [](const std::vector<uint64_t>& ids) {
    std::vector<StepRecord> out(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) out[i].input_hash = Hash128{ids[i], 7};
    return out;
  };
  std::vector<uint64_t> workers, epochs;  // 4 workers with one random state: each batch 4 times in a row
  for (uint64_t b = 0; b < 10; ++b) workers.insert(workers.end(), 4, b + 1);
  for (int e = 0; e < 4; ++e) {  // an unshuffled loader: 10 batches, then the same 10 again
    for (uint64_t b = 0; b < 10; ++b) epochs.push_back(b + 1);
  }
  // The probe batches: one of 64 samples, and held-out data of 500 (more than one batch) or none.
  doctor_detail::Probe with_heldout, without;
  Batch b;
  b.inputs = torch::zeros({64, 4});
  with_heldout.batches = without.batches = {b};
  b.inputs = torch::zeros({500, 4});
  with_heldout.heldout = {b};
  with_heldout.has_heldout = true;
  const VitalSign repeated = doctor_detail::batch_repeats(records(workers), with_heldout);
  ASSERT_FALSE(repeated.passed) << repeated.evidence;
  EXPECT_NE(repeated.cause.find("30 of 40 watched batches are identical"), std::string::npos) << repeated.cause;
  EXPECT_NE(repeated.cause.find("10 distinct in 40"), std::string::npos) << repeated.cause;
  EXPECT_TRUE(doctor_detail::batch_repeats(records(epochs), with_heldout).passed);
  EXPECT_TRUE(doctor_detail::batch_repeats(records({1, 1, 1, 1}), with_heldout).skipped);
  // One batch every step: the loader's first batch over and over when the held-out data alone is larger than it
  // (next(iter(loader)) each step); full-batch training of a data set of one batch otherwise.
  const std::vector<uint64_t> same(40, 3);
  const VitalSign one = doctor_detail::batch_repeats(records(same), with_heldout);
  ASSERT_FALSE(one.passed) << one.evidence;
  EXPECT_NE(one.cause.find("every watched batch is the same batch (1 distinct in 40"), std::string::npos) << one.cause;
  EXPECT_TRUE(doctor_detail::batch_repeats(records(same), without).passed);
}

TEST(DoctorProbes, BoundedOutputsAgainstTargetsOutsideTheirBound) {
  const torch::Tensor sigmoid_out = torch::tensor({0.2, 0.7, 0.5, 0.9}).unsqueeze(1);
  const torch::Tensor signed_targets = torch::tensor({-1.0, 1.0, -1.0, 1.0}).unsqueeze(1);
  const std::string miss = doctor_detail::output_range_miss(sigmoid_out, signed_targets);
  EXPECT_NE(miss.find("every output lies in (0, 1), a sigmoid's range, but 50% of the targets are outside it"),
            std::string::npos) << miss;
  EXPECT_EQ(doctor_detail::output_range_miss(sigmoid_out, (signed_targets + 1) / 2), "");  // mapped into (0, 1)
  EXPECT_EQ(doctor_detail::output_range_miss(torch::tensor({-3.0, 2.0, 0.5, 0.1}).unsqueeze(1), signed_targets), "");
  // A rectifier's outputs (exactly 0 beside positive values) against negative targets.
  const std::string relu = doctor_detail::output_range_miss(torch::tensor({0.0, 0.0, 1.5, 0.3}).unsqueeze(1),
                                                            torch::tensor({-0.5, -1.2, 1.0, 0.2}).unsqueeze(1));
  EXPECT_NE(relu.find("50% are exactly 0 (a rectifier's range), but 50% of the targets are negative"),
            std::string::npos) << relu;
}

TEST(DoctorProbes, AMeanDividedByTheBatchSizeAgainIsNamedWithWhatTheRunDid) {
  std::vector<StepRecord> records(8);
  for (size_t i = 0; i < records.size(); ++i) records[i].loss = 0.036 - 0.001 * double(i), records[i].lr = 0.05;
  const VitalSign divided = doctor_detail::loss_scale(0.5, 64, records, Verdict{}, {});
  ASSERT_FALSE(divided.passed) << divided.evidence;
  EXPECT_NE(divided.cause.find("divided by the batch size on top of its mean"), std::string::npos) << divided.cause;
  EXPECT_NE(divided.cause.find("1/64 of a mean's"), std::string::npos) << divided.cause;
  EXPECT_TRUE(doctor_detail::loss_scale(1.0, 64, records, Verdict{}, {}).passed);
}

TEST(DoctorProbes, InputsAndLabelsShuffledApartAreNamedAndShuffledTogetherAreNot) {
  const DoctorReport apart = tiny("shuffled_apart");
  const VitalSign& pairing = sign(apart, "label_pairing");
  EXPECT_FALSE(pairing.passed) << doctor_text(apart);
  EXPECT_EQ(pairing.data["inputs_seen_twice"], 8) << pairing.evidence;
  EXPECT_NE(pairing.cause.find("the labels do not stay with their inputs: of 8 inputs seen more than once in the first 40"),
            std::string::npos) << pairing.cause;
  EXPECT_EQ(top(apart), "label_pairing") << doctor_text(apart);
  const DoctorReport together = tiny("shuffled_together");
  EXPECT_TRUE(sign(together, "label_pairing").passed) << doctor_text(together);
  EXPECT_EQ(sign(together, "label_pairing").data["with_another_target"], 0);
}

TEST(DoctorProbes, LogProbabilitiesGivenToALossThatTakesLogitsAreNamedAndHarmlessOnesAreNot) {
  const DoctorReport r = tiny("log_sigmoid_bce");
  const VitalSign& m = sign(r, "loss_output_mismatch");
  EXPECT_FALSE(m.passed) << doctor_text(r);
  EXPECT_NE(m.cause.find("every output is at most 0 (log-probabilities"), std::string::npos) << m.cause;
  EXPECT_NE(m.evidence.find("every output still at most 0 after 40 steps"), std::string::npos) << m.evidence;
  EXPECT_EQ(top(r), "loss_output_mismatch") << doctor_text(r);
  // log_softmax before cross-entropy changes nothing, and logits that merely start below 0 move past it.
  const DoctorReport twice = tiny("log_softmax_ce");
  EXPECT_TRUE(sign(twice, "loss_output_mismatch").passed) << doctor_text(twice);
  EXPECT_NE(sign(twice, "loss_output_mismatch").evidence.find("log_softmax applied twice, which leaves them unchanged"),
            std::string::npos);
  const DoctorReport prior = tiny("prior_bias_bce");
  EXPECT_TRUE(sign(prior, "loss_output_mismatch").passed) << doctor_text(prior);
}

TEST(DoctorProbes, EveryWeightFrozenIsNamedAndATrainedHeadIsNot) {
  Tiny frozen("healthy", 4), probe("healthy", 4);
  for (auto& p : frozen.model().named_parameters()) {
    if (p.value().dim() >= 2) p.value().set_requires_grad(false);
  }
  const VitalSign v = doctor_detail::frozen_parameters(frozen);
  ASSERT_FALSE(v.passed) << v.evidence;
  EXPECT_NE(v.cause.find("every weight is frozen (requires_grad=False)"), std::string::npos) << v.cause;
  EXPECT_NE(v.cause.find("one-dimensional tensor(s)"), std::string::npos) << v.cause;
  bool first = true;  // a linear probe: the body frozen, the head trains
  for (auto& p : probe.model().named_parameters()) {
    if (p.value().dim() >= 2 && first) p.value().set_requires_grad(false), first = false;
  }
  EXPECT_TRUE(doctor_detail::frozen_parameters(probe).passed);
}

TEST(DoctorUserCode, TheLossGraphNamesUnregisteredAndUnreachedTensors) {
  auto graph = [](const std::string& kind) {
    Tiny t(kind, 4);
    return doctor_detail::probe_graph(t, *t.next_batch());
  };
  const doctor_detail::GraphProbe kept = graph("unregistered"), built = graph("built_in_forward"),
                                  cut = graph("no_grad_body"), plain = graph("healthy");
  ASSERT_TRUE(kept.measured && built.measured && cut.measured && plain.measured);
  std::vector<std::string> shapes = kept.foreign_shapes;  // in the graph's order
  std::sort(shapes.begin(), shapes.end());
  EXPECT_EQ(shapes, (std::vector<std::string>{"[8, 8]", "[8]"}));
  EXPECT_FALSE(kept.foreign_rebuilt);
  EXPECT_TRUE(built.foreign_rebuilt);
  EXPECT_EQ(cut.unreached, (std::vector<std::string>{"fc1.weight", "fc1.bias"}));
  EXPECT_TRUE(plain.foreign_shapes.empty() && plain.unreached.empty());
  const VitalSign v = doctor_detail::unregistered_parameters(kept);
  ASSERT_FALSE(v.passed);
  EXPECT_NE(v.cause.find("a Python list or dict"), std::string::npos) << v.cause;
  EXPECT_NE(doctor_detail::unregistered_parameters(built).cause.find("layers built inside forward()"), std::string::npos);
  EXPECT_TRUE(doctor_detail::unregistered_parameters(plain).passed);
}

TEST(DoctorUserCode, AThrowInTheLossIsADiagnosisWithItsStageAndCause) {
  const DoctorReport r = tiny("healthy", /*outputs=*/3);  // labels 0..3 against 3 outputs
  ASSERT_EQ(top(r), "training_code_error") << doctor_text(r);
  const VitalSign& e = *r.top();
  EXPECT_EQ(e.data["stage"], "loss");
  EXPECT_NE(e.cause.find("the output has 3 classes but a label is 3"), std::string::npos) << e.cause;
  EXPECT_NE(e.evidence.find("Target 3 is out of bounds"), std::string::npos) << e.evidence;
  EXPECT_EQ(e.evidence.find("frame #"), std::string::npos) << "no backtrace in the evidence";
  EXPECT_TRUE(sign(r, "gradient_flow").skipped);
}

TEST(DoctorUserCode, ProbabilitiesFedToCrossEntropyAreSoftmaxTwice) {
  const DoctorReport r = tiny("softmax");
  EXPECT_EQ(top(r), "loss_output_mismatch") << doctor_text(r);
  EXPECT_NE(r.top()->cause.find("softmax is applied twice"), std::string::npos);
}

TEST(DoctorUserCode, InputsFarFromUnitScaleAreTheTopCause) {
  const DoctorReport r = tiny("raw_scale");
  EXPECT_EQ(top(r), "input_scale") << doctor_text(r);
  EXPECT_GT(sign(r, "input_scale").data["rms"].get<double>(), 100);
  const DoctorReport ok = tiny("healthy");
  EXPECT_TRUE(sign(ok, "input_scale").passed) << doctor_text(ok);
  EXPECT_TRUE(sign(ok, "loss_output_mismatch").passed);
  EXPECT_TRUE(sign(ok, "training_code_error").passed);
}

// ---- invariants of correct training code (the publicly reported bugs of
// doctor_suites/public_bugs, here in LibTorch) ----

TEST(DoctorUserCode, DropoutLeftOnInEvalMakesEvaluationRandom) {
  const DoctorReport r = tiny("functional_dropout");
  ASSERT_EQ(top(r), "eval_consistency") << doctor_text(r);
  EXPECT_NE(r.top()->cause.find("evaluation is random"), std::string::npos) << r.top()->cause;
  EXPECT_GT(r.top()->data["repeat_max_diff"].get<double>(), 0);
  const DoctorReport ok = tiny("healthy");
  EXPECT_TRUE(sign(ok, "eval_consistency").passed) << doctor_text(ok);
  EXPECT_EQ(sign(ok, "eval_consistency").data["repeat_max_diff"].get<double>(), 0.0);
}

TEST(DoctorUserCode, ABroadcastingRegressionLossIsNamedWithLibTorchsOwnWarning) {
  const DoctorReport r = tiny("mse_column", /*outputs=*/1);
  ASSERT_EQ(top(r), "loss_shapes") << doctor_text(r);
  EXPECT_NE(r.top()->cause.find("outputs [8, 1] against targets [8]"), std::string::npos) << r.top()->cause;
  // Every warning LibTorch raised while the doctor ran the code, counted, each shown once.
  const nlohmann::json& warnings = r.top()->data["warnings"];
  ASSERT_FALSE(warnings.empty()) << r.top()->evidence;
  // The training run's warning (the loss_scale probe's halves raise their own, for [4] against [4, 1]).
  int64_t most = 0;
  for (const auto& [text, count] : warnings.items()) {
    EXPECT_NE(text.find("Using a target size"), std::string::npos) << warnings.dump();
    most = std::max(most, count.get<int64_t>());
  }
  EXPECT_GT(most, 40) << warnings.dump();
}

TEST(DoctorUserCode, ANegativeClassificationLossIsOutOfItsDomain) {
  const DoctorReport r = tiny("nll_of_scores");
  ASSERT_EQ(top(r), "loss_domain") << doctor_text(r);
  EXPECT_LT(r.top()->data["min_loss"].get<double>(), 0);
}

TEST(DoctorUserCode, ASecondOptimizerSteppedInsideTheStepIsNoFalseAlarm) {
  // Its parameters are in no declared optimizer, but they change: named, not failed.
  const DoctorReport r = tiny("second_optimizer_in_step");
  const VitalSign& coverage = sign(r, "optimizer_coverage");
  EXPECT_TRUE(coverage.passed) << doctor_text(r);
  EXPECT_EQ(coverage.named, (std::vector<std::string>{"out.weight", "out.bias"}));
  EXPECT_NE(coverage.evidence.find("neither monitors nor checkpoints"), std::string::npos) << coverage.evidence;
  EXPECT_TRUE(r.passed()) << doctor_text(r);
}

TEST(DoctorUserCode, ExplainsCommonLibTorchErrors) {
  ErrorContext c;
  c.output_shape = {64, 5};
  c.label_min = 0;
  c.label_max = 9;
  EXPECT_EQ(explain_error("loss", "Target 8 is out of bounds.", c),
            "the output has 5 classes but a label is 8 (this batch's labels are 0..9): the output layer needs one "
            "unit per class");
  EXPECT_NE(explain_error("forward", "mat1 and mat2 shapes cannot be multiplied (64x784 and 512x10)", c)
                .find("expects 512 input features but gets 784"),
            std::string::npos);
  EXPECT_NE(explain_error("backward", "element 0 of tensors does not require grad and does not have a grad_fn", c)
                .find("detach()"),
            std::string::npos);
  EXPECT_NE(explain_error("loss", "Expected input batch_size (32) to match target batch_size (64).", c)
                .find("32 rows but the batch has 64 labels"),
            std::string::npos);
  EXPECT_NE(explain_error("loss", "a Tensor with 16 elements cannot be converted to Scalar", c)
                .find("the loss is 16 numbers, not one: reduce it"),
            std::string::npos);
  EXPECT_NE(explain_error("backward", "grad can be implicitly created only for scalar outputs", c)
                .find("the loss is not one number: reduce it"),
            std::string::npos);
  EXPECT_EQ(explain_error("forward", "something nobody has seen", c), "");
}


// ---- the references, the update, the experiments, the consistency pass (issue 53) ----

TEST(DoctorReferences, SkillIsZeroAtChanceOneWhenPerfectAndBelowZeroWhenInverted) {
  using doctor_detail::task_skill;
  const torch::Tensor labels = torch::tensor({0, 1, 2, 3, 0, 1, 2, 3}, torch::kInt64);
  const torch::Tensor perfect = torch::one_hot(labels, 4).to(torch::kFloat32);
  EXPECT_NEAR(task_skill(perfect, labels).value, 1.0, 1e-9);
  EXPECT_EQ(task_skill(perfect, labels).metric, "accuracy");
  const torch::Tensor constant = torch::zeros({8, 4}).index_put_({torch::indexing::Slice(), 0}, 1.0);
  EXPECT_NEAR(task_skill(constant, labels).value, 0.0, 1e-9) << "always the majority's share (ties: class 0)";
  const torch::Tensor y = torch::tensor({0.0, 1.0, 0.0, 1.0}).unsqueeze(1);
  const torch::Tensor ranked = torch::tensor({-2.0, 3.0, -1.0, 1.0}).unsqueeze(1);
  EXPECT_NEAR(task_skill(ranked, y).value, 1.0, 1e-9);
  EXPECT_EQ(task_skill(ranked, y).metric, "AUC");
  EXPECT_NEAR(task_skill(-ranked, y).value, -1.0, 1e-9) << "every positive ranked below every negative";
  const torch::Tensor real = torch::tensor({0.5, -1.0, 2.0, 0.1}).unsqueeze(1);
  EXPECT_NEAR(task_skill(3 * real + 1, real).value, 1.0, 1e-9) << "any scale: the correlation";
  EXPECT_TRUE(std::isnan(task_skill(torch::zeros({4, 3}), torch::zeros({4, 2})).value)) << "no task of these shapes";
}

TEST(DoctorReferences, TheReferenceLossFollowsTheOutputsAndTargets) {
  using doctor_detail::reference_loss_name;
  EXPECT_EQ(reference_loss_name(torch::zeros({8, 4}), torch::zeros({8}, torch::kInt64)), "cross-entropy");
  EXPECT_EQ(reference_loss_name(torch::zeros({8, 5, 4}), torch::zeros({8, 5}, torch::kInt64)), "cross-entropy");
  EXPECT_EQ(reference_loss_name(torch::zeros({8, 1}), torch::ones({8, 1})), "binary cross-entropy on the logits");
  EXPECT_EQ(reference_loss_name(torch::zeros({8, 2}), torch::randn({8, 2})), "mean squared error");
  EXPECT_EQ(reference_loss_name(torch::zeros({8, 3}), torch::randn({8, 2})), "");
  const torch::Tensor logits = torch::randn({8, 4});
  const torch::Tensor labels = torch::tensor({0, 1, 2, 3, 0, 1, 2, 3}, torch::kInt64);
  EXPECT_NEAR(doctor_detail::reference_loss(logits, labels).item<double>(),
              torch::nn::functional::cross_entropy(logits, labels).item<double>(), 1e-6);
}

TEST(DoctorUpdate, AGradientClearedBeforeTheStepIsReadWhereTheOptimizerSteps) {
  const DoctorReport r = tiny("zero_grad_in_step");
  const VitalSign& update = sign(r, "applied_update");
  ASSERT_FALSE(update.passed) << doctor_text(r);
  EXPECT_NE(update.cause.find("the gradient is cleared between backward and the optimizer's step"), std::string::npos)
      << update.cause;
  EXPECT_EQ(update.part, "step");
  EXPECT_EQ(top(r), "applied_update") << doctor_text(r);
  EXPECT_TRUE(r.contradictions.empty()) << r.contradictions.front();
}

TEST(DoctorUpdate, AnUpdateNeverAppliedIsNamedByCoverageAndTheUpdateBoth) {
  const DoctorReport r = tiny("noop_step");
  EXPECT_EQ(top(r), "optimizer_coverage") << doctor_text(r);
  const VitalSign& update = sign(r, "applied_update");
  ASSERT_FALSE(update.passed) << doctor_text(r);
  EXPECT_NE(update.cause.find("the gradient was still there after optimizer_step()"), std::string::npos) << update.cause;
  EXPECT_TRUE(r.contradictions.empty()) << r.contradictions.front();
}

TEST(DoctorExperiments, TheInitSwapNamesAZeroInitializationAndSaysWhatDiffers) {
  const DoctorReport r = tiny("zero_init");
  const VitalSign& part = sign(r, "faulty_part");
  ASSERT_FALSE(part.passed) << doctor_text(r);
  EXPECT_EQ(part.data["winners"], nlohmann::json::array({"init"})) << part.data.dump();
  EXPECT_EQ(part.part, "init");
  EXPECT_NE(part.cause.find("the faulty part is the init"), std::string::npos) << part.cause;
  EXPECT_NE(part.cause.find("fc1.weight std 0 (default"), std::string::npos) << part.cause;
  // Every swap is in the report, with what it did.
  std::vector<std::string> swaps;
  for (const auto& t : part.data["trials"]) swaps.push_back(t["swap"]);
  EXPECT_EQ(swaps, (std::vector<std::string>{"none", "data", "init", "loss", "step", "optimizer", "model"}));
  EXPECT_TRUE(r.contradictions.empty()) << r.contradictions.front();
}

TEST(DoctorExperiments, AHealthyProgramPaysForNoSwap) {
  const DoctorReport r = tiny("healthy");
  const VitalSign& part = sign(r, "faulty_part");
  EXPECT_TRUE(part.passed) << doctor_text(r);
  EXPECT_EQ(part.data["trials"].size(), 1u) << "the program's own run only";
  EXPECT_NE(part.evidence.find("it learns"), std::string::npos) << part.evidence;
}

TEST(DoctorConsistency, AClaimAMeasurementContradictsIsTakenOutAndNoted) {
  DoctorReport r;
  VitalSign flow = doctor_detail::sign("gradient_flow");
  flow.data = {{"layers", {{"out", {{"rms_grad", 0.02}, {"peak_grad_norm", 0.1}}}}}};
  VitalSign frozen = doctor_detail::sign("frozen_output");
  doctor_detail::fail(frozen, 20, "the output is frozen: the loss stays at chance",
                      "the output layer (out) gets no gradient; look for a detach()");
  r.signs = {flow, frozen};
  EXPECT_EQ(doctor_detail::check_consistency(r, /*repair=*/false).size(), 1u);
  doctor_detail::check_consistency(r, /*repair=*/true);
  EXPECT_EQ(r.signs[1].hint.find("gets no gradient"), std::string::npos) << r.signs[1].hint;
  EXPECT_NE(r.signs[1].hint.find("look for a detach()"), std::string::npos) << r.signs[1].hint;
  ASSERT_EQ(r.corrections.size(), 1u);
  EXPECT_EQ(r.corrections[0]["sign"], "frozen_output");
  EXPECT_TRUE(doctor_detail::check_consistency(r, /*repair=*/false).empty());
}

TEST(DoctorConsistency, ASignWhoseEvidenceMeetsItsOwnFailureConditionMustFail) {
  DoctorReport r;
  VitalSign lr = doctor_detail::sign("lr_schedule");
  lr.data = {{"peak", 0.0}};
  r.signs = {lr};
  const std::vector<std::string> found = doctor_detail::check_consistency(r, /*repair=*/false);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("lr_schedule passed though the learning rate it read is 0"), std::string::npos) << found[0];
}

}  // namespace
}  // namespace spikehunt
