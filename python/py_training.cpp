// py_training.cpp — a Python model and its optimizers as C++ sees them: the
// nn.Module's tensors as a tree of C++ modules named as PyTorch names them
// (ShellModule, shell_of), each torch.optim optimizer as a ForeignOptimizer
// over the same param groups (PyOptimizer), and PyTraining, which holds both
// for a Python scenario and a Watch.
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
#include "scenarios/scenario.h"

namespace spikehunt {

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
void PyTraining::mirror_mode() { model->mirror_mode(); }

}  // namespace spikehunt
