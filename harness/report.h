// report.h — the text `spikehunt run` prints: the steps around the onset and
// the failure as a table (step, phase/epoch/batch, loss, grad norm, max |grad|,
// max activation, max optimizer state, health, rules), and the verdict.
#pragma once

#include <string>
#include <vector>

#include "base/number_format.h"
#include "harness/record.h"
#include "harness/trace.h"

namespace spikehunt {

// The rows worth reading: a few steps before the onset, the onset, the steps
// up to the failure (the middle elided when long: nullptr marks the gap), and
// without an onset, the last steps.
std::vector<const StepRecord*> story_rows(const Trace& trace, const Verdict& v, size_t context = 3);
std::string story_table(const Trace& trace, const Verdict& v);
// The rules that fired at the onset with their values against their thresholds
// ("grad_norm_growth ×1.6/step ≥ ×1.5 (value 67.5), grad_norm_limit 120 > 100").
std::string onset_rules_text(const Verdict& v);
std::string verdict_text(const Verdict& v, const Trace& trace);

}  // namespace spikehunt
