// verbs.h — one function a verb, each in the file named after it (cli/run.cpp
// adds `run`, ...); cli.cpp's add_verbs() calls them in the order help lists.
#pragma once

#include "cli/cli.h"

namespace spikehunt {

void add_run_verb(Cli& cli);             // run.cpp
void add_audit_verb(Cli& cli);           // audit.cpp
void add_guard_verb(Cli& cli);           // guard.cpp
void add_replay_verb(Cli& cli);          // replay.cpp
void add_doctor_verb(Cli& cli);          // doctor.cpp
void add_burst_verb(Cli& cli);           // burst.cpp (hidden)
void add_worker_verb(Cli& cli);          // worker.cpp (hidden)
void add_rank_verb(Cli& cli);            // rank.cpp (hidden)
void add_sweep_verb(Cli& cli);           // sweep.cpp
void add_merge_verb(Cli& cli);           // merge.cpp
void add_compare_verb(Cli& cli);         // compare.cpp
void add_shrink_verb(Cli& cli);          // shrink.cpp
void add_lr_sensitivity_verb(Cli& cli);  // lr_sensitivity.cpp
void add_calibrate_verb(Cli& cli);       // calibrate.cpp
void add_report_verb(Cli& cli);          // report.cpp

}  // namespace spikehunt
