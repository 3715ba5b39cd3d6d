// watch.cpp — spikehunt._core.Watch: the monitor inside a loop of the
// user's own (spikehunt.Watch, the Lightning and Hugging Face callbacks).
#include <chrono>
#include <memory>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/files.h"
#include "harness/burst.h"
#include "harness/burst_steps.h"
#include "harness/checkpoint.h"
#include "harness/record.h"
#include "harness/report.h"
#include "harness/results.h"
#include "harness/trace.h"
#include "py_training.h"
#include "scenarios/config.h"
#include "spikehunt/version.h"

namespace py = pybind11;

namespace spikehunt {

namespace {

// ---- the monitor inside a loop of the user's own (spikehunt.Watch, the callbacks) ----
//
// The user's loop (or Lightning's, or the Hugging Face Trainer's) runs the
// step on its own thread; spikehunt.Watch calls the monitor's stages as the
// loop reaches them: begin() with the step's micro-batches, their outputs,
// losses and the taps the hooks collected; after_backward() once the
// gradients are in; finish() after the optimizer step. BurstSteps records
// what run_burst records, so the trace, verdict, checkpoints and fail-fast
// are the same as `run`'s. The LoopScenario only names the model, the
// optimizers and the classes to the monitor: it trains nothing.
class LoopScenario : public Scenario {
 public:
  LoopScenario(const py::object& module, const py::list& optimizers, int64_t planned, int64_t classes)
      : training_(module), planned_(planned), classes_(classes) {
    for (const py::handle o : optimizers) training_.add(o);
  }
  torch::nn::Module& model() override { return training_.module(); }
  torch::optim::Optimizer& optimizer() override { return training_.first(); }
  std::vector<NamedOptimizer> optimizers() override { return training_.named(); }
  std::optional<Batch> next_batch() override { return std::nullopt; }
  torch::Tensor forward(const torch::Tensor&, const Tap&) override {
    throw std::logic_error("a watch's steps run in the user's loop");
  }
  torch::Tensor loss(const torch::Tensor&, const torch::Tensor&) override {
    throw std::logic_error("a watch's steps run in the user's loop");
  }
  int64_t planned_steps() const override { return planned_; }
  std::vector<std::string> phase_names() const override { return {"train"}; }
  int64_t num_classes() const override { return classes_; }
  torch::Device device() const override { return training_.device; }

 private:
  PyTraining training_;
  int64_t planned_ = 0, classes_ = 10;
};

class Watch {
 public:
  // Data-parallel (world > 1): `gather` all-gathers a float64 tensor across
  // the ranks (spikehunt.Watch makes it with torch.distributed); every rank
  // records the global step, rank 0 alone writes the folder.
  Watch(const py::object& module, const py::list& optimizers, const std::string& out,
        const std::vector<std::string>& overrides, bool fail_fast, bool checkpoints, int64_t planned, int64_t classes,
        int64_t rank, int64_t world, const py::object& gather)
      : config_(default_config(overrides)),
        scenario_(std::make_unique<LoopScenario>(module, optimizers, planned, classes)) {
    config_.name = "watch";
    if (rank == 0) {
      dir_ = std::make_unique<RunDirectory>(out, config_);
      writer_ = std::make_unique<TraceWriter>(dir_->file("trace.jsonl"));
    }
    BurstOptions options;
    options.keep_states = checkpoints && rank == 0;  // the parameters and state are every rank's
    options.fail_fast = fail_fast;
    options.on_step = [this](const StepRecord& r) {
      if (writer_) writer_->write(r);
    };
    steps_.emplace(*scenario_, config_.health, options);
    steps_->result().verdict.planned_steps = planned;
    if (world > 1) {
      steps_->monitor().set_ranks(rank, world, [gather](const std::vector<double>& mine) {
        py::gil_scoped_acquire gil;
        const torch::Tensor all = gather(torch::tensor(at::ArrayRef<double>(mine), torch::kFloat64))
                                      .cast<torch::Tensor>()
                                      .to(torch::kCPU, torch::kFloat64)
                                      .contiguous();
        return std::vector<double>(all.data_ptr<double>(), all.data_ptr<double>() + all.numel());
      });
    }
  }

  // The step's stages, in the order the loop reaches them: begin() with the
  // step's micro-batches (inputs, targets); per micro-batch taps() with its
  // tapped values (or tap() for each as it comes) and forward() with its
  // outputs and loss; after_backward() once the gradients are in; finish()
  // after the optimizer step. Each returns the step's record (a dict) when the
  // step ended there (fail-fast cut it short at a non-finite value), else None.
  py::object begin(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& micro) {
    if (started_) throw std::logic_error("the watch's step began twice: a step ends with finish()");
    started_ = true;
    t0_ = std::chrono::steady_clock::now();
    std::vector<Batch> batches;
    for (const auto& [inputs, targets] : micro) {
      Batch b;
      b.inputs = inputs;
      b.targets = targets;
      b.step = b.batch = steps_->next_step();
      batches.push_back(std::move(b));
    }
    return stage([&] { steps_->begin(batches); });
  }
  py::object tap(const std::string& name, const torch::Tensor& t) {
    return stage([&] { steps_->monitor().on_tap(interned(name), t); });
  }
  // A micro-batch's taps in one call: (name, tensor, its max |x| when taken as it
  // was made, a CPU tensor read while hot; else None).
  py::object taps(const std::vector<std::tuple<std::string, torch::Tensor, std::optional<double>>>& taps) {
    return stage([&] {
      for (const auto& [name, t, max_abs] : taps) {
        if (max_abs) steps_->monitor().on_tap_max(interned(name), t, *max_abs);
        else steps_->monitor().on_tap(interned(name), t);
      }
    });
  }
  py::object forward(const torch::Tensor& outputs, const torch::Tensor& loss) {
    return stage([&] {
      steps_->monitor().after_forward(outputs);
      steps_->monitor().after_loss(loss.detach());
    });
  }
  py::object after_backward() {
    return stage([&] { steps_->monitor().after_backward(); });
  }
  py::object finish() {
    if (!started_) throw std::logic_error("the watch's step finished before it began");
    started_ = false;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    return record_of(steps_->finish(ms));
  }
  // The begun step did not happen (the framework skipped its batch).
  void abandon() {
    if (!started_) return;
    started_ = false;
    steps_->abandon();
  }
  bool over() const { return steps_->over(); }
  // The loop raised: the burst ends crashed, with the exception's text (and the stage, "" when unknown).
  void crashed(const std::string& message, const std::string& stage) {
    Verdict& v = steps_->result().verdict;
    v.outcome = Outcome::kCrashed;
    v.message = message;
    v.crash_stage = stage;
  }
  int64_t next_step() const { return steps_->next_step(); }

  // Ends the burst and writes the folder: trace.jsonl, verdict.json and the checkpoints.
  // On ranks other than 0: records, writes nothing, returns "".
  std::string close() {
    if (!path_.empty() || closed_) return path_;
    if (started_) finish();  // a step begun and never finished (the loop raised): recorded as it stands
    BurstResult& result = steps_->result();
    if (result.verdict.planned_steps == 0) result.verdict.planned_steps = result.verdict.steps_run;  // not known ahead
    result.verdict.wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - opened_).count();
    closed_ = true;
    text_ = verdict_text(result.verdict, result.trace);
    if (!dir_) return path_;
    writer_->close();
    nlohmann::json verdict = to_json(result.verdict);
    verdict["config_name"] = "watch";
    write_file_atomic(dir_->file("verdict.json"), verdict.dump(2) + "\n");
    auto save = [&](const std::optional<StateSnapshot>& s, const char* name, const char* meaning) {
      if (s) write_checkpoint(dir_->file(name), s->tensors, {{"spikehunt", kVersion}, {"step", std::to_string(s->step)}, {"state", meaning}});
    };
    save(result.last_healthy, "last_healthy.safetensors", "entering the onset step");
    save(result.first_bad, "first_bad.safetensors", "after the failure step");
    path_ = dir_->commit();
    return path_;
  }
  const std::string& text() const { return text_; }
  std::string verdict_json() const { return closed_ ? to_json(steps_->result().verdict).dump() : "{}"; }

 private:
  template <class F>
  py::object stage(F&& f) {
    if (!started_) throw std::logic_error("the watch's step has not begun");
    try {
      f();
    } catch (const Monitor::FailFast&) {
      return finish();
    }
    return py::none();
  }
  // What Watch.step() returns: a dict built here, not JSON parsed again each step.
  static py::object record_of(const StepRecord& r) {
    py::dict d;
    d["step"] = r.step;
    d["health"] = to_string(r.health);
    d["loss"] = r.loss;
    d["rules"] = r.rules;
    if (r.fault) d["fault"] = r.fault->describe();
    return std::move(d);
  }

  TrainingConfig config_;
  std::unique_ptr<LoopScenario> scenario_;
  std::unique_ptr<RunDirectory> dir_;
  std::unique_ptr<TraceWriter> writer_;
  std::optional<BurstSteps> steps_;
  std::chrono::steady_clock::time_point opened_ = std::chrono::steady_clock::now(), t0_;
  bool started_ = false, closed_ = false;
  std::string path_, text_;
};

}  // namespace

void add_watch(py::module_& m) {
  py::class_<Watch>(m, "Watch")
      .def(py::init<const py::object&, const py::list&, const std::string&, const std::vector<std::string>&, bool, bool,
                    int64_t, int64_t, int64_t, int64_t, const py::object&>())
      .def("begin", &Watch::begin)
      .def("tap", &Watch::tap)
      .def("taps", &Watch::taps)
      .def("forward", &Watch::forward)
      .def("after_backward", &Watch::after_backward)
      .def("finish", &Watch::finish)
      .def("abandon", &Watch::abandon)
      .def("crashed", &Watch::crashed)
      .def_property_readonly("over", &Watch::over)
      .def_property_readonly("next_step", &Watch::next_step)
      .def("close", &Watch::close)
      .def("text", &Watch::text)
      .def("verdict", &Watch::verdict_json);
}

}  // namespace spikehunt
