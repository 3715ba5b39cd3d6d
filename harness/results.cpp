#include "harness/results.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace spikehunt {

namespace fs = std::filesystem;

Hash128 config_hash(const TrainingConfig& config) {
  const std::string text = config_to_json(config).dump();
  return hash_bytes(text.data(), text.size());
}

RunDirectory::RunDirectory(const std::string& root, const TrainingConfig& config) : root_(root) {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec == std::errc::not_a_directory || ec == std::errc::file_exists || (!ec && !fs::is_directory(root_))) {
    throw InputError(root_, "", "", "is a file, or inside one, not a folder", "give --out a folder to write the run under");
  }
  if (ec) {
    const std::string hint = system_error_hint(ec.value());
    throw std::runtime_error(root_ + ": cannot create the folder: " + ec.message() + (hint.empty() ? "" : "\nhint: " + hint));
  }
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  const std::string base = std::string(stamp) + "-" + config_hash(config).hex().substr(0, 8);
  for (int n = 1;; ++n) {
    id_ = n == 1 ? base : base + "-" + std::to_string(n);
    staging_ = root_ + "/" + id_ + ".partial";
    if (fs::exists(root_ + "/" + id_)) continue;
    if (fs::create_directory(staging_, ec)) break;
    if (ec) throw std::runtime_error("cannot create " + staging_ + ": " + ec.message());
  }
}

RunDirectory::~RunDirectory() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
}

std::string RunDirectory::commit() {
  const std::string final_path = root_ + "/" + id_;
  std::error_code ec;
  fs::rename(staging_, final_path, ec);
  if (ec) throw std::runtime_error("cannot rename " + staging_ + " to " + final_path + ": " + ec.message());
  committed_ = true;
  return final_path;
}

}  // namespace spikehunt
