// A 0.1-era user program: its own scenario (one optimizer() override, the 0.1
// contract), stepped by hand with spikehunt::train_step under the monitor,
// then the whole command line through cli_main.
#include <spikehunt/spikehunt.h>

#include <cstdio>
#include <cstring>
#include <memory>

namespace {

class Tiny : public spikehunt::Scenario {
 public:
  explicit Tiny(const spikehunt::TrainingConfig&) {
    torch::manual_seed(3);
    fc1_ = model_.register_module("fc1", torch::nn::Linear(8, 16));
    fc2_ = model_.register_module("fc2", torch::nn::Linear(16, 3));
    optimizer_ = std::make_unique<torch::optim::SGD>(model_.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  torch::nn::Module& model() override { return model_; }
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }
  torch::Tensor forward(const torch::Tensor& x, const spikehunt::Tap& tap) override {
    torch::Tensor h = torch::relu(fc1_->forward(x));
    tap("fc1_act", h);
    return fc2_->forward(h);
  }
  std::optional<spikehunt::Batch> next_batch() override {
    if (step_ == planned_steps()) return std::nullopt;
    spikehunt::Batch b;
    torch::manual_seed(0);  // the same batch every step: the loss must fall
    b.inputs = torch::randn({16, 8});
    b.targets = torch::arange(16) % 3;
    b.step = step_++;
    return b;
  }
  int64_t planned_steps() const override { return 6; }
  std::vector<std::string> phase_names() const override { return {"only"}; }
  int64_t num_classes() const override { return 3; }

 private:
  torch::nn::Module model_;
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
  std::unique_ptr<torch::optim::SGD> optimizer_;
  int64_t step_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  spikehunt::register_scenario("tiny", [](const spikehunt::TrainingConfig& c) { return std::make_unique<Tiny>(c); });
  if (argc > 1 && std::strcmp(argv[1], "steps") == 0) {
    spikehunt::TrainingConfig config;
    config.scenario = "tiny";
    std::unique_ptr<spikehunt::Scenario> s = spikehunt::make_scenario(config);
    int steps = 0;
    float first = 0, last = 0;
    while (std::optional<spikehunt::Batch> b = s->next_batch()) {
      const float loss = spikehunt::train_step(*s, *b, nullptr).item<float>();  // 0.1's API, deprecated in 0.2
      if (steps++ == 0) first = loss;
      last = loss;
    }
    std::printf("trained %d steps with train_step: loss %.4f -> %.4f\n", steps, first, last);
    return last < first ? 0 : 1;
  }
  return spikehunt::cli_main(argc, argv);
}
