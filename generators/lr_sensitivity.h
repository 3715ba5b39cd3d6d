// lr_sensitivity.h — `spikehunt lr-sensitivity`: one config trained over a
// grid of peak learning rates for each variant named on the command line
// (--vary model.gpt.qk_layernorm=false,true; several --vary multiply), each
// burst in a child process like a sweep's (resumable from DIR/sweep.db, -j
// at once). Each burst measures its held-out loss before and after and the
// largest attention logit and log Z it saw (RunMetrics). Per variant it
// reports the final loss per LR and Wortsman et al.'s (2023) LR sensitivity:
//   E over the grid of [min(final loss, loss at init) − best final loss].
// Example:
//   LrSensitivityOptions o;  o.config = load_config("configs/gpt.json");
//   o.vary = {{"model.gpt.qk_layernorm", {"false", "true"}}};
//   int exit_code = run_lr_sensitivity(o, std::cout);
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/child.h"
#include "generators/store.h"
#include "harness/record.h"
#include "scenarios/config.h"

namespace spikehunt {

// Wortsman et al.'s grid of peak learning rates.
const std::vector<double>& wortsman_lr_grid();

struct LrVary {
  std::string field;                // a config field, e.g. "model.gpt.z_loss"
  std::vector<std::string> values;  // as --set values, e.g. {"0", "1e-4"}
};

struct LrVariant {
  std::string label;               // "model.gpt.qk_layernorm=true model.gpt.z_loss=1e-4" ("base" when nothing varies)
  std::vector<std::string> sets;   // the --set overrides it applies
};
// The cartesian product of the varies, the first varying slowest.
std::vector<LrVariant> lr_variants(const std::vector<LrVary>& vary);

struct LrSensitivityOptions {
  TrainingConfig config;
  std::string source = "<config>";
  std::vector<double> lrs = wortsman_lr_grid();
  std::vector<LrVary> vary;
  int64_t heldout = 256;          // held-out samples for the init and final losses
  bool heldout_given = false;     // --heldout given: past the data is an error (the default takes what there is)
  int jobs = 2;
  PoolOptions pool;               // how bursts run (child.h)
  double timeout_seconds = 600;   // per burst
  std::string out_dir = "results/lr-sensitivity";
  std::string binary;             // "": this executable
};

// One variant's results over the grid.
struct LrPoint {
  double lr = 0;
  BurstSummary summary;  // summary.metrics is set
  bool diverged() const;  // non-finite, or the final held-out loss at least the loss at init
};
struct LrCurve {
  LrVariant variant;
  std::vector<LrPoint> points;  // in grid order
  double best_loss = 0;         // the lowest final loss over the grid
  double best_lr = 0;
  double sensitivity = 0;       // Wortsman's LR sensitivity
};

// E[min(final_i, init_i) − min_j final_j] over the points; a non-finite
// final loss counts as the loss at init. NaN for no points.
double lr_sensitivity(const std::vector<double>& final_losses, const std::vector<double>& init_losses);
LrCurve make_curve(LrVariant variant, std::vector<LrPoint> points);

// The grid and variants as stored in DIR/sweep.db (its "space"); a database
// of another grid, config or variants is refused when resumed.
nlohmann::json lr_spec_json(const LrSensitivityOptions& o);
// The curves of an lr-sensitivity database (the report reads it); runs still
// missing are left out of their curve.
std::vector<LrCurve> lr_curves_from(const nlohmann::json& spec, const std::vector<RunRow>& runs);

// Runs (or resumes) it; prints the tables; writes DIR/lr_sensitivity.json.
// Exit code 0.
int run_lr_sensitivity(const LrSensitivityOptions& options, std::ostream& out);

}  // namespace spikehunt
