// test_util.h — helpers shared by the tests: a tiny scenario that plants a
// fault in a chosen stage at a chosen step, temp folders, and running the
// spikehunt binary.
#pragma once

#include <string>
#include <vector>

#include "scenarios/scenario.h"
#include "temp_dir.h"

namespace spikehunt::testing {

enum class Plant {
  kNone,
  kForwardNaN,    // one NaN in the fc1_act tap
  kLogZeroLoss,   // hand-written cross-entropy without epsilon: log(0) = -inf
  kSqrtZeroGrad,  // sqrt(0) in the forward: finite output, infinite gradient
  kOverflowStep,  // finite gradients, but lr x grad overflows float32 in the optimizer step
  kThrow,         // the training code throws
};

// A 16 -> 8 -> 4 MLP on fixed random batches of 8, with SGD (lr 0.1,
// momentum 0.9); `plant` happens at step `plant_step`.
class PlantedScenario : public Scenario {
 public:
  PlantedScenario(Plant plant, int64_t plant_step, int64_t steps);
  ~PlantedScenario() override;

  torch::nn::Module& model() override;
  torch::optim::Optimizer& optimizer() override;
  torch::Tensor forward(const torch::Tensor& inputs, const Tap& tap) override;
  torch::Tensor loss(const torch::Tensor& outputs, const torch::Tensor& targets) override;
  std::optional<Batch> next_batch() override;
  int64_t planned_steps() const override { return steps_; }
  std::vector<std::string> phase_names() const override { return {"only"}; }
  int64_t num_classes() const override { return 4; }

 private:
  struct Net;
  Plant plant_;
  int64_t plant_step_, steps_, step_ = -1;
  std::shared_ptr<Net> net_;
  std::unique_ptr<torch::optim::SGD> optimizer_;
};


struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
// Runs the spikehunt binary with `args` (a shell-quoted string).
CommandResult run_spikehunt(const std::string& args);
CommandResult run_program(const std::string& program, const std::string& args);  // another program (a user's)

std::string source_path(const std::string& relative);  // path inside the repository
// The rows of the markdown table in the repository's file `relative` whose header line starts with
// `header`: each row's cells, trimmed (the header and the --- line left out). Empty when there is none.
std::vector<std::vector<std::string>> markdown_table(const std::string& relative, const std::string& header);

// Starts argv[0] with `argv` in the background (posix_spawn), its stdout into `stdout_path` ("/dev/null"
// to drop it); `own_group`: in a process group of its own, as a shell job is (kill(-pid, ...) reaches its
// children too). Returns its pid; throws when it cannot start.
int spawn_background(std::vector<std::string> argv, const std::string& stdout_path, bool own_group = false);

// "" when the XML file at `path` is valid JUnit as CI dashboards read it
// (xmllint against tests/schemas/junit.xsd), else xmllint's complaint.
std::string junit_problems(const std::string& path);

// A small fast search space: a tiny MLP on 40 synthetic images a class, a few
// steps, momentum 0.9; learning rates up to 8 diverge. `extra_dimensions`
// ("\"key\": {...},") come before the learning rate.
std::string tiny_space(const std::string& extra_dimensions = "");
void write_bytes(const std::string& path, const std::string& bytes);

}  // namespace spikehunt::testing
