// results.h — one folder per run under results/: config.json, trace.jsonl,
// verdict.json and the checkpoints. Everything is written into
// "<id>.partial/" and renamed to "<id>/" only when complete, so a results
// folder is never half-written; a failed run leaves nothing behind.
// Example:
//   RunDirectory dir("results", config);
//   save_config(config, dir.file("config.json"));
//   std::string final_path = dir.commit();
#pragma once

#include <string>

#include "base/hash.h"
#include "scenarios/config.h"

namespace spikehunt {

// XXH3-128 of the config's canonical JSON (every field, fixed key order).
Hash128 config_hash(const TrainingConfig& config);

class RunDirectory {
 public:
  // Creates ROOT/<id>.partial/ with id = YYYYMMDD-HHMMSS-<first 8 hex of the config hash>[-N].
  RunDirectory(const std::string& root, const TrainingConfig& config);
  ~RunDirectory();  // removes the staging folder unless committed
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  std::string file(const std::string& name) const { return staging_ + "/" + name; }
  const std::string& id() const { return id_; }
  std::string commit();  // returns ROOT/<id>

 private:
  std::string root_, id_, staging_;
  bool committed_ = false;
};

}  // namespace spikehunt
