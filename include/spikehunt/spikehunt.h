/// spikehunt.h — the one header for users' training code (find_package(
/// spikehunt), link spikehunt::spikehunt). Put your own model, data and
/// training step under the monitor by implementing spikehunt::Scenario,
/// register it by name, and use it from configs ("scenario": "NAME") in run,
/// sweep, shrink, doctor, guard and report, or from code:
///
///   class MyScenario : public spikehunt::Scenario { ... };  // model with taps, data, loss
///   int main(int argc, char** argv) {
///     spikehunt::register_scenario("mine", [](const spikehunt::TrainingConfig& c) {
///       return std::make_unique<MyScenario>(c);
///     });
///     return spikehunt::cli_main(argc, argv);  // my_program sweep --space my_space.json ...
///   }
///
/// The public API is what the headers beside this one declare (each lists its
/// names): scenario.h, config.h, burst.h, doctor.h, guard.h, repro.h,
/// stability.h, cli.h, gtest.h and version.h. Everything else is internal
/// (installed under include/spikehunt/internal/) and may change without
/// notice. See docs/your-code.md and CHANGELOG.md.
#pragma once

#include "spikehunt/burst.h"
#include "spikehunt/cli.h"
#include "spikehunt/config.h"
#include "spikehunt/doctor.h"
#include "spikehunt/guard.h"
#include "spikehunt/repro.h"
#include "spikehunt/scenario.h"
#include "spikehunt/stability.h"
#include "spikehunt/version.h"

// Deprecated since 0.2.0: 0.1's spikehunt.h also included these internal
// headers, and code may use names only they declare. They stay included for
// this release and leave spikehunt.h in 0.3.0; define
// SPIKEHUNT_NO_DEPRECATED_INCLUDES to leave them out now (CHANGELOG.md).
#ifndef SPIKEHUNT_NO_DEPRECATED_INCLUDES
#include "generators/html_report.h"
#include "generators/lr_sensitivity.h"
#include "generators/sweep.h"
#include "harness/env.h"
#include "harness/record.h"
#endif
