// out_lock.h — one writer per output folder (or file): an exclusive lock that
// a second process is refused at once, naming the holder, and that goes with
// its holder however it ends (the kernel drops it with the process, also on
// SIGKILL). The lock is an fcntl record lock (F_OFD_SETLK: it conflicts
// within one process too; F_SETLK where the kernel lacks it) on OUT/.lock
// (for a folder) or OUT.lock (for a file): NFS carries those locks to the
// server (lockd / NFSv4), which a flock(2) or a lock-by-existence file does
// not do reliably. The file holds the holder's verb, pid, host and start
// time for the refusal; it is removed when the lock is released, and a lock
// taken on a file that was removed meanwhile is taken again on the new one.
// Example:
//   const OutLock lock = OutLock::folder(o.out_dir, "sweep");  // throws InputError (exit 2) when held
#pragma once

#include <string>

namespace spikehunt {

class OutLock {
 public:
  // Locks folder `dir` (created when missing) for `verb`.
  static OutLock folder(const std::string& dir, const std::string& verb);
  // Locks the output file `path` (its folder must exist) for `verb`.
  static OutLock file(const std::string& path, const std::string& verb);

  OutLock(OutLock&& other) noexcept;
  OutLock& operator=(OutLock&&) = delete;
  OutLock(const OutLock&) = delete;
  ~OutLock();  // releases: removes the lock file, then drops the lock

  const std::string& lock_path() const { return lock_path_; }

  // Who holds folder `dir`'s lock, when another process does ("sweep, pid 123 on host n1, since ..."):
  // a reader says it shows a partial picture. "" when nobody, or this process, holds it.
  static std::string other_holder(const std::string& dir);

 private:
  OutLock(std::string out, std::string lock_path, const std::string& verb);
  std::string lock_path_;
  int fd_ = -1;
};

}  // namespace spikehunt
