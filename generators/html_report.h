// html_report.h — `spikehunt report DIR`: one self-contained HTML file of a
// sweep that works offline: the failure rate with its interval, per-factor
// rates, a learning-rate × momentum failure map, every distinct failure with
// its minimal config and replay command, and for each an interactive chart
// of the trace into it (dygraphs from Debian's libjs-dygraphs, inlined).
// Example:
//   const ReportFacts f = write_sweep_report("results/sweep");
//   std::cout << "open " << f.path << "\n";
#pragma once

#include <cstdint>
#include <string>

namespace spikehunt {

struct ReportFacts {
  std::string path;        // the report written
  int64_t runs = 0;        // search runs in the database
  int64_t failed = 0;      // of which failed
  int64_t failures = 0;    // distinct failures listed
  int64_t charts = 0;      // failure charts (one per failure whose repro has a trace)
  std::string running;     // the sweep still writing the folder ("sweep, pid ..."), or ""
};

// Where the dygraphs files are read from: $SPIKEHUNT_DYGRAPHS_DIR, else
// Debian's /usr/share/javascript/dygraphs.
std::string dygraphs_dir();

// Reads DIR/sweep.db (read-only) and the traces beside its repros and writes
// `out` (default DIR/report.html) atomically. A missing or foreign database,
// or missing dygraphs files, is an InputError.
ReportFacts write_sweep_report(const std::string& dir, const std::string& out = "");

// Whether `path` holds a page spikehunt wrote (its generator marker, or an
// older report's heading); refuse_foreign_report throws an InputError naming
// `flag` when an existing file at `path` is not one: a report never replaces a
// file of the user's (or a sweep's database).
bool is_spikehunt_report(const std::string& path);
void refuse_foreign_report(const std::string& path, const std::string& flag);

}  // namespace spikehunt
