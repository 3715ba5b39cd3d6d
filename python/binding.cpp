// binding.cpp — spikehunt._core, the Python package's C++ side: a user's
// Python Scenario subclass (python/spikehunt/__init__.py) as a C++ Scenario
// (scenarios/scenario.h), so every verb trains it, and the command line.
//
// How Python code meets the C++ contract:
//   - model(): the Python nn.Module's parameters and buffers (the same
//     tensors, no copy: the module is built against the process's torch)
//     in a tree of C++ modules named as PyTorch names them ("fc1.weight"), so
//     the monitor and the checkpoints see them; train()/eval() on it switch
//     the Python module;
//   - optimizers(): each torch.optim optimizer as a ForeignOptimizer over the
//     same param groups, its lr read and set in the Python group, its state
//     read and written in optimizer.state;
//   - taps: forward hooks (python side) and spikehunt.tap() call tap() here;
//   - a Python exception is a ForeignError (harness/training_error.h): its
//     type, message and the last frame in the user's file; the traceback for
//     --verbose. A wrong return type is an InputError (exit 2) naming the
//     file, the method and what it must return.
// The GIL: cli_main runs without it; every call into Python takes it.
#include <torch/extension.h>

#include <chrono>
#include <mutex>
#include <cstdlib>
#include <map>
#include <set>
#include <unordered_set>

#include "base/error.h"
#include "base/program.h"
#include "cli/cli.h"
#include "base/files.h"
#include "harness/burst.h"
#include "harness/burst_steps.h"
#include "harness/checkpoint.h"
#include "harness/report.h"
#include "harness/results.h"
#include "harness/trace.h"
#include "harness/record.h"
#include "harness/training_error.h"
#include "scenarios/optimizers.h"
#include "scenarios/registry.h"
#include "scenarios/scenario.h"
#include "spikehunt/version.h"
#include "py_training.h"

namespace py = pybind11;

namespace spikehunt {
namespace {

// A Python object held by C++ objects that may be copied or destroyed
// without the GIL (options cloned by LibTorch, a scenario ending).
class PyRef {
 public:
  PyRef() = default;
  explicit PyRef(py::object o) : obj_(std::move(o)) {}
  PyRef(const PyRef& o) {
    py::gil_scoped_acquire gil;
    obj_ = o.obj_;
  }
  PyRef& operator=(const PyRef& o) {
    py::gil_scoped_acquire gil;
    obj_ = o.obj_;
    return *this;
  }
  ~PyRef() {
    if (!obj_ || !Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    obj_ = py::object();
  }
  const py::object& get() const { return obj_; }

 private:
  py::object obj_;
};

std::string type_name(const py::handle& o) { return py::str(py::type::handle_of(o).attr("__name__")); }

// A Python exception as the harness reports errors: "ValueError: bad
// (train.py:42 in loss)", the frame the last one in `user_file` (else the
// last one outside torch and spikehunt), and the whole traceback.
ForeignError python_error(py::error_already_set& e, const std::string& user_file) {
  py::gil_scoped_acquire gil;
  const std::string type = e.type() ? std::string(py::str(e.type().attr("__name__"))) : "Exception";
  const std::string message = e.value() ? std::string(py::str(e.value())) : "";
  std::string where, traceback;
  try {
    py::module_ tb = py::module_::import("traceback");
    py::list frames = tb.attr("extract_tb")(e.trace());
    std::string fallback;
    for (const py::handle f : frames) {
      const std::string file = py::str(f.attr("filename"));
      const std::string at = py::str(py::module_::import("os.path").attr("relpath")(file));
      const std::string text = at + ":" + std::string(py::str(f.attr("lineno"))) + " in " +
                               std::string(py::str(f.attr("name")));
      if (!user_file.empty() && at == user_file) where = text;
      if (file.find("/torch/") == std::string::npos && file.find("/spikehunt/") == std::string::npos) {
        fallback = text;
      }
    }
    if (where.empty()) where = fallback;
    py::list lines = tb.attr("format_exception")(e.type(), e.value(), e.trace());
    for (const py::handle l : lines) traceback += py::str(l);
  } catch (const py::error_already_set&) {
  }
  std::string summary = type + (message.empty() ? "" : ": " + message);
  if (!where.empty()) summary += " (" + where + ")";
  return ForeignError(summary, traceback.empty() ? summary : traceback);
}

// Tap: the one a monitored forward runs under, and the names it was given
// (the monitor may keep a name's pointer for the step).
thread_local const Tap* current_tap = nullptr;
}  // namespace

const char* interned(const std::string& name) {
  static std::mutex mutex;
  static std::unordered_set<std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  return names.insert(name).first->c_str();
}

namespace {

// While the doctor counts LibTorch's warnings it installs a c10 warning
// handler; the warnings the user's Python code raises (PyTorch's Python
// functions, such as mse_loss's "Using a target size ...", warn in Python)
// then go to that handler too, every time. Otherwise Python shows them as usual.
c10::WarningHandler* python_base_handler = nullptr;  // the handler at import

template <class F>
py::object with_warnings(F&& f) {
  c10::WarningHandler* handler = c10::WarningUtils::get_warning_handler();
  if (handler == python_base_handler || handler == nullptr) return f();
  py::module_ warnings = py::module_::import("warnings");
  py::object recorder = warnings.attr("catch_warnings")(py::arg("record") = true);
  py::list caught = recorder.attr("__enter__")();
  warnings.attr("simplefilter")("always");
  py::object out;
  try {
    out = f();
  } catch (...) {
    recorder.attr("__exit__")(py::none(), py::none(), py::none());
    throw;
  }
  recorder.attr("__exit__")(py::none(), py::none(), py::none());
  for (const py::handle w : caught) {
    handler->process(c10::Warning(c10::UserWarning{}, c10::SourceLocation{"python", "python", 0},
                                  std::string(py::str(w.attr("message"))), /*verbatim=*/false));
  }
  return out;
}

}  // namespace

// ---- the model ----

class ShellModule : public torch::nn::Module {
 public:
  explicit ShellModule(std::string name) : torch::nn::Module(std::move(name)) {}
  void set_python(py::object module) { python_ = PyRef(std::move(module)); }
  // Sets the Python module's mode (and with it its subtree's), then this
  // shell's subtree: a submodule's shell carries its own Python module, so
  // the doctor can put one (a Dropout) in eval mode and leave the rest.
  void train(bool on) override {
    if (python_.get() && !mirroring_ && !in_subtree_) {
      py::gil_scoped_acquire gil;
      python_.get().attr("train")(on);
    }
    const bool was = in_subtree_;
    in_subtree_ = true;  // the Python call above already set the subtree
    torch::nn::Module::train(on);
    in_subtree_ = was;
  }
  // Takes the Python module's own mode (its `training`, which the user's code
  // may have set with eval()) onto this shell, without calling Python back:
  // the doctor checks that the model trains in training mode. GIL held.
  void mirror_mode() {
    if (!python_.get()) return;
    const bool on = python_.get().attr("training").cast<bool>();
    if (on == is_training()) return;
    mirroring_ = true;
    torch::nn::Module::train(on);
    mirroring_ = false;
  }

 private:
  PyRef python_;
  static thread_local bool mirroring_;
  static thread_local bool in_subtree_;
};
thread_local bool ShellModule::mirroring_ = false;
thread_local bool ShellModule::in_subtree_ = false;

std::shared_ptr<ShellModule> shell_of(const py::object& module) {
  auto root = std::make_shared<ShellModule>(type_name(module));
  std::map<std::string, std::shared_ptr<ShellModule>> parents = {{"", root}};
  auto parent_of = [&](const std::string& path, std::string* leaf) {
    const size_t dot = path.rfind('.');
    *leaf = dot == std::string::npos ? path : path.substr(dot + 1);
    const std::string parent = dot == std::string::npos ? "" : path.substr(0, dot);
    std::shared_ptr<ShellModule> node = root;
    std::string at;
    size_t from = 0;
    while (from < parent.size()) {
      const size_t next = parent.find('.', from);
      const std::string part = parent.substr(from, next == std::string::npos ? std::string::npos : next - from);
      at = at.empty() ? part : at + "." + part;
      auto it = parents.find(at);
      if (it == parents.end()) {
        auto child = std::make_shared<ShellModule>(part);
        node->register_module(part, child);
        it = parents.emplace(at, child).first;
      }
      node = it->second;
      if (next == std::string::npos) break;
      from = next + 1;
    }
    return node;
  };
  // Every submodule, named by its class ("Dropout", "BatchNorm2d"), so that
  // the tree has the Python module's shape (the doctor finds mode-dependent
  // modules by class); parameters and buffers hang on their owners.
  for (const py::handle item : module.attr("named_modules")()) {
    const auto pair = item.cast<py::tuple>();
    const std::string path = pair[0].cast<std::string>();
    if (path.empty() || parents.count(path)) continue;
    std::string leaf;
    auto parent = parent_of(path, &leaf);
    auto child = std::make_shared<ShellModule>(type_name(pair[1]));
    child->set_python(py::reinterpret_borrow<py::object>(pair[1]));
    parent->register_module(leaf, child);
    parents.emplace(path, child);
  }
  for (const py::handle item : module.attr("named_parameters")()) {
    const auto pair = item.cast<py::tuple>();
    std::string leaf;
    auto node = parent_of(pair[0].cast<std::string>(), &leaf);
    const torch::Tensor p = pair[1].cast<torch::Tensor>();
    node->register_parameter(leaf, p, p.requires_grad());
  }
  for (const py::handle item : module.attr("named_buffers")()) {
    const auto pair = item.cast<py::tuple>();
    std::string leaf;
    auto node = parent_of(pair[0].cast<std::string>(), &leaf);
    const torch::Tensor b = pair[1].cast<torch::Tensor>();
    if (b.defined()) node->register_buffer(leaf, b);
  }
  root->set_python(module);
  return root;
}

// ---- the optimizers ----

class PyGroupOptions : public torch::optim::OptimizerCloneableOptions<PyGroupOptions> {
 public:
  explicit PyGroupOptions(py::object group) : group_(std::move(group)) {}
  double get_lr() const override {
    py::gil_scoped_acquire gil;
    return group_.get()["lr"].cast<double>();
  }
  void set_lr(const double lr) override {
    py::gil_scoped_acquire gil;
    group_.get()["lr"] = lr;
  }

 private:
  PyRef group_;
};

std::vector<torch::optim::OptimizerParamGroup> groups_of(const py::object& optimizer) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const py::handle g : optimizer.attr("param_groups")) {
    std::vector<torch::Tensor> params;
    for (const py::handle p : g["params"]) params.push_back(p.cast<torch::Tensor>());
    groups.emplace_back(std::move(params), std::make_unique<PyGroupOptions>(py::reinterpret_borrow<py::object>(g)));
  }
  return groups;
}

// The optimizer's defaults, a copy (torch.optim's `defaults`, else its first group's settings): LibTorch
// reads them when it adds a group (2.15 reads their learning rate), and must not change the Python ones.
py::dict defaults_of(const py::object& optimizer) {
  const py::object defaults = py::getattr(optimizer, "defaults", py::none());
  if (py::isinstance<py::dict>(defaults) && defaults.contains("lr")) return py::dict(defaults);
  const py::list groups(optimizer.attr("param_groups"));
  return groups.empty() ? py::dict() : py::dict(groups[0]);
}

// The per-parameter buffers of torch.optim's optimizers, in the order
// checkpoints list them; another optimizer's are the ones its state holds.
const std::map<std::string, std::vector<std::string>>& known_buffers() {
  static const std::map<std::string, std::vector<std::string>> known = {
      {"SGD", {"momentum_buffer"}},
      {"Adam", {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}},
      {"AdamW", {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}},
      {"NAdam", {"exp_avg", "exp_avg_sq", "mu_product"}},
      {"RAdam", {"exp_avg", "exp_avg_sq"}},
      {"Adamax", {"exp_avg", "exp_inf"}},
      {"RMSprop", {"square_avg", "momentum_buffer", "grad_avg"}},
      {"Adagrad", {"sum"}},
      {"Adadelta", {"square_avg", "acc_delta"}},
  };
  return known;
}

class PyOptimizer : public ForeignOptimizer {
 public:
  explicit PyOptimizer(py::object optimizer)
      : ForeignOptimizer(groups_of(optimizer), std::make_unique<PyGroupOptions>(defaults_of(optimizer))),
        optimizer_(optimizer),
        class_(type_name(optimizer)) {
    for (const py::handle g : optimizer.attr("param_groups")) {
      for (const py::handle p : g["params"]) {
        python_params_[p.cast<torch::Tensor>().unsafeGetTensorImpl()] = PyRef(py::reinterpret_borrow<py::object>(p));
      }
    }
  }

  torch::Tensor step(LossClosure closure = nullptr) override {
    py::gil_scoped_acquire gil;
    optimizer_.get().attr("step")();
    return {};
  }

  // Read twice a watched step (its statistics, the checkpoint entering the
  // next): through the dicts themselves, not Python calls, so it costs a
  // lookup a parameter.
  std::optional<ParamState> read_state(const torch::Tensor& param) override {
    py::gil_scoped_acquire gil;
    const py::object state = optimizer_.get().attr(state_key());
    if (!PyDict_Check(state.ptr())) return read_state_slowly(param, state);  // a mapping of another kind
    const py::object p = python_param(param);
    PyObject* found = PyDict_GetItemWithError(state.ptr(), p.ptr());  // no default made, as `in` makes none
    if (found == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      return std::nullopt;
    }
    if (!PyDict_Check(found)) return read_state_slowly(param, state);
    // The known buffers of this class in their order, then the other tensors the state holds in its own.
    const std::vector<std::string>* known = nullptr;
    if (const auto it = known_buffers().find(class_); it != known_buffers().end()) known = &it->second;
    std::vector<NamedTensor> known_found(known ? known->size() : 0), others;
    ParamState out;
    PyObject *key = nullptr, *value = nullptr;
    Py_ssize_t at = 0;
    while (PyDict_Next(found, &at, &key, &value)) {
      Py_ssize_t n = 0;
      const char* text = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &n) : nullptr;
      if (text == nullptr) {
        PyErr_Clear();
        return read_state_slowly(param, state);
      }
      const std::string_view name(text, size_t(n));
      if (name == "step") {  // a tensor is kept as one: reading it on a GPU would be a host sync a parameter
        if (THPVariable_Check(value)) out.step_tensor = THPVariable_Unpack(value).detach();
        else out.step = py::reinterpret_borrow<py::object>(value).cast<int64_t>();
        continue;
      }
      if (!THPVariable_Check(value)) continue;
      const torch::Tensor& t = THPVariable_Unpack(value);
      if (t.sizes() != param.sizes()) continue;
      const auto k = known ? std::find(known->begin(), known->end(), name) : std::vector<std::string>::const_iterator{};
      if (known && k != known->end()) known_found[size_t(k - known->begin())] = {std::string(name), t};
      else others.push_back({std::string(name), t});
    }
    for (NamedTensor& b : known_found) {
      if (b.tensor.defined()) out.buffers.push_back(std::move(b));
    }
    for (NamedTensor& b : others) out.buffers.push_back(std::move(b));
    if (out.buffers.empty()) return std::nullopt;
    return out;
  }

  void write_state(const torch::Tensor& param, const ParamState& state) override {
    py::gil_scoped_acquire gil;
    py::dict s;
    for (const NamedTensor& b : state.buffers) s[b.name.c_str()] = b.tensor;
    // torch.optim keeps its step counts as float32 tensors: on the CPU, or on the
    // parameter's device for its fused and capturable kernels (as its own
    // load_state_dict places them).
    if (state.step) {
      const py::dict defaults = optimizer_.get().attr("defaults");
      const bool on_device = (defaults.contains("fused") && py::bool_(defaults["fused"])) ||
                             (defaults.contains("capturable") && py::bool_(defaults["capturable"]));
      s["step"] = torch::tensor(double(*state.step), torch::dtype(torch::kFloat32)
                                                         .device(on_device ? param.device() : torch::kCPU));
    }
    optimizer_.get().attr("state")[python_param(param)] = s;
  }

  void clear_states() override {
    py::gil_scoped_acquire gil;
    optimizer_.get().attr("state").attr("clear")();
  }

  std::vector<std::string> buffer_names() override {
    py::gil_scoped_acquire gil;
    return buffer_names_locked(nullptr);
  }

  bool keeps_step() override {
    static const std::set<std::string> stepped = {"Adam", "AdamW", "NAdam", "RAdam", "Adamax", "RMSprop", "Adagrad", "Adadelta"};
    if (stepped.count(class_)) return true;
    py::gil_scoped_acquire gil;
    for (const py::handle s : optimizer_.get().attr("state").attr("values")()) {
      if (s.cast<py::dict>().contains("step")) return true;
    }
    return false;
  }

  const py::object& python() const { return optimizer_.get(); }

  std::string kind() const override { return class_; }

  // The group dict's numbers and booleans; betas as beta1 and beta2.
  std::map<std::string, double> settings(size_t group) override {
    py::gil_scoped_acquire gil;
    std::map<std::string, double> out;
    const py::list groups = optimizer_.get().attr("param_groups");
    if (group >= groups.size()) return out;
    for (const auto item : groups[group].cast<py::dict>()) {
      const std::string name = py::str(item.first);
      const py::handle v = item.second;
      if (py::isinstance<py::bool_>(v)) out[name] = v.cast<bool>() ? 1.0 : 0.0;
      else if (py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v)) out[name] = v.cast<double>();
      else if (THPVariable_Check(v.ptr()) && THPVariable_Unpack(v.ptr()).numel() == 1) out[name] = v.cast<torch::Tensor>().item<double>();
      else if (name == "betas" && py::isinstance<py::tuple>(v) && py::len(v) == 2) {
        out["beta1"] = v.cast<py::tuple>()[0].cast<double>();
        out["beta2"] = v.cast<py::tuple>()[1].cast<double>();
      }
    }
    return out;
  }

  bool set_setting(size_t group, const std::string& name, double value) override {
    py::gil_scoped_acquire gil;
    const py::list groups = optimizer_.get().attr("param_groups");
    if (group >= groups.size()) return false;
    py::dict g = groups[group].cast<py::dict>();
    if (!g.contains(name.c_str())) return false;
    g[name.c_str()] = value;
    return true;
  }

 private:
  static const py::str& state_key() {
    static const py::str* key = new py::str("state");  // never freed: no Python call at exit
    return *key;
  }

  // read_state through Python's own protocols, for a state that is not a dict of dicts.
  std::optional<ParamState> read_state_slowly(const torch::Tensor& param, const py::object& state) const {
    const py::object p = python_param(param);
    if (!py::bool_(state.attr("__contains__")(p))) return std::nullopt;
    const py::dict s = state[p];
    ParamState out;
    std::vector<std::string> order = buffer_names_locked(&s);
    for (const std::string& name : order) {
      if (!s.contains(name)) continue;
      const py::object v = s[name.c_str()];
      if (THPVariable_Check(v.ptr()) && v.cast<torch::Tensor>().sizes() == param.sizes()) {
        out.buffers.push_back({name, v.cast<torch::Tensor>()});
      }
    }
    if (s.contains("step")) {
      const py::object v = s["step"];
      if (THPVariable_Check(v.ptr())) out.step_tensor = v.cast<torch::Tensor>().detach();
      else out.step = v.cast<int64_t>();
    }
    if (out.buffers.empty()) return std::nullopt;
    return out;
  }

  py::object python_param(const torch::Tensor& param) const {
    const auto it = python_params_.find(param.unsafeGetTensorImpl());
    if (it == python_params_.end()) throw std::logic_error("a parameter this optimizer does not update");
    return it->second.get();
  }

  // The known buffers of this class, then any other tensor name the state holds.
  std::vector<std::string> buffer_names_locked(const py::dict* one) const {
    std::vector<std::string> names;
    if (const auto it = known_buffers().find(class_); it != known_buffers().end()) names = it->second;
    auto add = [&](const py::dict& s) {
      for (const auto item : s) {
        const std::string name = py::str(item.first);
        if (name != "step" && THPVariable_Check(item.second.ptr()) &&
            std::find(names.begin(), names.end(), name) == names.end()) {
          names.push_back(name);
        }
      }
    };
    if (one != nullptr) {
      add(*one);
    } else {
      for (const py::handle s : optimizer_.get().attr("state").attr("values")()) add(s.cast<py::dict>());
    }
    return names;
  }

  PyRef optimizer_;
  std::string class_;
  std::map<const void*, PyRef> python_params_;
};


PyTraining::PyTraining(const py::object& module) : model(shell_of(module)) {
  for (const auto& p : model->parameters()) {
    device = p.device();
    break;
  }
}

PyTraining::~PyTraining() {
  py::gil_scoped_acquire gil;
  optimizers.clear();
  model.reset();
}

void PyTraining::add(const py::handle& optimizer, std::string name) {
  if (name.empty()) name = optimizers.empty() ? "optimizer" : "optimizer" + std::to_string(optimizers.size());
  optimizers.push_back(std::make_unique<PyOptimizer>(py::reinterpret_borrow<py::object>(optimizer)));
  names.push_back(std::move(name));
}

std::vector<NamedOptimizer> PyTraining::named() const {
  std::vector<NamedOptimizer> out;
  for (size_t i = 0; i < optimizers.size(); ++i) out.push_back({names[i], optimizers[i].get()});
  return out;
}

torch::nn::Module& PyTraining::module() { return *model; }
torch::optim::Optimizer& PyTraining::first() { return *optimizers.front(); }

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

  torch::nn::Module& model() override { return *training_->model; }
  torch::optim::Optimizer& optimizer() override { return *training_->optimizers.front(); }
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
    training_->model->mirror_mode();
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
    training_->model->mirror_mode();
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

nlohmann::json json_of(const py::object& o) {
  return nlohmann::json::parse(py::module_::import("json").attr("dumps")(o).cast<std::string>());
}

}  // namespace
}  // namespace spikehunt

PYBIND11_MODULE(_core, m) {
  using namespace spikehunt;
  m.doc() = "spikehunt's C++ engine for Python scenarios (use the spikehunt package, not this module)";
  m.attr("kVersion") = kVersion;
  python_base_handler = c10::WarningUtils::get_warning_handler();

  py::class_<ParamSpec>(m, "ParamSpec")
      .def_static("number", &ParamSpec::number)
      .def_static("integer", &ParamSpec::integer)
      .def_static("boolean", &ParamSpec::boolean)
      .def_static("string", &ParamSpec::string)
      .def_static("list", [](std::string name, py::object default_value, std::string doc) {
        return ParamSpec::list(std::move(name), json_of(default_value), std::move(doc));
      })
      .def_property_readonly("name", [](const ParamSpec& p) { return p.name; })
      .def("__repr__", [](const ParamSpec& p) { return "ParamSpec(" + p.name + ")"; });

  m.def("register_scenario", [](const std::string& name, py::object cls, const std::string& file,
                                std::vector<ParamSpec> params) {
    const std::string class_name = py::str(cls.attr("__name__"));
    PyObject* type = cls.release().ptr();  // kept for the life of the process, as C++ makers are
    register_scenario(name, [type, file](const TrainingConfig& c) { return std::make_unique<PyScenario>(c, type, file); },
                      std::move(params));
    set_python_scenario(name, class_name, file);
  });

  // One burst in this process: the config (a file, or the built-in default)
  // with overrides; the verdict as JSON with the losses of every step.
  m.def("run_config", [](const std::string& config_file, const std::vector<std::string>& overrides, bool monitor,
                         bool fail_fast) {
    const TrainingConfig config = config_file.empty() ? default_config(overrides) : load_config(config_file, overrides);
    BurstOptions options;
    options.monitor = monitor;
    options.fail_fast = fail_fast;
    nlohmann::json out;
    {
      py::gil_scoped_release release;
      const BurstResult r = run_config(config, options);
      out = to_json(r.verdict);
      nlohmann::json losses = nlohmann::json::array();
      for (const StepRecord& s : r.trace.recent()) losses.push_back(s.loss);
      out["losses"] = losses;
      nlohmann::json hashes = nlohmann::json::array();
      for (const StepHashes& h : r.step_hashes) hashes.push_back(h.input.hex());
      out["input_hashes"] = hashes;
    }
    return out.dump();
  });

  add_watch(m);

  static py::exception<InputError> input_error(m, "InputError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InputError& e) {
      PyErr_SetString(input_error.ptr(), e.what());
    }
  });

  // max |x| of a CPU tensor now (the monitor's own kernel; NaN if any NaN).
  m.def("max_abs", [](const torch::Tensor& t) {
    torch::NoGradGuard no_grad;
    return max_abs_stat(t).item<double>();
  });

  m.def("tap", [](const std::string& name, const torch::Tensor& t) {
    if (current_tap != nullptr) (*current_tap)(interned(name), t);
  });

  m.def("cli_main", [](std::vector<std::string> argv, std::vector<std::string> command,
                       std::vector<std::string> build_files) {
    set_self_command(std::move(command), std::move(build_files));
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    py::gil_scoped_release release;
    return cli_main(int(argv.size()), args.data());
  });
}
