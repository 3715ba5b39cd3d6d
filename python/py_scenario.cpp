// py_scenario.cpp — a user's Python Scenario subclass (python/spikehunt/
// _api.py) as a C++ Scenario (scenarios/scenario.h), so that every verb
// trains it: its methods called under the GIL, a Python exception a
// ForeignError naming the user's frame, a wrong return type an InputError
// naming the file, the method and what it must return.
#include <torch/extension.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "harness/training_error.h"
#include "py_common.h"
#include "py_training.h"
#include "scenarios/optimizers.h"
#include "scenarios/registry.h"
#include "scenarios/scenario.h"

namespace spikehunt {
namespace {

// ---- the scenario ----

class PyScenario : public Scenario {
 public:
  PyScenario(const TrainingConfig& config, PyObject* cls, std::string file) : file_(std::move(file)) {
    bind_config(config);
    py::gil_scoped_acquire gil;
    const py::handle type(cls);
    class_ = py::str(type.attr("__name__"));
    call("__init__", [&] {
      // Seeds from the config: LibTorch's (Python's torch shares it), random's, NumPy's if imported.
      torch::manual_seed(config.seed);
      py::module_::import("random").attr("seed")(config.seed);
      py::dict modules = py::module_::import("sys").attr("modules");
      if (modules.contains("numpy")) modules["numpy"].attr("random").attr("seed")(config.seed % (uint64_t(1) << 32));
      py::object values = py::module_::import("json").attr("loads")(config_to_json(config).dump());
      py::object package = py::module_::import("spikehunt._api");
      obj_ = PyRef(type(package.attr("Config")(values)));
      return 0;
    });
    py::object module = call("model", [&] { return obj_.get().attr("model")(); });
    if (!py::isinstance(module, py::module_::import("torch.nn").attr("Module"))) {
      throw wrong_return("model", module, "a torch.nn.Module");
    }
    if (!call("model", [&] { return obj_.get().attr("model")(); }).is(module)) {
      throw InputError(file_, class_ + ".model()", "", "returned another module on its second call: it must return "
                       "the same torch.nn.Module every call", "build the model once, in __init__, and return it");
    }
    module_ = PyRef(module);
    training_ = std::make_unique<PyTraining>(module);
    py::object opts = call("optimizers", [&] { return obj_.get().attr("optimizers")(); });
    const py::object optimizer_type = py::module_::import("torch.optim").attr("Optimizer");
    auto add = [&](const std::string& name, const py::handle o) {
      if (!py::isinstance(o, optimizer_type)) {
        throw wrong_return("optimizers", py::reinterpret_borrow<py::object>(o),
                           "a torch.optim.Optimizer or a dict {name: optimizer}");
      }
      training_->add(o, name);
    };
    if (py::isinstance<py::dict>(opts)) {
      for (const auto item : opts.cast<py::dict>()) add(py::str(item.first), item.second);
    } else if (py::isinstance<py::list>(opts) || py::isinstance<py::tuple>(opts)) {
      for (const py::handle o : opts) add("", o);
    } else {
      add("", opts);
    }
    if (training_->optimizers.empty()) throw wrong_return("optimizers", opts, "at least one torch.optim.Optimizer");
    hooks_ = PyRef(call("taps", [&] {
      return package().attr("_install_taps")(obj_.get(), module, file_);
    }));
    own_skip_ = py::hasattr(type, "skip_batches");  // the base class has neither
    own_clip_ = py::hasattr(type, "grad_clip");
    planned_ = integer_of(value_of("planned_steps"), "planned_steps");
    const py::object phases = value_of("phase_names");
    try {
      phases_ = phases.cast<std::vector<std::string>>();
    } catch (const py::cast_error&) {
      throw wrong_return("phase_names", phases, "a list of str");
    }
    classes_ = integer_of(value_of("num_classes"), "num_classes");
  }

  ~PyScenario() override {
    py::gil_scoped_acquire gil;
    training_.reset();
    hooks_ = PyRef();
    module_ = PyRef();
    obj_ = PyRef();
  }

  torch::nn::Module& model() override { return training_->module(); }
  torch::optim::Optimizer& optimizer() override { return training_->first(); }
  std::vector<NamedOptimizer> optimizers() override { return training_->named(); }

  torch::Tensor forward(const torch::Tensor& inputs, const Tap& tap) override {
    py::gil_scoped_acquire gil;
    struct Restore {  // also when forward throws
      PyScenario* self;
      const Tap* outer;
      ~Restore() {
        current_tap = outer;
        self->set_tapping(false);
      }
    } restore{this, current_tap};
    current_tap = &tap;
    set_tapping(tap.on());
    training_->mirror_mode();
    py::object out = call("forward", [&] { return with_warnings([&] { return obj_.get().attr("forward")(inputs); }); });
    return tensor_of(out, "forward", "a torch.Tensor of outputs");
  }

  torch::Tensor loss(const torch::Tensor& outputs, const torch::Tensor& targets) override {
    py::gil_scoped_acquire gil;
    py::object out = call("loss", [&] { return with_warnings([&] { return obj_.get().attr("loss")(outputs, targets); }); });
    return tensor_of(out, "loss", "a torch.Tensor holding one number");
  }

  std::optional<Batch> next_batch() override {
    py::gil_scoped_acquire gil;
    py::object b = call("next_batch", [&] { return obj_.get().attr("next_batch")(); });
    if (b.is_none()) return std::nullopt;
    Batch batch = batch_of(b, "next_batch");
    batch.step = step_++;
    return batch;
  }

  std::vector<Batch> heldout(int64_t max_samples) override {
    py::gil_scoped_acquire gil;
    py::object list = call("heldout", [&] { return obj_.get().attr("heldout")(max_samples); });
    std::vector<Batch> out;
    if (list.is_none()) return out;
    if (!py::hasattr(list, "__iter__") || THPVariable_Check(list.ptr())) {
      throw wrong_return("heldout", list, "a list (or any iterable, a DataLoader) of (inputs, targets)");
    }
    call("heldout", [&] {
      for (const py::handle b : list) out.push_back(batch_of(py::reinterpret_borrow<py::object>(b), "heldout"));
      return 0;
    });
    return out;
  }

  int64_t skip_batches(int64_t n) override {
    if (!own_skip_) return Scenario::skip_batches(n);
    py::gil_scoped_acquire gil;
    py::object skipped = call("skip_batches", [&] { return obj_.get().attr("skip_batches")(n); });
    if (!py::isinstance<py::int_>(skipped)) throw wrong_return("skip_batches", skipped, "an int (batches skipped)");
    step_ += skipped.cast<int64_t>();
    return skipped.cast<int64_t>();
  }

  int64_t planned_steps() const override { return planned_; }
  std::vector<std::string> phase_names() const override { return phases_; }
  int64_t num_classes() const override { return classes_; }
  // torch.nn.Module.named_modules() lists a shared module once: ask for every name it has.
  std::vector<std::vector<std::string>> shared_modules() override {
    py::gil_scoped_acquire gil;
    std::vector<std::vector<std::string>> groups;
    std::map<const PyObject*, size_t> seen;
    for (const py::handle item : module_.get().attr("named_modules")(py::arg("remove_duplicate") = false)) {
      const auto pair = item.cast<py::tuple>();
      const std::string name = pair[0].cast<std::string>();
      if (name.empty()) continue;
      const auto [it, fresh] = seen.emplace(pair[1].ptr(), groups.size());
      if (fresh) groups.push_back({});
      groups[it->second].push_back(name);
    }
    groups.erase(std::remove_if(groups.begin(), groups.end(), [](const auto& g) { return g.size() < 2; }), groups.end());
    return groups;
  }
  torch::Device device() const override { return training_->device; }

  // A scenario class with run_elsewhere() (spikehunt's command scenario) runs its burst in another process.
  std::string run_elsewhere() override {
    py::gil_scoped_acquire gil;
    if (!py::hasattr(obj_.get(), "run_elsewhere")) return "";
    return call("run_elsewhere", [&] { return obj_.get().attr("run_elsewhere")().cast<std::string>(); });
  }

  std::vector<std::string> reset_parameters() override {
    py::gil_scoped_acquire gil;
    return call("reset_parameters", [&] {
      return py::module_::import("spikehunt._doctor").attr("reset_parameters")(module_.get()).cast<std::vector<std::string>>();
    });
  }

  std::vector<ModuleOutput> module_outputs(const torch::Tensor& inputs) override {
    py::gil_scoped_acquire gil;
    training_->mirror_mode();
    const py::object forward = py::cpp_function([this](const torch::Tensor& x) {
      return obj_.get().attr("forward")(x);
    });
    const py::object rows = call("forward", [&] {
      return with_warnings([&] {
        return py::module_::import("spikehunt._doctor").attr("module_outputs")(module_.get(), forward, inputs);
      });
    });
    std::vector<ModuleOutput> out;
    for (const py::handle r : rows) {
      const auto t = r.cast<py::tuple>();
      ModuleOutput o;
      o.name = t[0].cast<std::string>();
      o.kind = t[1].cast<std::string>();
      o.inputs_finite = t[2].cast<bool>();
      o.numel = t[3].cast<int64_t>();
      o.non_finite = t[4].cast<int64_t>();
      o.rms = t[5].cast<double>();
      o.max_abs = t[6].cast<double>();
      o.input_rms = t[7].cast<double>();
      o.fan_in = t[8].cast<int64_t>();
      o.weight_std = t[9].cast<double>();
      o.nan = t[10].cast<int64_t>();
      o.pos_inf = t[11].cast<int64_t>();
      o.neg_inf = t[12].cast<int64_t>();
      out.push_back(std::move(o));
    }
    return out;
  }

  double grad_clip() const override {
    if (!own_clip_) return Scenario::grad_clip();
    py::gil_scoped_acquire gil;
    py::object v = const_cast<PyScenario*>(this)->call("grad_clip", [&] { return obj_.get().attr("grad_clip")(); });
    if (!py::isinstance<py::float_>(v) && !py::isinstance<py::int_>(v)) throw wrong_return("grad_clip", v, "a number");
    return v.cast<double>();
  }

  void optimizer_step() override {
    py::gil_scoped_acquire gil;
    call("optimizer_step", [&] { return obj_.get().attr("optimizer_step")(); });
  }

 private:
  static py::module_ package() { return py::module_::import("spikehunt._api"); }

  void set_tapping(bool on) {
    if (on == tapping_) return;
    package().attr("_tapping") = py::bool_(on);
    tapping_ = on;
  }

  template <class F>
  auto call(const char* method, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (py::error_already_set& e) {
      if (e.matches(package().attr("ContractError"))) {
        throw InputError(file_, class_ + "." + method + "()", "", py::str(e.value()).cast<std::string>());
      }
      throw python_error(e, file_);
    }
  }

  // A method's value, or an attribute's (num_classes = 4 as well as def num_classes(self)).
  py::object value_of(const char* name) {
    return call(name, [&] {
      py::object v = obj_.get().attr(name);
      return PyCallable_Check(v.ptr()) ? v() : v;
    });
  }

  // An int, or anything with __index__ (a NumPy integer); not a float.
  int64_t integer_of(const py::object& v, const char* method) const {
    if (py::isinstance<py::bool_>(v) || !py::hasattr(v, "__index__")) throw wrong_return(method, v, "an int");
    return py::int_(v.attr("__index__")()).cast<int64_t>();
  }

  InputError wrong_return(const std::string& method, const py::object& got, const std::string& expected) const {
    const bool empty = py::isinstance<py::list>(got) || py::isinstance<py::tuple>(got) ? py::len(got) == 0 : false;
    const std::string what = got.is_none() ? "None" : (empty ? "an empty " : "a ") + type_name(got);
    return InputError(file_, class_ + "." + method + "()", "", "returned " + what + ": it must return " + expected);
  }

  torch::Tensor tensor_of(const py::object& o, const char* method, const std::string& expected) const {
    if (!THPVariable_Check(o.ptr())) throw wrong_return(method, o, expected);
    return o.cast<torch::Tensor>();
  }

  Batch batch_of(const py::object& b, const char* method) const {
    Batch batch;
    const std::string expected = "(inputs, targets) of torch.Tensor, a spikehunt.Batch, or None at the end";
    if (py::isinstance(b, package().attr("Batch"))) {
      batch.inputs = tensor_of(b.attr("inputs"), method, expected);
      batch.targets = tensor_of(b.attr("targets"), method, expected);
      batch.phase = b.attr("phase").cast<int64_t>();
      batch.epoch = b.attr("epoch").cast<int64_t>();
      batch.batch = b.attr("batch").cast<int64_t>();
    } else if ((py::isinstance<py::tuple>(b) || py::isinstance<py::list>(b)) && py::len(b) == 2) {
      batch.inputs = tensor_of(b[py::int_(0)], method, expected);
      batch.targets = tensor_of(b[py::int_(1)], method, expected);
      batch.batch = step_;
    } else {
      throw wrong_return(method, b, expected);
    }
    return batch;
  }

  std::string file_, class_;
  PyRef obj_, module_, hooks_;
  std::unique_ptr<PyTraining> training_;
  int64_t planned_ = 0, classes_ = 10, step_ = 0;
  std::vector<std::string> phases_;
  bool own_skip_ = false, own_clip_ = false, tapping_ = false;
};

}  // namespace

std::unique_ptr<Scenario> make_python_scenario(const TrainingConfig& config, PyObject* cls, const std::string& file) {
  return std::make_unique<PyScenario>(config, cls, file);
}

}  // namespace spikehunt
