// child_verdict.h — the verdict of a burst whose child process or worker
// (base/child.h) ended without writing its result.
#pragma once

#include <string>

#include "base/child.h"
#include "harness/record.h"

namespace spikehunt {

// Timeout, or crashed with how the child ended and the end of its log
// ("signal 11 (Segmentation fault): ...").
Verdict lost_child_verdict(const ChildExit& e, const std::string& log_path);

// A child killed by a signal the pool did not send (its one is a timeout's
// SIGKILL): the OOM killer, a preemption, an operator's kill, or the
// training code's own segfault or abort. Such a burst is run once more in a
// fresh worker before it is called crashed: an outside kill is not a finding.
bool killed_from_outside(const ChildExit& e);
// The exit code of a burst that refused to run: its process runs another build
// than the sweep that sent it (the code changed during the sweep).
inline constexpr int kExitOtherBuild = 4;

// What a timeout verdict's message gets when the second run timed out too (a burst past its timeout
// runs once more before it is a finding: the machine may have been busy).
inline constexpr const char* kTimedOutAgain =
    " (past its timeout again when run once more in a fresh worker: a timeout that repeats on this config)";
// What a crashed verdict's message gets when the second run was killed too.
inline constexpr const char* kKilledAgain =
    " (killed again when run once more in a fresh worker: a crash that repeats on this config)";

}  // namespace spikehunt
