// error.h — the one error type for bad input: file, field, value, what is
// wrong, and a hint; and the CLI's exit codes. The CLI prints it and exits 2.
// Example:
//   throw InputError("configs/sweep.json", "optimizer.lr", "-0.05",
//                    "is not in (0, 10]", "learning rates are positive");
// prints
//   error: configs/sweep.json: optimizer.lr = -0.05 is not in (0, 10]
//   hint: learning rates are positive
// One InputError may carry several problems (validate() reports every bad
// field at once).
#pragma once

#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace spikehunt {

struct Problem {
  Problem() = default;
  Problem(std::string field_, std::string value_, std::string message_, std::string hint_ = "", std::string file_ = "")
      : field(std::move(field_)), value(std::move(value_)), message(std::move(message_)), hint(std::move(hint_)),
        file(std::move(file_)) {}
  std::string field;    // dotted path, e.g. "optimizer.lr"; empty: the whole file
  std::string value;    // the offending value as written; empty when none
  std::string message;  // what is wrong, e.g. "is not in (0, 10]"
  std::string hint;     // what to try; may be empty
  std::string file;     // where it came from, when not the error's file (e.g. "--set")
};

class InputError : public std::exception {
 public:
  InputError(std::string file, std::vector<Problem> problems);
  InputError(std::string file, std::string field, std::string value,
             std::string message, std::string hint = "");

  const std::string& file() const { return file_; }
  const std::vector<Problem>& problems() const { return problems_; }
  // Every problem as "error: FILE: FIELD = VALUE MESSAGE\nhint: HINT" lines.
  const char* what() const noexcept override { return text_.c_str(); }

 private:
  std::string file_;
  std::vector<Problem> problems_;
  std::string text_;
};

// `problems` with their own files cleared, to be reported as those of the
// input that brought them (a --set override inside a --vary, say).
// e said of `file`, each field under `prefix`: a check that knew only the
// config ("config") said of the file the config came from (a repro's
// fields are under "config.").
InputError refiled(const InputError& e, const std::string& file, const std::string& prefix = "");
std::vector<Problem> unfiled(std::vector<Problem> problems);

// What to do when a system call on an output failed with `err` (errno): a
// full disk, a read-only one, a missing permission, a failing disk; "" for
// others. For the "hint:" line of the machine's errors (exit 3).
std::string system_error_hint(int err);

// The CLI's exit codes.
constexpr int kExitOk = 0;        // ran, nothing found
constexpr int kExitFinding = 1;   // ran, and the burst (or check) failed
constexpr int kExitBadInput = 2;  // bad config, file or flag
constexpr int kExitInternal = 3;  // spikehunt's own error (a bug, or the machine: disk, memory)

// A bad flag of a verb, in the form of config errors:
//   error: spikehunt sweep: --runs = 0 must be at least 1
//   hint: ...
InputError flag_error(const std::string& verb, const std::string& flag, const std::string& value,
                      const std::string& message, const std::string& hint = "");

}  // namespace spikehunt
