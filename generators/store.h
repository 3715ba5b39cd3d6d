// store.h — a sweep's SQLite database (DIR/sweep.db): every finished burst,
// one transaction each, so a killed sweep resumes where it stopped without
// losing or repeating a run; the memo of bursts by config hash; and each
// distinct failure with its minimal config and repro.
// Example:
//   SweepStore store("results/sweep/sweep.db", space.to_json().dump(), /*seed=*/0);
//   if (!store.has_sample(7)) store.add_run(row);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/record.h"
#include "scenarios/config.h"

struct sqlite3;

namespace spikehunt {

struct RunRow {
  int64_t id = 0;        // assigned by the store
  std::string kind;      // "search" | "shrink" | "check"
  int64_t sample = -1;   // search: the index of the sample drawn from the seed
  std::string config_json;
  std::string config_hash;
  BurstSummary summary;  // step hashes are not stored
};

struct FailureRow {
  std::string signature;           // fault_signature() of the failure
  int64_t first_run = 0;           // the search run that found it
  int64_t occurrences = 0;         // search runs with this signature
  std::string minimal_config_json; // "" until shrunk
  int64_t shrink_evaluations = 0;  // bursts the shrink ran
  int64_t shrink_steps = 0;        // shrinks accepted
  bool budget_exhausted = false;
  std::string repro_path;          // "" until written
  std::string replay;              // "reproduced" or the first mismatch
};

// A stored text read back strictly, as merge reads a shard's rows before
// joining them: as JSON, `summary_json` into a BurstSummary and
// `config_json` into a TrainingConfig. Text that is not JSON, or JSON that
// is not a summary or a valid config, is an InputError naming `file` (the
// database), `field` ("runs (sample 3).config_json") and the text's first
// 57 characters, OUT untouched.
nlohmann::json json_from_text(const std::string& text, const std::string& file, const std::string& field);
BurstSummary summary_from_text(const std::string& text, const std::string& file, const std::string& field);
TrainingConfig config_from_text(const std::string& text, const std::string& file, const std::string& field);

// The executable a sweep's bursts run: its version, LibTorch's, and a hash of
// the file's bytes ("spikehunt 0.1.0 | LibTorch 1.13.0 | 3f2a...": 16 hex
// digits of XXH3-128), so shards of one sweep can be checked to be one build.
// For this program the hash covers build_files_of() (program.h): a Python
// program's extension module and script too.
std::string build_id(const std::string& executable);

class SweepStore {
 public:
  // Opens or creates the database. One made with another space or seed is an
  // InputError (resume with the same --space and --seed, or use another --out);
  // a file that is not a sweep database is one too.
  SweepStore(const std::string& path, const std::string& space_json, uint64_t seed);
  // Opens an existing sweep database read-only (reports): a missing file or
  // one that is not a sweep database is an InputError.
  static std::unique_ptr<SweepStore> open_read_only(const std::string& path);
  ~SweepStore();
  SweepStore(const SweepStore&) = delete;
  SweepStore& operator=(const SweepStore&) = delete;

  const std::string& path() const { return path_; }
  const std::string& space_json() const { return space_json_; }  // the sweep's space
  uint64_t seed() const { return seed_; }
  bool has_sample(int64_t sample, const std::string& kind = "search") const;  // a run of that kind with that sample
  std::optional<BurstSummary> find(const std::string& config_hash) const;  // the memo
  void add_run(RunRow row);  // one transaction; the run is no longer held (below)
  void add_runs(std::vector<RunRow> rows);                                  // one transaction for all
  std::vector<RunRow> runs(const std::string& kind) const;                  // in id order
  int64_t count(const std::string& kind) const;

  // Bursts trained ahead of a shrink's decisions (memo.h: EvalCache::hold),
  // committed as each finishes so that a killed sweep or merge trains none
  // of them again; counted nowhere until a decision takes one (add_run).
  void hold(const std::string& config_hash, const BurstSummary& summary);  // insert or replace
  std::vector<std::pair<std::string, BurstSummary>> held() const;          // not in runs

  void put_failure(const FailureRow& f);  // insert or replace, one transaction
  std::optional<FailureRow> failure(const std::string& signature) const;
  std::vector<FailureRow> failures() const;  // in order of first_run

  // Facts about the sweep beside its space and seed: "runs" (the search
  // samples asked for), "shard" ("I/N" for a shard of a sharded sweep),
  // "build" (build_id() of the executable that ran its bursts).
  std::optional<std::string> meta(const std::string& key) const;
  void set_meta(const std::string& key, const std::string& value);  // insert or replace

 private:
  SweepStore() = default;
  void exec(const std::string& sql) const;
  std::string path_;
  std::string space_json_;
  uint64_t seed_ = 0;
  sqlite3* db_ = nullptr;
};

// What a failure that shrank to an earlier one's minimal config recorded as
// its FailureRow::replay ("one failure with SIGNATURE: it shrank to the same
// minimal config"); with "" the prefix all such records start with. Only
// databases of earlier builds hold such rows (a shrink now never leaves its
// failure's fault signature, so two failures never meet); they are still
// read and shown.
std::string one_failure_with(const std::string& signature);

}  // namespace spikehunt
