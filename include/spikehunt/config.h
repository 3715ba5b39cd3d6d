/// config.h — TrainingConfig, one point of a search space, as a plain struct
/// with JSON that round-trips exactly, and the one error type for bad input.
///
/// Public names: TrainingConfig and its parts (ModelConfig, GptConfig,
/// ActivationConfig, OptimizerConfig, ProtocolConfig, DatasetConfig,
/// HealthRules, ScheduleConfig, Params, ParamSpec and their enums),
/// load_config, default_config, parse_config, save_config, config_to_json,
/// config_from_json, apply_overrides, config_diff, validate; InputError,
/// Problem and the exit codes kExitOk, kExitFinding, kExitBadInput,
/// kExitInternal. docs/config.md lists every field.
///
///   TrainingConfig c = spikehunt::load_config("my.json", {"optimizer.lr=0.01"});
#pragma once

#include "spikehunt/version.h"

#include "base/error.h"
#include "scenarios/config.h"
