// record.h — what the monitor writes down: one StepRecord per optimizer step,
// the Fault (first non-finite tensor) and the burst's Verdict, with their
// JSON forms (non-finite numbers are written as the strings "nan", "inf",
// "-inf" so every line stays strict JSON).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "base/json.h"
#include "harness/env.h"

namespace spikehunt {

enum class Health { kFinite, kExtreme, kNonFinite };
enum class Stage { kForward, kLoss, kBackward, kOptimizerStep };
enum class Outcome { kHealthy, kExtreme, kNonFinite, kCrashed, kTimeout };

const char* to_string(Health h);
const char* to_string(Stage s);
const char* to_string(Outcome o);

// The first non-finite tensor of a step.
struct Fault {
  std::string tensor;   // tap, "loss", "<param>.grad", "<param>" or "<param>.<state>"
  Stage stage = Stage::kForward;
  int64_t nan = 0;      // NaN elements
  int64_t pos_inf = 0;  // +Inf elements
  int64_t neg_inf = 0;  // -Inf elements
  int64_t numel = 0;    // elements in the tensor
  int64_t rank = -1;    // the process whose tensor it is, in a burst over several (-1: one process)
  // "fc2_logits (forward): 128 NaN, 128 +Inf, 384 -Inf of 640", then " on rank 1" for a rank's
  std::string describe() const;
};

struct LayerStats {
  std::string name;              // parameter name, e.g. "fc1.weight"
  bool is_weight = false;        // 2 or more dimensions (not a bias or norm scale)
  double grad_norm = 0;          // L2 of its gradient, before clipping (0: no gradient)
  double grad_max = 0;           // max |grad|
  double param_norm_before = 0;  // L2 before the optimizer step
  double param_norm_after = 0;   // L2 after the optimizer step
  double state_norm = 0;         // L2 over its optimizer state (momentum / Adam moments)
  double state_max = 0;          // max |state element|
  // The step itself: the L2 of (parameter after − before), and for a
  // parameter of an optimizer that normalizes its updates (Adam and kin,
  // `adaptive`) that step's RMS per coordinate over the learning rate it
  // applied (about 1 or less for a healthy Adam step; 0 otherwise).
  double update_norm = 0;
  double update_ratio = 0;
  bool adaptive = false;
  // SPAM's gradient spike score (Huang et al., ICLR 2025): the largest g² / v
  // over the parameter's coordinates, v the second moment its optimizer kept
  // before this step (exp_avg_sq: Adam, AdamW, NAdam, RAdam; square_avg:
  // RMSprop), unbiased as SPAM reads it. Coordinates whose v is still 0 (no
  // gradient seen yet) are not scored; 0 without such a buffer or state.
  double grad_spike_score = 0;
};

// One param group of one optimizer at a step.
struct GroupStats {
  std::string optimizer;  // its name in Scenario::optimizers()
  int64_t group = 0;      // index of the group in that optimizer
  double lr = 0;          // the learning rate this step applied
  double state_norm = 0;  // L2 over the group's optimizer state
  double state_max = 0;   // max |state element| in the group
};

// One health rule that fired, with what it compared: `value` against
// `threshold` in the rule's own terms (a limit: the statistic and its limit;
// a spike: the z-score and spike_z; a growth rule: the smallest per-step
// factor of the run and growth_ratio; sigma: the sigmas above the mean and
// sigma; chance: the loss and factor × ln(classes); param_jump: the largest
// jump and its limit), and `quantity`, the statistic itself.
struct RuleHit {
  std::string rule;
  double value = 0;
  double threshold = 0;
  double quantity = 0;
  // The tensor a per-tensor rule judged (HealthRules::layers): the parameter
  // or tap furthest past its own threshold; empty for model-wide rules.
  std::string tensor;
  std::string describe() const;  // "grad_norm_growth ×1.52/step ≥ ×1.5 (grad norm 67.5)"
};

// A per-layer statistic that climbed before the onset (HealthJudge's onset
// attribution): how far it stood above its trailing median at the onset
// step, and the first step of its climb.
struct Mover {
  std::string tensor;    // a parameter ("fc1.weight") or a tap ("fc1_act")
  std::string quantity;  // "gradient" | "update" | "optimizer state" | "activation"
  double ratio = 0;      // value at the onset / trailing median (inf: non-finite at the onset)
  double value = 0;      // the value at the onset step
  double baseline = 0;   // the trailing median before the climb
  int64_t since = 0;     // the first step of the climb (≤ the onset step)
};

struct TapStats {
  std::string name;  // e.g. "fc1_act"
  double max_abs = 0;
};

// A trace line holds the label histogram only for this many classes or fewer
// (a text model's 256 byte counts per line would bury the rest); above it,
// the line says "classes": N instead.
constexpr size_t kTraceHistogramClasses = 32;

struct StepRecord {
  int64_t step = 0;   // global optimizer step, from 0
  int64_t phase = 0;  // index into the protocol's phases
  std::string phase_name;
  int64_t epoch = 0;  // within the phase
  int64_t batch = 0;  // within the epoch
  double loss = 0;
  double grad_norm = 0;          // global L2 over all gradients, before clipping
  double grad_max = 0;           // max |grad| over all parameters
  double param_norm_before = 0;  // global L2 of the parameters before the step
  double param_norm_after = 0;   // ... and after
  double state_norm = 0;         // global L2 of the optimizer state
  double state_max = 0;          // max |optimizer state element|
  double input_max = 0;          // max |input|
  double output_max = 0;         // max |output| (what forward returned)
  double activation_max = 0;     // max over taps of max |activation|
  double lr = 0;                 // the learning rate of the first optimizer's first group this step
  double update_norm = 0;        // global L2 of the step (parameters after − before)
  double update_ratio = 0;       // the largest LayerStats::update_ratio (0: no adaptive optimizer)
  double grad_spike_score = 0;   // the largest LayerStats::grad_spike_score (0: no second moment yet)
  int64_t micro_batches = 1;     // batches accumulated into this optimizer step
  double loss_scale = 0;         // fp16: the loss scale this step's backward used (0: no scaling)
  bool skipped = false;          // fp16: the scaled gradients overflowed, the optimizer did not step
  std::vector<LayerStats> layers;
  std::vector<GroupStats> groups;  // every group of every optimizer
  std::vector<TapStats> taps;    // in the order forward called them
  Hash128 input_hash;            // XXH3-128 of the input bytes (host order; of every micro-batch, in order)
  Hash128 label_hash;            // XXH3-128 of the label bytes
  std::vector<int64_t> label_histogram;  // count per class in this batch (a trace line keeps it up to kTraceHistogramClasses)
  Health health = Health::kFinite;
  std::vector<std::string> rules;  // health rules that fired
  std::vector<RuleHit> hits;       // the same rules with their values and thresholds
  std::vector<Mover> movers;       // on the judge's first bad step: what moved first, ranked
  std::optional<Fault> fault;      // set on the first non-finite step
  double step_ms = 0;              // wall time of the step, monitor included
};

// A LibTorch (or PyTorch) warning the training code raised, with how many
// times: shown once per run instead of once per step.
struct WarningCount {
  std::string message;
  int64_t count = 0;
};

// "  2,204x Using a target size ..." lines, one per warning.
std::string describe_warnings(const std::vector<WarningCount>& warnings);

struct Verdict {
  Outcome outcome = Outcome::kHealthy;
  std::optional<int64_t> onset_step;    // first extreme (or non-finite) step
  std::optional<int64_t> failure_step;  // first non-finite step
  std::vector<std::string> onset_rules; // rules that fired at the onset
  std::vector<RuleHit> onset_hits;      // ... with their values against their thresholds
  std::vector<Mover> movers;            // the layers that moved first, ranked (first mover first)
  std::optional<Fault> fault;
  int64_t steps_run = 0;
  int64_t planned_steps = 0;
  double wall_seconds = 0;
  Hash128 hash_chain;                   // over every step's input and label hash
  std::string message;                  // crash or timeout details
  std::string crash_stage;              // crashed: setup | data | forward | loss | backward | optimizer_step
  std::string crash_cause;              // crashed: what the message means, when spikehunt can tell
  std::vector<WarningCount> warnings;   // LibTorch warnings raised during the burst, in first-seen order
  // failure_step - onset_step: the steps of warning before the NaN.
  std::optional<int64_t> lead_time() const;
};

struct StepHashes {
  Hash128 input;   // XXH3-128 of the step's input bytes
  Hash128 labels;  // ... and of its label bytes
  bool operator==(const StepHashes& o) const { return input == o.input && labels == o.labels; }
};

// The monitor's memory across steps (a checkpoint keeps it beside the tensors).
struct MonitorState {
  Hash128 chain;         // hash chain over the steps before
  nlohmann::json judge;  // HealthJudge::state(): its phase and spike windows
};

// What an LR-sensitivity run measures of a burst besides its verdict
// (`burst --heldout N`): held-out losses before and after, and the largest
// transformer logits it saw.
struct RunMetrics {
  // Mean held-out loss before the first step and after the last (inf when the burst went non-finite);
  // without held-out data (heldout_samples 0), the training loss: step 0's, the mean of the last 10 steps'.
  double init_loss = 0;
  double final_loss = 0;
  double last_train_loss = 0;      // the last step's training loss
  double max_attention_logit = 0;  // over every step's *attn_logits taps
  double max_logit_z = 0;          // over every step's *_z taps
  int64_t heldout_samples = 0;     // sequences (or images) the held-out losses averaged
};

// What a sweep keeps of one burst (a child process reports it as JSON).
struct BurstSummary {
  Verdict verdict;
  StepHashes first;                      // step 0's hashes: which data the burst started on
  std::vector<StepHashes> step_hashes;   // every step, when asked for (repro files)
  std::optional<RunMetrics> metrics;     // when the burst was asked to measure them
  std::optional<Environment> environment;  // where it ran (a child reports it; absent in older databases)
};
// A summary with `first` taken from the step hashes (empty: no step ran).
BurstSummary summary_of(Verdict verdict, std::vector<StepHashes> step_hashes);

// "fc1.weight gradient 40× its trailing median, climbing since step 38 (2
// steps before the onset), then fc1_act activation (12×, since step 39), ..."
// ("" when nothing climbed). `onset` is the onset step.
std::string describe_movers(const std::vector<Mover>& movers, int64_t onset, size_t max_named = 3);

nlohmann::json to_json(const Fault& f);
nlohmann::json to_json(const RuleHit& h);
nlohmann::json to_json(const Mover& m);
nlohmann::json to_json(const StepRecord& r);
// A step's trace.jsonl line (without its newline): its JSON written straight
// as text, the same bytes as to_json(r).dump(); append_trace_line appends it
// to `out` (a buffer kept from line to line).
std::string trace_line(const StepRecord& r);
void append_trace_line(const StepRecord& r, std::string& out);
nlohmann::json to_json(const Verdict& v);
nlohmann::json to_json(const BurstSummary& s);
// Strict readers; throw InputError naming `file` and the field.
Verdict verdict_from_json(const nlohmann::json& j, const std::string& file);
// A trace.jsonl line back into a StepRecord (every statistic the judge
// reads; tap order is the line's). Throws InputError naming `file`.
StepRecord step_record_from_json(const nlohmann::json& j, const std::string& file);
// One entry of a "step_hashes" list, [input hex, labels hex]; InputError
// naming file and step_hashes[index] otherwise.
StepHashes step_hashes_from_json(const nlohmann::json& entry, size_t index, const std::string& file);
BurstSummary summary_from_json(const nlohmann::json& j, const std::string& file);

// "" for a healthy verdict, else its failure class: "non_finite:<stage>",
// "extreme", "crashed" or "timeout". A shrink keeps a candidate only when its
// class is the original's.
std::string failure_class(const Verdict& v);
// The class plus the faulting tensor ("non_finite:forward:fc2_logits") or,
// for an extreme burst, the first rule of its onset ("extreme:grad_norm_limit"):
// what makes two failures distinct in a sweep.
std::string fault_signature(const Verdict& v);

}  // namespace spikehunt
