#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "faulty_scenario.h"

#include <spikehunt/spikehunt.h>

namespace {

class FaultyScenario : public spikehunt::Scenario {
 public:
  explicit FaultyScenario(const spikehunt::TrainingConfig& config)
      : fault_(config.params.string("fault")), at_(config.params.integer("at_step")),
        leak_mb_(config.params.integer("leak_mb")) {
    spikehunt::TrainingConfig standard = config;
    standard.scenario = "standard";
    standard.params = {};
    inner_ = spikehunt::make_scenario(standard);
    bind_config(config);
  }

  torch::nn::Module& model() override { return inner_->model(); }
  std::vector<spikehunt::NamedOptimizer> optimizers() override { return inner_->optimizers(); }
  torch::Tensor forward(const torch::Tensor& inputs, const spikehunt::Tap& tap) override {
    if (calls_++ == at_) misbehave();
    return inner_->forward(inputs, tap);
  }
  torch::Tensor loss(const torch::Tensor& outputs, const torch::Tensor& targets) override {
    return inner_->loss(outputs, targets);
  }
  std::optional<spikehunt::Batch> next_batch() override { return inner_->next_batch(); }
  std::vector<spikehunt::Batch> heldout(int64_t max_samples) override { return inner_->heldout(max_samples); }
  int64_t skip_batches(int64_t n) override { return inner_->skip_batches(n); }
  int64_t planned_steps() const override { return inner_->planned_steps(); }
  std::vector<std::string> phase_names() const override { return inner_->phase_names(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  void optimizer_step() override { inner_->optimizer_step(); }
  std::vector<spikehunt::NamedTensor> optimizer_state() override { return inner_->optimizer_state(); }

 private:
  void misbehave() {
    if (fault_ == "segfault") {
      volatile int* null = nullptr;
      *null = 1;
    } else if (fault_ == "abort") {
      std::abort();
    } else if (fault_ == "exit") {
      std::exit(3);
    } else if (fault_ == "hang") {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    } else if (fault_ == "throw_int") {
      throw 42;  // not a std::exception: still the training code's error
    } else if (fault_ == "throw_text") {
      throw "the cache is cold";
    } else if (fault_ == "leak") {
      static std::vector<std::unique_ptr<char[]>> kept;  // never freed: a leak across bursts
      kept.emplace_back(new char[size_t(leak_mb_) << 20]);
      std::memset(kept.back().get(), 1, size_t(leak_mb_) << 20);
    }
  }

  std::string fault_;
  int64_t at_, leak_mb_, calls_ = 0;
  std::unique_ptr<spikehunt::Scenario> inner_;
};

}  // namespace

void register_faulty_scenario() {
  spikehunt::register_scenario(
      "faulty", [](const spikehunt::TrainingConfig& c) { return std::make_unique<FaultyScenario>(c); },
      {spikehunt::ParamSpec::string("fault", "none", {"none", "segfault", "abort", "exit", "hang", "leak", "throw_int", "throw_text"},
                                    "what the training code does at forward call at_step"),
       spikehunt::ParamSpec::integer("at_step", 1, 0, 1000, "the forward call that misbehaves, from 0"),
       spikehunt::ParamSpec::integer("leak_mb", 0, 0, 4096, "MiB a leak keeps")});
}
