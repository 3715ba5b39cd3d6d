/// scenario.h — your training code under spikehunt: implement Scenario (a
/// model with taps, optimizers, data, a loss), register it by name with its
/// declared params, and every verb trains it ("scenario": "NAME" in a config).
///
/// Public names: Scenario, Tap, TapSink, Batch, NamedTensor, NamedOptimizer,
/// named_parameters, optimizer_state_of, register_scenario, ScenarioMaker,
/// scenario_class, make_scenario. The contract of one optimizer step is on
/// top of scenarios/scenario.h.
///
///   spikehunt::register_scenario("mine", [](const spikehunt::TrainingConfig& c) {
///     return std::make_unique<MyScenario>(c);
///   }, {spikehunt::ParamSpec::number("dropout", 0.1, 0, 1, "dropout after fc1")});
#pragma once

#include "spikehunt/config.h"
#include "spikehunt/version.h"

#include "scenarios/catalog.h"
#include "scenarios/scenario.h"
