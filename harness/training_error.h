// training_error.h — an exception thrown by a scenario's code (or by LibTorch
// on its behalf) while the harness builds or trains it: the stage that threw
// (setup, data, forward, loss, backward, optimizer_step), the message without
// LibTorch's backtrace, and what it most likely means ("the output has 5
// classes but a label is 8"). A crashed burst's verdict and the doctor's
// training_code_error sign are made of it; it is a finding, not an internal
// error.
// Example:
//   try { ... } catch (const std::exception& e) { throw training_error("loss", e, context); }
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"

namespace at {
class Tensor;
}

namespace spikehunt {

// An error from training code in another language (a Python exception):
// what() is its summary ("ValueError: no batch (train.py:42 in next_batch)"),
// traceback() all it said (the interpreter's traceback), shown with --verbose.
class ForeignError : public std::runtime_error {
 public:
  ForeignError(const std::string& summary, std::string traceback)
      : std::runtime_error(summary), traceback_(std::move(traceback)) {}
  const std::string& traceback() const { return traceback_; }

 private:
  std::string traceback_;
};

// What the harness knew when the code threw.
struct ErrorContext {
  std::vector<int64_t> input_shape;   // of the batch being trained (empty: none yet)
  std::vector<int64_t> output_shape;  // of the last forward's output (empty: none yet)
  std::string target_dtype;           // e.g. "Long", "Float"
  int64_t label_min = 0, label_max = -1;  // of the batch's targets (max < min: unknown)
};

// What a batch tells: its input shape, its labels' type and range.
ErrorContext batch_context(const at::Tensor& inputs, const at::Tensor& targets);

class TrainingError : public std::runtime_error {
 public:
  TrainingError(std::string stage, std::string message, std::string cause, std::string full);
  const std::string& stage() const { return stage_; }
  const std::string& message() const { return message_; }  // a few lines, no backtrace
  const std::string& cause() const { return cause_; }      // "" when spikehunt cannot tell
  const std::string& full() const { return full_; }        // everything the exception said

 private:
  std::string stage_, message_, cause_, full_;
};

// The error for exception `e` thrown in `stage`.
TrainingError training_error(const std::string& stage, const std::exception& e, const ErrorContext& context);

// What a thrown value not derived from std::exception says, read inside a
// catch (...): the text of a thrown C string or std::string, else that it
// was of another type. What is not an error passes on: a thread's forced
// unwind, and the monitor's FailFast (--fail-fast stopping a step).
std::string thrown_text();

// Runs f, the scenario's code: bad input (InputError) and a TrainingError
// pass through, any other exception (of any type) becomes a TrainingError of `stage`, read
// when it is thrown (so f may move it on) with `context` as it is then.
template <class F>
auto in_training_code(const char* const& stage, const ErrorContext& context, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const InputError&) {
    throw;
  } catch (const TrainingError&) {
    throw;
  } catch (const std::exception& e) {
    throw training_error(stage, e, context);
  } catch (...) {  // `throw 42;`, `throw "text";`: still the scenario's, not spikehunt's
    throw training_error(stage, std::runtime_error(thrown_text()), context);
  }
}

// What a LibTorch (or other) error message means, "" when spikehunt does not know it.
std::string explain_error(const std::string& stage, const std::string& message, const ErrorContext& context);

}  // namespace spikehunt
