// spikehunt.h — the one header for users' training code (find_package(spikehunt),
// link spikehunt::generators). Put your own model, data and training step
// under the monitor by implementing spikehunt::Scenario, register it by name,
// and use it from configs ("scenario": "NAME") in run, sweep, shrink, doctor,
// guard and report, or from code:
//
//   class MyScenario : public spikehunt::Scenario { ... };  // model with taps, data, loss
//   int main(int argc, char** argv) {
//     spikehunt::register_scenario("mine", [](const spikehunt::TrainingConfig& c) {
//       return std::make_unique<MyScenario>(c);
//     });
//     return spikehunt::cli_main(argc, argv);  // my_program sweep --space my_space.json ...
//   }
//
// In-process: run_burst / run_config (a burst and its verdict), run_doctor
// (vital signs), guard_record / guard_check, check_stability (the property
// behind SPIKEHUNT_EXPECT_STABLE in <spikehunt/gtest.h>), record_repro / replay.
#pragma once

#include "generators/cli.h"
#include "generators/html_report.h"
#include "generators/lr_sensitivity.h"
#include "generators/space.h"
#include "generators/stability.h"
#include "generators/sweep.h"
#include "harness/burst.h"
#include "harness/doctor.h"
#include "harness/env.h"
#include "harness/guard.h"
#include "harness/monitor.h"
#include "harness/record.h"
#include "harness/repro.h"
#include "scenarios/catalog.h"
#include "scenarios/config.h"
#include "scenarios/error.h"
#include "scenarios/scenario.h"
