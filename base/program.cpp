#include "base/program.h"

#include <limits.h>
#include <unistd.h>

#include <stdexcept>

namespace spikehunt {

std::string self_executable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  return std::string(buf, size_t(n));
}

namespace {

struct Self {
  std::string invoked_as;
  std::vector<std::string> command;  // empty: {self_executable()}
  std::vector<std::string> build_files;
};

Self& self() {
  static Self s;
  return s;
}

}  // namespace

void set_invoked_as(const std::string& argv0) { self().invoked_as = argv0; }

std::string program_name() {
  if (!self().invoked_as.empty()) return self().invoked_as;
  const std::string path = self_executable();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::vector<std::string> self_command() {
  if (self().command.empty()) return {self_executable()};
  return self().command;
}

void set_self_command(std::vector<std::string> command, std::vector<std::string> build_files) {
  self().command = std::move(command);
  self().build_files = std::move(build_files);
}

std::vector<std::string> command_of(const std::string& program) {
  if (program == self_executable()) return self_command();
  return {program};
}

namespace {
std::string& loaded() {
  static std::string id;
  return id;
}
}  // namespace

void set_loaded_build(std::string id) { loaded() = std::move(id); }
const std::string& loaded_build() { return loaded(); }

std::vector<std::string> build_files_of(const std::string& program) {
  std::vector<std::string> files = {program};
  if (program == self_executable()) files.insert(files.end(), self().build_files.begin(), self().build_files.end());
  return files;
}

}  // namespace spikehunt
