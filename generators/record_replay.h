// record_replay.h — a shrunk failure made reproducible: its repro recorded in
// one child process, then replayed (from its checkpoint) in another, and the
// replay's verdict line. Used by sweep, merge and shrink.
#pragma once

#include <string>

#include "scenarios/config.h"

namespace spikehunt {

// Records the repro of `config` at `path` (a child process runs it) and
// replays it from its checkpoint in another child; returns the replay's
// verdict line ("reproduced: ..." or what went wrong: the recorded run failed
// with another fault signature than `expected_signature`) and sets *ok.
std::string record_and_replay(const std::string& binary, const TrainingConfig& config, const std::string& path,
                              const std::string& expected_signature, double timeout_seconds, const std::string& work_dir,
                              bool* ok);

}  // namespace spikehunt
