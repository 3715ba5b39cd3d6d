// merge.h — a sharded sweep put back together, and two sweeps compared.
//
// `spikehunt sweep --shard I/N` searches samples i with i mod N = I into
// OUT/shard-I-of-N/sweep.db (a Slurm array runs one shard per task). `merge`
// checks that the shards are of one sweep (seed, space, build, shard count,
// runs; the odd one is named), reports the sample indices no shard holds
// (refusing unless allow_missing), copies the search runs into OUT/sweep.db in
// one transaction, and then does what a one-machine sweep does after its
// search (finish_sweep): the same failures, shrunk from the same first
// samples with the same memo, so the result is the one machine's. Merging
// again is idempotent, and a killed merge resumes from OUT/sweep.db.
// Example:
//   MergeOptions o;  o.out_dir = "results/nightly";
//   o.shard_dirs = {"results/nightly/shard-0-of-2", "results/nightly/shard-1-of-2"};
//   int exit_code = run_merge(o, std::cout);
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "generators/sweep.h"

namespace spikehunt {

struct MergeOptions {
  std::string out_dir;                 // the merged sweep's folder
  std::vector<std::string> shard_dirs; // each a `sweep --shard` folder
  bool allow_missing = false;          // merge even when samples are in no shard
  // Its bursts, shrinks, budget, binary and progress line, as a sweep's; the
  // space, seed and runs come from the shards.
  SweepOptions sweep;
};

// Exit code: 0 no failure, 1 failures found; bad or inconsistent shards, and
// missing samples without allow_missing, are InputErrors (exit 2) raised
// before anything is written.
int run_merge(const MergeOptions& options, std::ostream& out);

// "3, 7-9, 12": sample indices as ranges, at most `max_items` of them, then
// "... (N more)".
std::string index_ranges(const std::vector<int64_t>& sorted, size_t max_items = 20);

// Compares two sweep folders: the same search samples with the same configs,
// verdicts, fault signatures and first batch hashes; the same distinct
// failures with the same occurrences, minimal configs and replay outcome.
// Prints each difference; exit code 0 when equal, 1 when not.
int run_compare(const std::string& a_dir, const std::string& b_dir, std::ostream& out);

}  // namespace spikehunt
