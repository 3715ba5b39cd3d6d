// temp_dir.h — the test helpers that need no LibTorch (test_util.h has the
// rest): a scratch folder and a substring check.
#pragma once

#include <string>

namespace spikehunt {
namespace testing {

// A fresh empty folder under /tmp, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

bool has(const std::string& text, const std::string& what);  // text contains what

}  // namespace testing
}  // namespace spikehunt
