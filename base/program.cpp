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

std::string& invoked_as() {
  static std::string name;
  return name;
}

}  // namespace

void set_invoked_as(const std::string& argv0) { invoked_as() = argv0; }

std::string program_name() {
  if (!invoked_as().empty()) return invoked_as();
  const std::string path = self_executable();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace spikehunt
