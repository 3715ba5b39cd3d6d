#include "base/error.h"

#include <utility>

#include "base/program.h"

namespace spikehunt {

namespace {

std::string format(const std::string& file, const std::vector<Problem>& problems) {
  std::string text;
  for (const Problem& p : problems) {
    if (!text.empty()) text += '\n';
    const std::string& from = p.file.empty() ? file : p.file;
    text += "error: " + (from.empty() ? std::string("<input>") : from) + ": ";
    if (!p.field.empty()) {
      text += p.field;
      if (!p.value.empty()) text += " = " + p.value;
      text += ' ';
    }
    text += p.message;
    if (!p.hint.empty()) text += "\nhint: " + p.hint;
  }
  return text;
}

}  // namespace

InputError::InputError(std::string file, std::vector<Problem> problems)
    : file_(std::move(file)), problems_(std::move(problems)) {
  text_ = format(file_, problems_);
}

InputError::InputError(std::string file, std::string field, std::string value,
                       std::string message, std::string hint)
    : InputError(std::move(file), std::vector<Problem>{{std::move(field), std::move(value),
                                                        std::move(message), std::move(hint)}}) {}

std::vector<Problem> unfiled(std::vector<Problem> problems) {
  for (Problem& p : problems) p.file.clear();
  return problems;
}

InputError flag_error(const std::string& verb, const std::string& flag, const std::string& value,
                      const std::string& message, const std::string& hint) {
  return InputError(program_name() + " " + verb, flag, value, message, hint);
}

}  // namespace spikehunt
