#include "base/files.h"

#include <filesystem>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <sys/stat.h>
#include <vector>

#include "base/error.h"

namespace spikehunt {

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a file";
}

}  // namespace

std::string read_file(const std::string& path, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw InputError(path, "", "", std::string("cannot be read: ") + std::strerror(errno),
                     "check the path");
  }
  if (S_ISDIR(st.st_mode)) {
    throw InputError(path, "", "", "is a directory, not a file");
  }
  if (!S_ISREG(st.st_mode)) {  // a FIFO would block the open for ever
    throw InputError(path, "", "", std::string("is not a regular file (") + file_kind(st.st_mode) + ")",
                     "give the path of a file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    throw InputError(path, "", "",
                     "is " + std::to_string(st.st_size) + " bytes, more than the " +
                         std::to_string(max_bytes) + " bytes allowed");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError(path, "", "", std::string("cannot be opened: ") + std::strerror(errno));
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  if (in.gcount() != static_cast<std::streamsize>(data.size())) {
    throw InputError(path, "", "", "could not be read completely");
  }
  return data;
}

namespace {

// Follows the parse to name where it stopped: the dotted path of the value
// being read ("optimizer.lr", "dimensions.optimizer.lr.set[2]").
class PathTracker : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string path() const {
    std::string p;
    for (const Frame& f : frames_) {
      if (f.array) p += "[" + std::to_string(f.count) + "]";
      else if (!f.key.empty() || !p.empty()) p += (p.empty() ? "" : ".") + f.key;
    }
    return p;
  }
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    frames_.push_back({false, 0, ""});
    return true;
  }
  bool key(string_t& k) override {
    frames_.back().key = k;
    if (!frames_.back().keys.insert(k).second) {  // JSON keeps the last silently: a key twice is an edit gone wrong
      duplicate_ = path();
      return false;
    }
    return true;
  }
  const std::string& duplicate() const { return duplicate_; }  // the path of a key given twice, or ""

  bool end_object() override { return close(); }
  bool start_array(std::size_t) override {
    frames_.push_back({true, 0, ""});
    return true;
  }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  struct Frame {
    bool array;
    size_t count;  // elements done, for an array
    std::string key;
    std::set<std::string> keys = {};  // an object's keys so far
  };
  bool value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().count;
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value();
  }
  std::vector<Frame> frames_;
  std::string duplicate_;
};

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& path, const std::string& hint) {
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (text.size() <= (size_t{16} << 20)) {  // configs, spaces, suites, rules: a second, key-only pass
      PathTracker tracker;
      nlohmann::json::sax_parse(text, &tracker);
      if (!tracker.duplicate().empty()) {
        throw InputError(path, tracker.duplicate(), "", "is given twice in one object (JSON would keep the last alone)",
                         "remove one of them");
      }
    }
    return j;
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 3, ..."
    const size_t close = what.find("] ");
    if (close != std::string::npos) what = what.substr(close + 2);
    throw InputError(path, "", "", "is not valid JSON: " + what, hint);
  } catch (const nlohmann::json::out_of_range& e) {  // 406: "number overflow parsing '1e999'"
    PathTracker tracker;
    nlohmann::json::sax_parse(text, &tracker);
    const std::string what = e.what();
    const size_t open = what.find('\''), end = what.rfind('\'');
    const std::string token = open != std::string::npos && end > open ? what.substr(open + 1, end - open - 1) : "";
    throw InputError(path, tracker.path(), token, "is a number beyond a double (whose magnitude is at most 1.8e308)",
                     "write a number a double holds, e.g. 1e300");
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& hint, uint64_t max_bytes) {
  return parse_json_text(read_file(path, max_bytes), path, hint);
}

void write_file_atomic(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  // "PATH: cannot write: No space left on device" and, below, what to do.
  const auto failure = [&](const std::string& what, int err) {
    const std::string hint = system_error_hint(err);
    return std::runtime_error(path + ": cannot " + what + ": " + std::strerror(err) + (hint.empty() ? "" : "\nhint: " + hint));
  };
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw failure("write (" + tmp + ")", errno);
  const bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size() &&
                  std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    const int close_err = errno;
    std::remove(tmp.c_str());
    throw failure("write (" + tmp + ")", ok ? close_err : err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rerr = errno;
    std::remove(tmp.c_str());
    throw failure("rename " + tmp + " to it", rerr);
  }
}

int64_t remove_stale_temporaries(const std::string& dir) {
  int64_t removed = 0;
  std::error_code ec;
  for (const std::filesystem::directory_entry& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool partial = name.size() > 8 && name.compare(name.size() - 8, 8, ".partial") == 0;
    const size_t tmp = name.rfind(".tmp-");
    const bool temporary = tmp != std::string::npos && tmp + 5 < name.size() &&
                           name.find_first_not_of("0123456789", tmp + 5) == std::string::npos;
    std::error_code is_file_ec;
    if ((partial || temporary) && e.is_regular_file(is_file_ec)) removed += std::filesystem::remove(e.path(), ec);
  }
  return removed;
}

void remove_if_empty(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec) && std::filesystem::is_empty(dir, ec)) std::filesystem::remove(dir, ec);
}

std::string file_safe(std::string_view text) {
  std::string s;
  for (char ch : text) s += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') ? ch : '-';
  return s;
}

}  // namespace spikehunt
