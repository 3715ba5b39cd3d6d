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

}  // namespace spikehunt
