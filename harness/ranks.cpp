#include "harness/ranks.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <algorithm>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include "base/child.h"
#include "base/files.h"
#include "base/program.h"
#include "harness/burst.h"
#include "harness/checkpoint.h"
#include "harness/state.h"
#include "harness/trainer.h"
#include "harness/training_error.h"
#include "scenarios/catalog.h"

namespace spikehunt {

struct Ranks::Store {
  c10::intrusive_ptr<c10d::TCPStore> tcp;
};

Ranks::Ranks(int64_t rank, int64_t world, int port, double timeout_seconds)
    : store_(std::make_unique<Store>()), rank_(rank), world_(world), timeout_seconds_(timeout_seconds) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw std::invalid_argument("Ranks: rank " + std::to_string(rank) + " of a world of " + std::to_string(world));
  }
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = rank == 0;
  o.numWorkers = static_cast<std::size_t>(world);
  o.waitWorkers = false;  // rank 0 starts the others after it serves
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  try {
    store_->tcp = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  } catch (const std::exception& e) {
    throw std::runtime_error("data-parallel rank " + std::to_string(rank) + ": the ranks' store on 127.0.0.1:" +
                             std::to_string(port) + " could not be " + (rank == 0 ? "served" : "reached") + ": " +
                             e.what());
  }
}

Ranks::~Ranks() = default;

int Ranks::port() const { return store_->tcp->getPort(); }

std::vector<std::vector<uint8_t>> Ranks::exchange(const std::vector<uint8_t>& mine) {
  const std::string prefix = "x" + std::to_string(seq_) + "/";
  store_->tcp->set(prefix + std::to_string(rank_), mine);
  std::vector<std::vector<uint8_t>> rows(static_cast<size_t>(world_));
  const auto start = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < world_; ++r) {
    if (r == rank_) {
      rows[size_t(r)] = mine;
      continue;
    }
    const std::string key = prefix + std::to_string(r);
    // Polled (a blocking wait that times out is logged by c10d every time),
    // 50 µs at first, then at most every 5 ms; the watchdog about every second.
    auto pause = std::chrono::microseconds(50);
    auto last_check = start;
    while (!store_->tcp->check({key})) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(5000));
      const auto now = std::chrono::steady_clock::now();
      if (now - last_check < std::chrono::seconds(1)) continue;
      last_check = now;
      if (watchdog_) watchdog_();
      const double waited = std::chrono::duration<double>(now - start).count();
      if (waited > timeout_seconds_) {
        throw std::runtime_error("data-parallel rank " + std::to_string(rank_) + " waited " +
                                 std::to_string(int64_t(waited)) + " s for rank " + std::to_string(r) +
                                 " at collective " + std::to_string(seq_));
      }
    }
    rows[size_t(r)] = store_->tcp->get(key);
  }
  // Every rank has set this collective's key, so every rank has read the last
  // one's: this rank's key of the last collective can go.
  if (seq_ > 0) store_->tcp->deleteKey("x" + std::to_string(seq_ - 1) + "/" + std::to_string(rank_));
  ++seq_;
  return rows;
}

std::vector<double> Ranks::gather(const std::vector<double>& mine) {
  std::vector<uint8_t> bytes(mine.size() * sizeof(double));
  if (!mine.empty()) std::memcpy(bytes.data(), mine.data(), bytes.size());
  const std::vector<std::vector<uint8_t>> rows = exchange(bytes);
  std::vector<double> all;
  all.reserve(mine.size() * size_t(world_));
  for (int64_t r = 0; r < world_; ++r) {
    const std::vector<uint8_t>& row = rows[size_t(r)];
    if (row.size() != bytes.size()) {
      throw std::runtime_error("data-parallel gather: rank " + std::to_string(r) + " sent " +
                               std::to_string(row.size() / sizeof(double)) + " values, rank " +
                               std::to_string(rank_) + " " + std::to_string(mine.size()));
    }
    const double* d = reinterpret_cast<const double*>(row.data());
    all.insert(all.end(), d, d + mine.size());
  }
  return all;
}

double Ranks::from_rank0(double mine) { return gather({mine}).front(); }

void Ranks::average(const std::vector<at::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& t : tensors) {
    if (t.defined()) parts.push_back(t.detach().to(torch::kCPU, torch::kFloat64).reshape({-1}));
  }
  if (parts.empty()) return;
  const torch::Tensor flat = torch::cat(parts).contiguous();
  std::vector<uint8_t> bytes(size_t(flat.numel()) * sizeof(double));
  std::memcpy(bytes.data(), flat.data_ptr<double>(), bytes.size());
  const std::vector<std::vector<uint8_t>> rows = exchange(bytes);
  torch::Tensor sum = torch::zeros_like(flat);
  double* s = sum.data_ptr<double>();
  for (int64_t r = 0; r < world_; ++r) {
    const std::vector<uint8_t>& row = rows[size_t(r)];
    if (row.size() != bytes.size()) {
      throw std::runtime_error("data-parallel average: rank " + std::to_string(r) + " sent " +
                               std::to_string(row.size() / sizeof(double)) + " gradient values, rank " +
                               std::to_string(rank_) + " " + std::to_string(flat.numel()) +
                               ": the ranks train different models");
    }
    const double* x = reinterpret_cast<const double*>(row.data());
    for (int64_t i = 0; i < flat.numel(); ++i) s[i] += x[i];
  }
  sum.div_(double(world_));
  int64_t at = 0;
  for (const torch::Tensor& t : tensors) {
    if (!t.defined()) continue;
    const int64_t n = t.numel();
    t.copy_(sum.narrow(0, at, n).view(t.sizes()));
    at += n;
  }
}

// ---- a data-parallel burst over processes ----

namespace fs = std::filesystem;

BurstResult run_burst_ranked(Scenario& scenario, const HealthRules& rules, const BurstOptions& options) {
  const TrainingConfig& config = scenario.config();
  const int64_t world = config.world_size;
  Ranks ranks(0, world, 0);
  const fs::path dir = fs::temp_directory_path() / ("spikehunt-ranks-" + std::to_string(::getpid()) + "-" +
                                                    std::to_string(ranks.port()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};
  std::string state_file;
  if (options.start_step > 0) {  // a resumed burst: the other ranks start from rank 0's state
    state_file = (dir / "state.safetensors").string();
    write_checkpoint(state_file, capture_state(scenario), {{"step", std::to_string(options.start_step)}});
  }
  std::vector<ChildSpec> specs;
  for (int64_t r = 1; r < world; ++r) {
    ChildSpec spec;
    spec.argv = {self_executable()};  // run_children starts it as this program's command (program.h)
    for (const std::string& a : {std::string("rank"), std::string("--config-json"), config_to_json(config).dump(),
                                 std::string("--rank"), std::to_string(r), std::string("--world"),
                                 std::to_string(world), std::string("--port"), std::to_string(ranks.port()),
                                 std::string("--start-step"), std::to_string(options.start_step)}) {
      spec.argv.push_back(a);
    }
    if (!state_file.empty()) spec.argv.insert(spec.argv.end(), {"--state", state_file});
    spec.log_path = (dir / ("rank" + std::to_string(r) + ".log")).string();
    specs.push_back(std::move(spec));
  }
  std::mutex mutex;
  std::string failed;  // the first rank that ended badly, with its log
  std::atomic<bool> any_failed{false};
  std::thread children([&] {
    try {
      run_children(specs, int(specs.size()), [&](size_t i, const ChildExit& e) {
        if (e.exit_code == 0 && e.signal == 0) return;
        std::lock_guard<std::mutex> lock(mutex);
        if (failed.empty()) {
          failed = "rank " + std::to_string(i + 1) + " ended (" + e.describe() + "): " + tail_of(specs[i].log_path, 600);
        }
        any_failed = true;
      });
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mutex);
      failed = std::string("the other ranks could not be started: ") + e.what();
      any_failed = true;
    }
  });
  ranks.set_watchdog([&] {
    if (!any_failed) return;
    std::lock_guard<std::mutex> lock(mutex);
    throw TrainingError("data_parallel", failed, "", failed);
  });
  BurstOptions mine = options;
  mine.ranks = &ranks;
  BurstResult result = run_burst(scenario, rules, mine);
  children.join();  // they end with rank 0's last collective, or when its store goes
  if (any_failed && result.verdict.outcome != Outcome::kCrashed) {
    set_crashed(result.verdict, TrainingError("data_parallel", failed, "", failed));
  }
  return result;
}

int run_rank(const TrainingConfig& config, int64_t rank, int64_t world, int port, const std::string& state_file,
             int64_t start_step) {
  configure_runtime(config);
  Ranks ranks(rank, world, port);
  std::unique_ptr<Scenario> scenario = make_scenario(config);
  BurstOptions options;
  options.ranks = &ranks;
  options.start_step = start_step;
  if (!state_file.empty()) {
    restore_state(*scenario, read_checkpoint(state_file), state_file);
    if (Trainer(*scenario).skip_steps(start_step) != start_step) return kExitInternal;
  }
  const BurstResult r = run_burst(*scenario, config.health, options);
  return r.verdict.outcome == Outcome::kCrashed ? kExitInternal : kExitOk;
}

}  // namespace spikehunt
