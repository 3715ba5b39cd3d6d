#include "base/files.h"

#include <filesystem>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <sys/stat.h>
#include <vector>

#include "base/error.h"

namespace spikehunt {

std::string read_file(const std::string& path, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw InputError(path, "", "", std::string("cannot be read: ") + std::strerror(errno),
                     "check the path");
  }
  if (S_ISDIR(st.st_mode)) {
    throw InputError(path, "", "", "is a directory, not a file");
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

nlohmann::json read_json_file(const std::string& path, const std::string& hint, uint64_t max_bytes) {
  const std::string text = read_file(path, max_bytes);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 3, ..."
    const size_t close = what.find("] ");
    if (close != std::string::npos) what = what.substr(close + 2);
    throw InputError(path, "", "", "is not valid JSON: " + what, hint);
  }
}

void write_file_atomic(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  }
  const bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size() &&
                  std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(ok ? errno : err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rerr = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(rerr));
  }
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
