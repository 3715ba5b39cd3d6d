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
//     file, the method and what it must return.#include <torch/extension.h>

#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/error.h"
#include "base/program.h"
#include "cli/cli.h"
#include "harness/burst.h"
#include "harness/record.h"
#include "harness/report.h"
#include "harness/trace.h"
#include "scenarios/registry.h"
#include "spikehunt/version.h"
#include "py_common.h"
#include "py_training.h"

namespace spikehunt {

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

thread_local const Tap* current_tap = nullptr;
c10::WarningHandler* python_base_handler = nullptr;

const char* interned(const std::string& name) {
  static std::mutex mutex;
  static std::unordered_set<std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  return names.insert(name).first->c_str();
}

namespace {

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
    register_scenario(name, [type, file](const TrainingConfig& c) { return make_python_scenario(c, type, file); },
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
