#include "generators/store.h"

#include <sqlite3.h>
#include <sys/vfs.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "base/did_you_mean.h"
#include "base/error.h"
#include "base/files.h"
#include "base/hash.h"
#include "base/program.h"
#include "harness/env.h"

namespace spikehunt {

namespace {

// Whether the last error on `db` is the machine's (a full or read-only
// disk, an I/O error) rather than the file's content.
bool machine_error(sqlite3* db) {
  switch (sqlite3_errcode(db)) {
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_NOMEM:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return true;
    default:
      return false;
  }
}

// The last error on `db` as spikehunt says a machine's error: the database's
// path, SQLite's words, and what to do ("error: DIR/sweep.db: sqlite: database
// or disk is full\nhint: ..." once the CLI puts "error: " before it).
std::runtime_error sqlite_failure(sqlite3* db, const std::string& context = "") {
  const char* file = sqlite3_db_filename(db, "main");
  std::string text = std::string(file && *file ? file : "<sweep database>") + ": sqlite: " + sqlite3_errmsg(db);
  // An I/O error's cause as the system said it (a full disk shows as one when SQLite maps its shared memory).
  const int system_errno = sqlite3_system_errno(db);
  if (sqlite3_errcode(db) == SQLITE_IOERR && system_errno != 0) {
    text += std::string(" (") + std::strerror(system_errno) + ")";
    if (const std::string hint = system_error_hint(system_errno); !hint.empty()) return std::runtime_error(text + context + "\nhint: " + hint);
  }
  text += context;
  switch (sqlite3_errcode(db)) {
    case SQLITE_FULL:
      text += "\nhint: the disk is full: free space (df -h) and run the same command again; every run committed "
              "before is kept and is not trained again";
      break;
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
      text += "\nhint: the database cannot be written (a read-only disk or file, or a folder without write "
              "permission): give an --out where it can";
      break;
    case SQLITE_IOERR:
      text += "\nhint: the disk failed a read or write: check it (dmesg) and run the same command again";
      break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      text += "\nhint: another process holds the database: one process writes an output folder at a time";
      break;
    default:
      break;
  }
  return std::runtime_error(text);
}

constexpr const char* kDamagedHint =
    "its pages were overwritten or cut short. `sqlite3 DB .recover | sqlite3 recovered.db` keeps what is left "
    "(then report on that folder); or run the sweep again into a fresh folder";

// The file's content is damaged (SQLITE_CORRUPT): the
// input's fault, said as one (exit 2) with the path and what to do; any
// other failure as sqlite_failure says it.
[[noreturn]] void throw_failure(sqlite3* db, const std::string& context = "") {
  const int code = sqlite3_errcode(db);
  if (code == SQLITE_CORRUPT) {
    const char* file = sqlite3_db_filename(db, "main");
    throw InputError(file && *file ? file : "<sweep database>", "", "",
                     std::string("is damaged (SQLite: ") + sqlite3_errmsg(db) + ")", kDamagedHint);
  }
  throw sqlite_failure(db, context);
}

// A prepared statement that finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) {
      throw_failure(db, std::string(" in: ") + sql);
    }
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement& bind(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.c_str(), int(s.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Statement& bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  Statement& bind_null(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
  }
  Statement& bind(int i, const std::optional<int64_t>& v) { return v ? bind(i, *v) : bind_null(i); }
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw_failure(db_);
  }
  std::string text(int col) const {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

// PRAGMA quick_check: every page of the file read and its structure checked
// (milliseconds for a sweep's database), so a damaged one is said when it is
// opened, not found half-way through a report or a resume.
void check_intact(sqlite3* db, const std::string& path) {
  Statement s(db, "PRAGMA quick_check(1)");
  if (s.step() && s.text(0) != "ok") {
    std::string what = s.text(0);
    if (const size_t at = what.find("***\n"); what.rfind("*** in database", 0) == 0 && at != std::string::npos) {
      what = what.substr(at + 4);  // "*** in database main ***\n" before the problem
    }
    throw InputError(path, "", "", "is damaged (SQLite's quick_check: " + what + ")", kDamagedHint);
  }
}

constexpr const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,
  sample INTEGER,
  config_hash TEXT NOT NULL,
  config_json TEXT NOT NULL,
  outcome TEXT NOT NULL,
  onset_step INTEGER,
  failure_step INTEGER,
  lead_time INTEGER,
  fault TEXT,
  signature TEXT NOT NULL,
  first_input_hash TEXT NOT NULL,
  first_label_hash TEXT NOT NULL,
  steps_run INTEGER NOT NULL,
  wall_seconds REAL NOT NULL,
  summary_json TEXT NOT NULL,
  created TEXT NOT NULL DEFAULT (datetime('now')));
CREATE UNIQUE INDEX IF NOT EXISTS runs_by_sample ON runs(sample) WHERE kind = 'search';
CREATE INDEX IF NOT EXISTS runs_by_hash ON runs(config_hash);
CREATE TABLE IF NOT EXISTS held(config_hash TEXT PRIMARY KEY, summary_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS failures(
  signature TEXT PRIMARY KEY,
  first_run INTEGER NOT NULL,
  occurrences INTEGER NOT NULL,
  minimal_config_json TEXT NOT NULL,
  shrink_evaluations INTEGER NOT NULL,
  shrink_steps INTEGER NOT NULL,
  budget_exhausted INTEGER NOT NULL,
  repro_path TEXT NOT NULL,
  replay TEXT NOT NULL);
)";

// A write-ahead log needs shared memory between the processes that open the
// database, which network filesystems do not give (sqlite.org/wal.html); a
// sweep's results folder on a cluster's shared filesystem (NFS, Lustre, GPFS,
// BeeGFS, CephFS, SMB) keeps a rollback journal instead.
bool on_network_filesystem(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) return false;
  switch (static_cast<uint64_t>(fs.f_type)) {
    case 0x6969:        // NFS
    case 0x0BD00BD0:    // Lustre
    case 0x47504653:    // GPFS
    case 0x19830326:    // BeeGFS
    case 0x00C36400:    // CephFS
    case 0xFF534D42:    // CIFS
    case 0xFE534D42:    // SMB2
    case 0x65735546:    // FUSE (sshfs, and many cluster filesystems' clients)
      return true;
    default:
      return false;
  }
}

}  // namespace

nlohmann::json json_from_text(const std::string& text, const std::string& file, const std::string& field) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    throw InputError(file, field, text.size() > 60 ? text.substr(0, 57) + "..." : text, "is not JSON",
                     "the database is damaged: run the sweep (or shard) again into a fresh folder");
  }
  return j;
}

BurstSummary summary_from_text(const std::string& text, const std::string& file, const std::string& field) {
  return summary_from_json(json_from_text(text, file, field), file + ": " + field);
}

TrainingConfig config_from_text(const std::string& text, const std::string& file, const std::string& field) {
  return config_from_json(json_from_text(text, file, field), file + ": " + field);
}

std::string build_id(const std::string& executable) {
  std::string bytes;
  for (const std::string& file : build_files_of(executable)) bytes += read_file(file);
  return std::string("spikehunt ") + kVersion + " | LibTorch " + environment("cpu", 1).libtorch + " | " +
         hash_bytes(bytes.data(), bytes.size()).hex().substr(0, 16);
}

SweepStore::SweepStore(const std::string& path, const std::string& space_json, uint64_t seed)
    : path_(path), space_json_(space_json), seed_(seed) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw InputError(path, "", "", "cannot be opened as a database: " + why);
  }
  sqlite3_busy_timeout(db_, 5000);
  struct CloseOnThrow {  // a throw below leaves no open handle (the destructor does not run)
    sqlite3*& db;
    bool armed = true;
    ~CloseOnThrow() {
      if (armed && db != nullptr) sqlite3_close(db);
      if (armed) db = nullptr;
    }
  } close_on_throw{db_};
  try {
    exec(on_network_filesystem(path) ? "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL;"
                                     : "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                                       // Each commit goes on into the database file at once: the log
                                       // never holds a run the file lacks, so a -wal deleted after a
                                       // kill (it looks like a temporary file) loses nothing.
                                       "PRAGMA wal_autocheckpoint=1;");
    exec(kSchema);
  } catch (const std::runtime_error& e) {
    if (machine_error(db_)) {  // a full or read-only disk: the file may be a fine database
      const std::runtime_error failure = sqlite_failure(db_);
      sqlite3_close(db_);
      db_ = nullptr;
      throw failure;
    }
    const std::string why = sqlite3_errmsg(db_);
    sqlite3_close(db_);
    db_ = nullptr;
    throw InputError(path, "", "", "is not a sweep database (" + why + ")", "give --out a fresh folder");
  }
  check_intact(db_, path);
  auto meta = [&](const std::string& key, const std::string& value) {
    Statement get(db_, "SELECT value FROM meta WHERE key = ?");
    get.bind(1, key);
    if (get.step()) return get.text(0);
    Statement put(db_, "INSERT INTO meta(key, value) VALUES(?, ?)");
    put.bind(1, key).bind(2, value).step();
    return value;
  };
  const std::string stored_space = meta("space", space_json);
  const std::string stored_seed = meta("seed", std::to_string(seed));
  if (stored_space != space_json || stored_seed != std::to_string(seed)) {
    sqlite3_close(db_);
    db_ = nullptr;
    if (stored_space != space_json) {
      const auto [stored, given] = where_they_differ(stored_space, space_json);
      throw InputError(path, "", "", "holds a sweep over another search space than this one: " + stored + " where this one has " + given,
                       "resume with the space it was made with (its space is in the report's \"search space\"), "
                       "or give --out a fresh folder");
    }
    throw InputError(path, "", "",
                     "holds a sweep with --seed " + stored_seed + ", not --seed " + std::to_string(seed),
                     "resume with --seed " + stored_seed + ", or give --out a fresh folder");
  }
  close_on_throw.armed = false;
}

std::unique_ptr<SweepStore> SweepStore::open_read_only(const std::string& path) {
  std::unique_ptr<SweepStore> store(new SweepStore());
  store->path_ = path;
  // Read-only and leaving nothing behind: without a write-ahead log beside it
  // (no sweep writing, none killed mid-write) the file is opened immutable,
  // which creates no -wal or -shm files; with one, read-only through it.
  std::error_code ec;
  const bool wal = std::filesystem::exists(path + "-wal", ec);
  std::string uri = "file:";
  for (const char c : path) {
    if (c == '?' || c == '#' || c == '%') {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", static_cast<unsigned char>(c));
      uri += hex;
    } else {
      uri += c;
    }
  }
  if (!wal) uri += "?immutable=1";
  if (sqlite3_open_v2(uri.c_str(), &store->db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr) != SQLITE_OK) {
    const std::string why = store->db_ ? sqlite3_errmsg(store->db_) : "out of memory";
    throw InputError(path, "", "", "cannot be opened as a sweep database: " + why,
                     "give the --out folder of a spikehunt sweep");
  }
  sqlite3_busy_timeout(store->db_, 5000);
  try {
    check_intact(store->db_, path);
    Statement s(store->db_, "SELECT key, value FROM meta WHERE key IN ('space', 'seed')");
    int found = 0;
    while (s.step()) {
      ++found;
      if (s.text(0) == "space") store->space_json_ = s.text(1);
      else store->seed_ = std::stoull(s.text(1));
    }
    Statement check(store->db_, "SELECT COUNT(*) FROM runs JOIN failures ON 0");
    check.step();
    if (found != 2) throw std::runtime_error("its meta table has no space and seed");
  } catch (const InputError&) {
    throw;  // damaged: said so
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (const size_t at = why.find(": sqlite: "); at != std::string::npos) why = why.substr(at + 10);  // its path is said
    throw InputError(path, "", "", "is not a sweep database (" + why + ")", "give the --out folder of a spikehunt sweep");
  }
  return store;
}

SweepStore::~SweepStore() {
  if (db_ != nullptr) sqlite3_close(db_);
}

void SweepStore::exec(const std::string& sql) const {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    sqlite3_free(error);
    throw_failure(db_);
  }
}

bool SweepStore::has_sample(int64_t sample, const std::string& kind) const {
  Statement s(db_, "SELECT 1 FROM runs WHERE kind = ? AND sample = ?");
  s.bind(1, kind).bind(2, sample);
  return s.step();
}

std::optional<BurstSummary> SweepStore::find(const std::string& config_hash) const {
  Statement s(db_, "SELECT summary_json FROM runs WHERE config_hash = ? ORDER BY id LIMIT 1");
  s.bind(1, config_hash);
  if (!s.step()) return std::nullopt;
  return summary_from_text(s.text(0), path_, "runs (config " + config_hash.substr(0, 12) + ").summary_json");
}

void SweepStore::add_run(RunRow row) {
  const Verdict& v = row.summary.verdict;
  row.summary.step_hashes.clear();
  Statement s(db_, R"(INSERT INTO runs(kind, sample, config_hash, config_json, outcome, onset_step, failure_step,
                        lead_time, fault, signature, first_input_hash, first_label_hash, steps_run, wall_seconds,
                        summary_json) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?))");
  s.bind(1, row.kind);
  if (row.sample >= 0) s.bind(2, row.sample);
  else s.bind_null(2);
  s.bind(3, row.config_hash).bind(4, row.config_json).bind(5, std::string(to_string(v.outcome)));
  s.bind(6, v.onset_step).bind(7, v.failure_step).bind(8, v.lead_time());
  if (v.fault) s.bind(9, v.fault->describe());
  else s.bind_null(9);
  s.bind(10, fault_signature(v)).bind(11, row.summary.first.input.hex()).bind(12, row.summary.first.labels.hex());
  s.bind(13, v.steps_run).bind(14, v.wall_seconds).bind(15, to_json(row.summary).dump());
  s.step();  // autocommit: one transaction per run
  // Killed between the two, the held row stays beside the run: held() skips it.
  Statement(db_, "DELETE FROM held WHERE config_hash = ?").bind(1, row.config_hash).step();
}

void SweepStore::hold(const std::string& config_hash, const BurstSummary& summary) {
  BurstSummary s = summary;
  s.step_hashes.clear();
  Statement(db_, "INSERT OR REPLACE INTO held(config_hash, summary_json) VALUES(?, ?)")
      .bind(1, config_hash)
      .bind(2, to_json(s).dump())
      .step();
}

std::vector<std::pair<std::string, BurstSummary>> SweepStore::held() const {
  Statement s(db_, R"(SELECT config_hash, summary_json FROM held
                      WHERE NOT EXISTS (SELECT 1 FROM runs WHERE runs.config_hash = held.config_hash)
                      ORDER BY config_hash)");
  std::vector<std::pair<std::string, BurstSummary>> out;
  while (s.step()) out.emplace_back(s.text(0), summary_from_text(s.text(1), path_, "held (" + s.text(0).substr(0, 12) + ")"));
  return out;
}

void SweepStore::add_runs(std::vector<RunRow> rows) {
  exec("BEGIN IMMEDIATE");
  try {
    for (RunRow& r : rows) add_run(std::move(r));
    exec("COMMIT");
  } catch (...) {
    exec("ROLLBACK");
    throw;
  }
}

std::optional<std::string> SweepStore::meta(const std::string& key) const {
  Statement s(db_, "SELECT value FROM meta WHERE key = ?");
  s.bind(1, key);
  if (!s.step()) return std::nullopt;
  return s.text(0);
}

void SweepStore::set_meta(const std::string& key, const std::string& value) {
  Statement s(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
  s.bind(1, key).bind(2, value).step();
}

std::vector<RunRow> SweepStore::runs(const std::string& kind) const {
  Statement s(db_, "SELECT id, kind, sample, config_json, config_hash, summary_json FROM runs WHERE kind = ? ORDER BY id");
  s.bind(1, kind);
  std::vector<RunRow> out;
  while (s.step()) {
    RunRow r;
    r.id = s.integer(0);
    r.kind = s.text(1);
    r.sample = s.text(2).empty() ? -1 : s.integer(2);
    r.config_json = s.text(3);
    r.config_hash = s.text(4);
    r.summary = summary_from_text(s.text(5), path_, "runs (id " + std::to_string(r.id) + ").summary_json");
    out.push_back(std::move(r));
  }
  return out;
}

int64_t SweepStore::count(const std::string& kind) const {
  Statement s(db_, "SELECT COUNT(*) FROM runs WHERE kind = ?");
  s.bind(1, kind);
  s.step();
  return s.integer(0);
}

void SweepStore::put_failure(const FailureRow& f) {
  Statement s(db_, R"(INSERT OR REPLACE INTO failures(signature, first_run, occurrences, minimal_config_json,
                        shrink_evaluations, shrink_steps, budget_exhausted, repro_path, replay)
                      VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?))");
  s.bind(1, f.signature).bind(2, f.first_run).bind(3, f.occurrences).bind(4, f.minimal_config_json);
  s.bind(5, f.shrink_evaluations).bind(6, f.shrink_steps).bind(7, int64_t(f.budget_exhausted));
  s.bind(8, f.repro_path).bind(9, f.replay);
  s.step();
}

namespace {

FailureRow failure_row(const Statement& s) {
  FailureRow f;
  f.signature = s.text(0);
  f.first_run = s.integer(1);
  f.occurrences = s.integer(2);
  f.minimal_config_json = s.text(3);
  f.shrink_evaluations = s.integer(4);
  f.shrink_steps = s.integer(5);
  f.budget_exhausted = s.integer(6) != 0;
  f.repro_path = s.text(7);
  f.replay = s.text(8);
  return f;
}

constexpr const char* kFailureColumns =
    "SELECT signature, first_run, occurrences, minimal_config_json, shrink_evaluations, shrink_steps, "
    "budget_exhausted, repro_path, replay FROM failures ";

}  // namespace

std::optional<FailureRow> SweepStore::failure(const std::string& signature) const {
  Statement s(db_, (std::string(kFailureColumns) + "WHERE signature = ?").c_str());
  s.bind(1, signature);
  if (!s.step()) return std::nullopt;
  return failure_row(s);
}

std::vector<FailureRow> SweepStore::failures() const {
  Statement s(db_, (std::string(kFailureColumns) + "ORDER BY first_run").c_str());
  std::vector<FailureRow> out;
  while (s.step()) out.push_back(failure_row(s));
  return out;
}

std::string one_failure_with(const std::string& signature) {
  return "one failure with " + signature + (signature.empty() ? "" : ": it shrank to the same minimal config");
}

}  // namespace spikehunt
