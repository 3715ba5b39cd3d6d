// registry.h — the one scenario registry: every name a config's "scenario"
// may take ("standard", the built-in one, and each register_scenario() name),
// with its maker, its declared params and, once one was built, its C++ class;
// and the built-in models' names. Without LibTorch (the parser fuzzers link
// it): catalog.h builds what it holds.
// Example:
//   register_scenario("mine", [](const TrainingConfig& c) { return std::make_unique<Mine>(c); },
//                     {ParamSpec::number("dropout", 0.1, 0, 1, "dropout after fc1")});
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "scenarios/config.h"

namespace spikehunt {

class Scenario;

// A scenario of your own, by name: configs with "scenario": NAME build it
// (run, sweep, shrink, doctor and guard then train your code). `params`
// declares its knobs (config "params"): an unknown name, a wrong type or a
// value out of range is then an InputError when a config is parsed, their
// defaults are filled in (--print-config shows them), and a space sweeps
// them as "params.NAME".
using ScenarioMaker = std::function<std::unique_ptr<Scenario>(const TrainingConfig&)>;
void register_scenario(const std::string& name, ScenarioMaker make, std::vector<ParamSpec> params = {});

// The scenario names a config may use: "standard" first, then every
// registered name in the order registered.
const std::vector<std::string>& scenario_names();
// A name configs may use without a maker (tests of config parsing).
void add_scenario_name(const std::string& name);
// A scenario's declared parameters (register_scenario declares them); null
// when it declares none (then any params are accepted as they are).
void declare_params(const std::string& scenario, std::vector<ParamSpec> specs);
const std::vector<ParamSpec>* declared_params(const std::string& scenario);

// The C++ class of a registered scenario, once one was built in this process
// ("SpiralsScenario"; "" before): draft regression tests register it by it.
std::string scenario_class(const std::string& name);

// A scenario written in Python (python/: spikehunt.register): its class and
// the file that registers it, which repro files record and drafted
// regression tests import; scenario_source() is "" for a C++ one.
void set_python_scenario(const std::string& name, const std::string& cls, const std::string& file);
std::string scenario_source(const std::string& name);

// The maker registered under `name`; empty when there is none.
ScenarioMaker scenario_maker(const std::string& name);
// Notes the C++ class a registered scenario's maker built (catalog.cpp's
// make_scenario tells it), for scenario_class(); a Python scenario keeps
// the class set_python_scenario named.
void set_scenario_class(const std::string& name, const std::string& cls);

// The built-in models (config.model.kind), in the order errors list them:
// simple_cnn, mlp, gpt. models.cpp builds each (make_model).
const std::vector<std::string>& model_kinds();

}  // namespace spikehunt
