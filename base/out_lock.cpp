#include "base/out_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include "base/error.h"

namespace spikehunt {

namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

// What the holder wrote in the lock file ("sweep, pid 123 on host n1, since ..."),
// or what F_GETLK says of it when it has not written yet.
std::string holder_of(int fd) {
  std::string text(512, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? size_t(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  if (!text.empty()) return text;
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  if (::fcntl(fd, F_GETLK, &l) == 0 && l.l_type != F_UNLCK && l.l_pid > 0) return "pid " + std::to_string(l.l_pid);
  return "a process that has not said which yet";
}

[[noreturn]] void fail(const std::string& out, const std::string& what) {
  const int err = errno;
  const std::string hint = system_error_hint(err);
  throw std::runtime_error(out + ": cannot take the writer's lock: " + what + ": " + std::strerror(err) +
                           (hint.empty() ? "" : "\nhint: " + hint));
}

}  // namespace

OutLock OutLock::folder(const std::string& dir, const std::string& verb) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec == std::errc::not_a_directory) {  // a file on the way: the user's
    throw InputError(dir, "", "", "is inside a file, not a folder", "give a folder as the output");
  }
  if (ec && !fs::is_directory(dir) && !fs::exists(dir)) {  // the machine's: a read-only or full disk (exit 3)
    const std::string hint = system_error_hint(ec.value());
    throw std::runtime_error(dir + ": cannot create the folder: " + ec.message() + (hint.empty() ? "" : "\nhint: " + hint));
  }
  if (!fs::is_directory(dir)) throw InputError(dir, "", "", "is a file, not a folder", "give a folder as the output");
  return OutLock(dir, (fs::path(dir) / ".lock").string(), verb);
}

OutLock OutLock::file(const std::string& path, const std::string& verb) {
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent)) {
    throw InputError(path, "", "", "is in a folder that does not exist (" + parent.string() + ")",
                     "make the folder first, or write the file elsewhere");
  }
  if (fs::is_directory(path)) throw InputError(path, "", "", "is a folder, not a file", "give a file name to write");
  return OutLock(path, path + ".lock", verb);
}

OutLock::OutLock(std::string out, std::string lock_path, const std::string& verb) : lock_path_(std::move(lock_path)) {
  // A lock on a file that its holder removed as we opened it is no lock:
  // take it again on the file now at the path.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fail(out, "open " + lock_path_);
    struct flock l {};
    l.l_type = F_WRLCK;
    l.l_whence = SEEK_SET;
    // An open-file-description lock conflicts within one process too (two
    // sweeps in threads of a user's program); a classic one where the
    // kernel has none (EINVAL).
    int rc = ::fcntl(fd, F_OFD_SETLK, &l);
    if (rc != 0 && errno == EINVAL) rc = ::fcntl(fd, F_SETLK, &l);
    if (rc != 0) {
      if (errno != EACCES && errno != EAGAIN) {
        const int saved = errno;
        ::close(fd);
        errno = saved;
        fail(out, "fcntl " + lock_path_);
      }
      const std::string holder = holder_of(fd);
      ::close(fd);
      throw InputError(out, "", "",
                       "is being written by another spikehunt (" + holder + ")",
                       "one process writes an output at a time: wait for that one to end (its lock goes with it, "
                       "even when it is killed) or give another output");
    }
    struct stat held {}, now {};
    if (::fstat(fd, &held) != 0 || ::stat(lock_path_.c_str(), &now) != 0 || held.st_ino != now.st_ino ||
        held.st_dev != now.st_dev) {
      ::close(fd);  // removed (or replaced) by the holder that released it: again
      continue;
    }
    const std::string me = verb + ", pid " + std::to_string(::getpid()) + " on host " + host_name() + ", since " +
                           now_utc() + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size())) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail(out, "write " + lock_path_);
    }
    fd_ = fd;
    return;
  }
  throw std::runtime_error(out + ": cannot take the writer's lock: " + lock_path_ + " keeps being replaced");
}

std::string OutLock::other_holder(const std::string& dir) {
  const std::string path = (fs::path(dir) / ".lock").string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  int rc = ::fcntl(fd, F_OFD_GETLK, &l);
  if (rc != 0 && errno == EINVAL) rc = ::fcntl(fd, F_GETLK, &l);
  std::string holder;
  if (rc == 0 && l.l_type != F_UNLCK) holder = holder_of(fd);
  ::close(fd);
  const std::string me = ", pid " + std::to_string(::getpid()) + " on host " + host_name() + ",";
  return holder.find(me) != std::string::npos ? "" : holder;
}

OutLock::OutLock(OutLock&& other) noexcept : lock_path_(std::move(other.lock_path_)), fd_(other.fd_) { other.fd_ = -1; }

OutLock::~OutLock() {
  if (fd_ < 0) return;
  ::unlink(lock_path_.c_str());  // while still held: a process that opened it before finds it removed and retries
  ::close(fd_);
}

}  // namespace spikehunt
