// repro_file.h — the repro file format, without LibTorch (the fuzz targets
// parse it): the minimal config, the environment it failed in, the verdict,
// every step's input and label hash up to the failure, and where its
// checkpoint is. repro.h writes the checkpoint and replays.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/env.h"
#include "harness/record.h"
#include "scenarios/config.h"

namespace spikehunt {

struct ReproCheckpoint {
  std::string file;  // beside the repro file
  int64_t step = 0;  // the state entering this step
  MonitorState monitor;
};

// One file of the code that ran (the executable, the extension, a user's script and its local
// modules, a command's files: base/program.h's build files), by its XXH3-128.
struct CodeFile {
  std::string path;
  std::string hash;
};

// The code this process runs, file by file: what a repro records and replay compares.
std::vector<CodeFile> code_identity();
// One file's CodeFile::hash as it is now ("" when the file is gone).
std::string code_hash(const std::string& path);

struct Repro {
  TrainingConfig config;
  Environment environment;               // where it failed
  Verdict verdict;
  std::vector<StepHashes> step_hashes;   // every step run, up to the failure
  std::optional<ReproCheckpoint> checkpoint;
  std::string scenario_class;            // a registered scenario's C++ class ("" when unknown or built in)
  std::vector<CodeFile> code;            // the code that ran (absent in repros before it was recorded)
};

std::string repro_to_json(const Repro& repro);  // the file's text
// Strict: a bad file is an InputError naming `file` and the field.
Repro parse_repro(std::string_view text, const std::string& file);
Repro read_repro(const std::string& path);

// Files beside a repro "<dir>/<stem>.repro.json": "<dir>/<stem><suffix>".
// The trace of every step (record_repro writes it) is ".trace.jsonl".
std::string repro_sibling(const std::string& repro_path, const std::string& suffix);

}  // namespace spikehunt
