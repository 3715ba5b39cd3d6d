#include "harness/training_error.h"

#include <cxxabi.h>

#include <regex>
#include <sstream>

#include <torch/torch.h>

#include "harness/monitor.h"

namespace spikehunt {

TrainingError::TrainingError(std::string stage, std::string message, std::string cause, std::string full)
    : std::runtime_error("the training code threw in the " + stage + " stage: " + message),
      stage_(std::move(stage)),
      message_(std::move(message)),
      cause_(std::move(cause)),
      full_(std::move(full)) {}

namespace {

// The lines worth reading: no LibTorch source locations or backtrace frames.
std::string readable(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  int lines = 0;
  for (std::string line; std::getline(in, line) && lines < 4;) {
    if (line.empty() || line.rfind("Exception raised from", 0) == 0 || line.rfind("frame #", 0) == 0) continue;
    out += (out.empty() ? "" : " ") + line;
    ++lines;
  }
  return out.empty() ? text : out;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

}  // namespace

std::string explain_error(const std::string& stage, const std::string& m, const ErrorContext& c) {
  std::smatch x;
  const bool have_output = c.output_shape.size() == 2;
  const bool have_labels = c.label_max >= c.label_min;
  if (std::regex_search(m, x, std::regex(R"(Target (-?\d+) is out of bounds)"))) {
    const std::string label = x[1];
    if (label.front() == '-') return "a label is " + label + ": class ids start at 0";
    if (have_output) {
      return "the output has " + std::to_string(c.output_shape[1]) + " classes but a label is " + label +
             (have_labels ? " (this batch's labels are " + std::to_string(c.label_min) + ".." +
                                std::to_string(c.label_max) + ")" : "") +
             ": the output layer needs one unit per class";
    }
    return "a label (" + label + ") is not below the number of outputs: the output layer needs one unit per class";
  }
  if (std::regex_search(m, x, std::regex(R"(mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\))"))) {
    return "a linear layer expects " + std::string(x[3]) + " input features but gets " + std::string(x[2]) +
           ": its in_features does not match the tensor fed to it (a wrong flatten size, or the input shape changed)";
  }
  if (std::regex_search(m, x, std::regex(R"(Expected input batch_size \((\d+)\) to match target batch_size \((\d+)\))"))) {
    return "the output has " + std::string(x[1]) + " rows but the batch has " + std::string(x[2]) +
           " labels: a view or flatten mixes the batch dimension with the others";
  }
  if (std::regex_search(m, x, std::regex(R"(expected scalar type Long but found (\w+))")) ||
      std::regex_search(m, x, std::regex(R"(scalar type Long but got scalar type (\w+))"))) {
    return "the labels reach the loss as " + std::string(x[1]) +
           ", not as int64 class ids: cross-entropy takes (B) torch::kLong targets (.to(torch::kLong))";
  }
  if (m.find("multi-target not supported") != std::string::npos ||
      m.find("1D target tensor expected") != std::string::npos) {
    return "the labels have more than one dimension: cross-entropy takes (B) class ids, not one-hot (B, C) rows";
  }
  if (m.find("does not require grad and does not have a grad_fn") != std::string::npos) {
    return "the loss depends on no trainable tensor: a detach(), a NoGradGuard or requires_grad(false) cuts it off "
           "from the parameters";
  }
  if (std::regex_search(m, x, std::regex(R"(a Tensor with (\d+) elements cannot be converted to Scalar)")) ||
      m.find("grad can be implicitly created only for scalar outputs") != std::string::npos) {
    return "the loss is " + (x.empty() ? std::string("not one number") : std::string(x[1]) + " numbers, not one") +
           ": reduce it to one (a mean or a sum; reduction='none' keeps one loss per sample)";
  }
  if (m.find("backward through the graph a second time") != std::string::npos) {
    return "a tensor from an earlier step's graph is used again (a hidden state or running value kept across "
           "steps): detach() it between steps";
  }
  if (m.find("modified by an inplace operation") != std::string::npos) {
    return "an in-place operation (relu_, +=, clamp_, ...) changed a tensor autograd still needs: use the "
           "out-of-place form";
  }
  if (std::regex_search(m, x, std::regex(R"(The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+))"))) {
    return "two tensors do not line up: " + std::string(x[1]) + " against " + std::string(x[2]) + " at dimension " +
           std::string(x[3]) + (stage == "loss" && have_output ? " (the output is " + shape_text(c.output_shape) + ")" : "");
  }
  if (m.find("is invalid for input of size") != std::string::npos) {
    return "a view or reshape does not fit the tensor's number of elements (a wrong flatten size?)";
  }
  if (m.find("Expected all tensors to be on the same device") != std::string::npos) {
    return "tensors on different devices: move the model and every batch to the scenario's device()";
  }
  if (m.find("index out of range in self") != std::string::npos) {
    return "an index is beyond an embedding's size (a token or class id too large for the table)";
  }
  if (m.find("out of memory") != std::string::npos) {
    return "out of memory: a smaller batch_size or model";
  }
  return "";
}

ErrorContext batch_context(const at::Tensor& inputs, const at::Tensor& targets) {
  ErrorContext c;
  if (inputs.defined()) c.input_shape = inputs.sizes().vec();
  if (!targets.defined()) return c;
  c.target_dtype = c10::toString(targets.scalar_type());
  if (targets.numel() > 0 && !targets.is_floating_point() && targets.scalar_type() != torch::kBool) {
    const torch::Tensor y = targets.to(torch::kCPU);
    c.label_min = y.min().item<int64_t>();
    c.label_max = y.max().item<int64_t>();
  }
  return c;
}

std::string thrown_text() {
  try {
    throw;
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (const Monitor::FailFast&) {  // --fail-fast stopping the step from a tap: not the scenario's error
    throw;
  } catch (const char* text) {
    return std::string("a C string was thrown: ") + (text == nullptr ? "(null)" : text);
  } catch (const std::string& text) {
    return "a std::string was thrown: " + text;
  } catch (...) {
    return "a value of a type not derived from std::exception was thrown (throw 42; or a library's own error type)";
  }
}

TrainingError training_error(const std::string& stage, const std::exception& e, const ErrorContext& context) {
  std::string full = e.what();
  std::string message;
  if (const auto* foreign = dynamic_cast<const ForeignError*>(&e)) {
    full = foreign->traceback();
    message = e.what();
  } else if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) message = readable(c10->what_without_backtrace());
  else message = readable(full);
  std::string cause = explain_error(stage, message, context);
  return TrainingError(stage, std::move(message), std::move(cause), std::move(full));
}

}  // namespace spikehunt
