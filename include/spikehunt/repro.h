/// repro.h — every failure made reproducible: a repro file (the config, every
/// step's input and label hashes, the verdict, the last healthy checkpoint)
/// recorded and replayed bit for bit.
///
/// Public names: Repro, record_repro, read_repro, write_repro, replay,
/// ReplayOptions, ReplayReport, draft_regression_test.
///
///   spikehunt::Repro repro = spikehunt::record_repro(config, "fails.repro.json");
///   spikehunt::ReplayReport r = spikehunt::replay(repro, "fails.repro.json", {});
#pragma once

#include "spikehunt/burst.h"

#include "harness/repro.h"
