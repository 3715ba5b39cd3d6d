#include "base/error.h"

#include <cerrno>
#include <utility>

#include "base/program.h"

namespace spikehunt {

namespace {

// s with control characters and bytes that are not UTF-8 written \xHH: a
// value read from a damaged or hostile file cannot move the terminal's
// cursor, ring its bell or split the error into lines.
std::string shown(const std::string& s) {
  std::string out;
  auto hex = [&](unsigned char c) {
    static const char* digits = "0123456789abcdef";
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
  };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) hex(c);
      else out += char(c);
      ++i;
      continue;
    }
    // a UTF-8 sequence: its length from the lead byte, then continuation bytes
    const size_t n = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    bool ok = n != 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      hex(c);
      ++i;
    }
  }
  return out;
}

std::string format(const std::string& file, const std::vector<Problem>& problems) {
  std::string text;
  for (const Problem& p : problems) {
    if (!text.empty()) text += '\n';
    const std::string& from = p.file.empty() ? file : p.file;
    text += "error: " + (from.empty() ? std::string("<input>") : from) + ": ";
    if (!p.field.empty()) {
      text += shown(p.field);
      if (!p.value.empty()) text += " = " + shown(p.value);
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

InputError refiled(const InputError& e, const std::string& file, const std::string& prefix) {
  std::vector<Problem> problems = e.problems();
  for (Problem& p : problems) {
    if (!p.field.empty()) p.field = prefix + p.field;
    p.file.clear();
  }
  return InputError(file, std::move(problems));
}

std::vector<Problem> unfiled(std::vector<Problem> problems) {
  for (Problem& p : problems) p.file.clear();
  return problems;
}

std::string system_error_hint(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return "the disk (or your quota) is full: free space (df -h) and run the same command again; what was committed "
             "before is kept";
    case EROFS:
      return "the filesystem is read-only: give an output on a writable disk";
    case EACCES:
    case EPERM:
      return "no permission to write there: give an output you may write, or fix its permissions (ls -ld)";
    case EIO:
      return "the disk failed a read or write: check it (dmesg) and run the same command again";
    default:
      return "";
  }
}

InputError flag_error(const std::string& verb, const std::string& flag, const std::string& value,
                      const std::string& message, const std::string& hint) {
  return InputError(program_name() + " " + verb, flag, value, message, hint);
}

}  // namespace spikehunt
