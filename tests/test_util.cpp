#include "test_util.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

extern char** environ;

namespace spikehunt::testing {

struct PlantedScenario::Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(16, 8));
    out = register_module("out", torch::nn::Linear(8, 4));
    zero = register_parameter("zero", torch::zeros({4}));
  }
  torch::nn::Linear fc1{nullptr}, out{nullptr};
  torch::Tensor zero;
};

PlantedScenario::PlantedScenario(Plant plant, int64_t plant_step, int64_t steps)
    : plant_(plant), plant_step_(plant_step), steps_(steps) {
  torch::manual_seed(0);
  net_ = std::make_shared<Net>();
  optimizer_ = std::make_unique<torch::optim::SGD>(net_->parameters(),
                                                   torch::optim::SGDOptions(0.1).momentum(0.9));
}

PlantedScenario::~PlantedScenario() = default;

torch::nn::Module& PlantedScenario::model() { return *net_; }
torch::optim::Optimizer& PlantedScenario::optimizer() { return *optimizer_; }

torch::Tensor PlantedScenario::forward(const torch::Tensor& inputs, const Tap& tap) {
  const bool now = step_ == plant_step_;
  TORCH_CHECK(!(now && plant_ == Plant::kThrow), "planted failure in forward");
  torch::Tensor h = torch::relu(net_->fc1->forward(inputs));
  if (now && plant_ == Plant::kForwardNaN) {
    torch::Tensor mask = torch::zeros_like(h);
    mask.index_put_({0, 0}, std::numeric_limits<float>::quiet_NaN());
    h = h + mask;
  }
  tap("fc1_act", h);
  torch::Tensor logits = net_->out->forward(h);
  if (now && plant_ == Plant::kSqrtZeroGrad) logits = logits + torch::sqrt(net_->zero);
  tap("out_logits", logits);
  if (now && plant_ == Plant::kOverflowStep) {
    // Near float32's max: with the loss scaled up below, lr x grad overflows.
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(3e38);
  }
  return logits;
}

torch::Tensor PlantedScenario::loss(const torch::Tensor& outputs, const torch::Tensor& targets) {
  if (step_ == plant_step_ && plant_ == Plant::kLogZeroLoss) {
    // -log(softmax) with sharpened logits: some probabilities underflow to exactly 0.
    return -torch::log(torch::softmax(outputs * 1e4, 1)).mean();
  }
  if (step_ == plant_step_ && plant_ == Plant::kOverflowStep) return Scenario::loss(outputs, targets) * 1e4;
  return Scenario::loss(outputs, targets);
}

std::optional<Batch> PlantedScenario::next_batch() {
  if (++step_ >= steps_) return std::nullopt;
  torch::manual_seed(1000 + step_);
  Batch b;
  b.inputs = b.host_inputs = torch::randn({8, 16});
  b.targets = b.host_targets = torch::randint(0, 4, {8}, torch::kInt64);
  b.step = step_;
  b.batch = step_;
  return b;
}

TempDir::TempDir() {
  char pattern[] = "/tmp/spikehunt-test-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

CommandResult run_spikehunt(const std::string& args) { return run_program(SPIKEHUNT_BINARY, args); }

CommandResult run_program(const std::string& program, const std::string& args) {
  const std::string command = program + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed: " + command);
  CommandResult r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

int spawn_background(std::vector<std::string> args, const std::string& stdout_path, bool own_group) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (own_group) {
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
  }
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("cannot start " + args.front());
  return pid;
}

std::string source_path(const std::string& relative) {
  return std::string(SPIKEHUNT_SOURCE_DIR) + "/" + relative;
}

std::vector<std::vector<std::string>> markdown_table(const std::string& relative, const std::string& header) {
  std::ifstream in(source_path(relative));
  std::vector<std::vector<std::string>> rows;
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside) {
      inside = line.rfind(header, 0) == 0;
      continue;
    }
    if (line.rfind("| ---", 0) == 0) continue;
    if (line.rfind("|", 0) != 0) break;
    std::vector<std::string> cells;
    // Cells split at the bars outside `code` (a cell may hold "\|" or a bar inside backquotes).
    std::string cell;
    bool code = false;
    for (size_t k = 1; k < line.size(); ++k) {
      const char c = line[k];
      if (c == '`') code = !code;
      if (c == '|' && !code && line[k - 1] != '\\') {
        cell.erase(0, cell.find_first_not_of(' '));
        cell.erase(cell.find_last_not_of(' ') + 1);
        cells.push_back(cell);
        cell.clear();
      } else {
        cell += c;
      }
    }
    rows.push_back(cells);
  }
  return rows;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string junit_problems(const std::string& path) {
  if (std::system("command -v xmllint >/dev/null 2>&1") != 0) {
    return "xmllint is not installed (scripts/setup.sh installs libxml2-utils)";
  }
  const CommandResult r =
      run_program("xmllint", "--noout --schema " + source_path("tests/schemas/junit.xsd") + " " + path);
  return r.exit_code == 0 ? "" : r.output;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

std::string tiny_space(const std::string& extra_dimensions) {
  return R"({
  "base": {"model": {"kind": "mlp", "mlp_width": 32}, "dataset": {"synthetic_train_per_class": 40},
           "batch_size": 16, "threads": 1},
  "dimensions": {
    )" + extra_dimensions + R"(
    "optimizer.lr": {"log_range": [0.01, 8]},
    "seed": {"range": [0, 3]},
    "max_batches_per_epoch": {"range": [2, 6]}
  }})";
}

}  // namespace spikehunt::testing
