// py_training.h — what the binding's files share: the C++ side of a Python
// model and its optimizers (PyTraining, py_training.cpp), a Python scenario
// (py_scenario.cpp), the names taps are given (the monitor keeps their
// pointers), and the Watch's registration (watch.cpp).
#pragma once

#include <torch/extension.h>

#include <memory>
#include <string>
#include <vector>

#include "scenarios/scenario.h"

namespace spikehunt {

class ShellModule;  // the Python module's tensors as a tree of C++ modules
class PyOptimizer;  // a torch.optim optimizer as a ForeignOptimizer

// What a Python scenario and a Watch train: the model's shell, each optimizer
// by name (a list's are "optimizer", "optimizer1", ...), the model's device.
struct PyTraining {
  std::shared_ptr<ShellModule> model;
  std::vector<std::unique_ptr<PyOptimizer>> optimizers;
  std::vector<std::string> names;
  torch::Device device = torch::kCPU;

  explicit PyTraining(const pybind11::object& module);
  ~PyTraining();  // takes the GIL: the optimizers and the shell hold Python objects
  void add(const pybind11::handle& optimizer, std::string name = "");
  std::vector<NamedOptimizer> named() const;
  torch::nn::Module& module();       // *model
  torch::optim::Optimizer& first();  // the first optimizer
  // Takes the Python module's own mode (its `training`) onto the shell, without calling Python back. GIL held.
  void mirror_mode();
};

// A user's Python Scenario subclass `cls` (defined in `file`) as a C++ scenario of `config`.
std::unique_ptr<Scenario> make_python_scenario(const TrainingConfig& config, PyObject* cls, const std::string& file);

// The name's one copy for the process (the monitor may keep its pointer for the step).
const char* interned(const std::string& name);

// spikehunt._core.Watch (watch.cpp).
void add_watch(pybind11::module_& m);

}  // namespace spikehunt
