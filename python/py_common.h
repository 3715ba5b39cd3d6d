// py_common.h — what the binding's files share about Python objects: a
// reference C++ may copy or drop without the GIL, a Python exception as a
// ForeignError, an object's class name, the tap a monitored forward runs
// under, and Python's warnings counted while the doctor counts LibTorch's.
#pragma once

#include <torch/extension.h>

#include <string>

#include "harness/burst_steps.h"
#include "harness/training_error.h"

namespace spikehunt {

namespace py = pybind11;

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

inline std::string type_name(const py::handle& o) { return py::str(py::type::handle_of(o).attr("__name__")); }

// A Python exception as the harness reports errors: "ValueError: bad
// (train.py:42 in loss)", the frame the last one in `user_file` (else the
// last one outside torch and spikehunt), and the whole traceback.
ForeignError python_error(py::error_already_set& e, const std::string& user_file);

// The tap a monitored forward runs under (spikehunt.tap() calls it; binding.cpp).
extern thread_local const Tap* current_tap;

// While the doctor counts LibTorch's warnings it installs a c10 warning
// handler; the warnings the user's Python code raises (PyTorch's Python
// functions, such as mse_loss's "Using a target size ...", warn in Python)
// then go to that handler too, every time. Otherwise Python shows them as usual.
extern c10::WarningHandler* python_base_handler;  // the handler at import (binding.cpp)

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

}  // namespace spikehunt
