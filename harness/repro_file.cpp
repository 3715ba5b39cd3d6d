#include "harness/repro_file.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/files.h"
#include "base/hash.h"
#include "base/program.h"

namespace spikehunt {

using json = nlohmann::json;

namespace {

constexpr int kReproVersion = 1;

}  // namespace

std::string code_hash(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "";
  const std::string bytes = read_file(path);
  return hash_bytes(bytes.data(), bytes.size()).hex();
}

std::vector<CodeFile> code_identity() {
  std::vector<CodeFile> files;
  for (const std::string& f : build_files_of(self_executable())) files.push_back({f, code_hash(f)});
  return files;
}

std::string repro_to_json(const Repro& repro) {
  json hashes = json::array();
  for (const StepHashes& h : repro.step_hashes) hashes.push_back({h.input.hex(), h.labels.hex()});
  json checkpoint = nullptr;
  if (repro.checkpoint) {
    checkpoint = {{"file", repro.checkpoint->file},
                  {"step", repro.checkpoint->step},
                  {"monitor", {{"chain", repro.checkpoint->monitor.chain.hex()}, {"judge", repro.checkpoint->monitor.judge}}}};
  }
  json j = {{"spikehunt_repro", kReproVersion},
                  {"config", config_to_json(repro.config)},
                  {"environment", to_json(repro.environment)},
                  {"verdict", to_json(repro.verdict)},
                  {"step_hashes", hashes},
                  {"checkpoint", checkpoint}};
  if (!repro.scenario_class.empty()) j["scenario_class"] = repro.scenario_class;
  if (!repro.code.empty()) {
    json code = json::array();
    for (const CodeFile& f : repro.code) code.push_back({{"path", f.path}, {"hash", f.hash}});
    j["code"] = code;
  }
  return j.dump(1) + "\n";
}

Repro parse_repro(std::string_view text, const std::string& path) {
  // Every step's hashes (a long burst has millions) go straight into 32
  // bytes each as they are parsed, not into JSON values of ~250: the list
  // stays in the document, empty.
  std::vector<StepHashes> hashes;
  bool in_hashes = false;
  const json::parser_callback_t compact = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) {
      in_hashes = parsed == "step_hashes";
      return true;
    }
    const bool entry_done = event == json::parse_event_t::array_end || event == json::parse_event_t::object_end ||
                            event == json::parse_event_t::value;
    if (!in_hashes || depth != 2 || !entry_done) return true;
    hashes.push_back(step_hashes_from_json(parsed, hashes.size(), path));
    return false;
  };
  const json j = json::parse(text, compact, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw InputError(path, "", "", "is not a JSON repro file");
  const json version = j.value("spikehunt_repro", json());
  if (version != kReproVersion) {
    throw InputError(path, "spikehunt_repro", version.dump(), "is not a repro format this spikehunt reads (1)");
  }
  Repro r;
  if (!j.contains("config")) throw InputError(path, "config", "", "is missing");
  r.config = config_from_json(j["config"], path);
  std::vector<Problem> problems = validate(r.config);
  for (Problem& p : problems) p.field = "config." + p.field;
  if (!problems.empty()) throw InputError(path, std::move(problems));
  const BurstSummary s = summary_from_json({{"verdict", j.value("verdict", json())},
                                            {"first_input_hash", std::string(32, '0')},
                                            {"first_label_hash", std::string(32, '0')},
                                            {"step_hashes", j.value("step_hashes", json::array())}},
                                           path);
  r.verdict = s.verdict;
  r.step_hashes = std::move(hashes);
  // The replay checks every step's hashes against these: a list missing or
  // cut short is a bad file, not a replay that went another way.
  if (!j.contains("step_hashes")) {
    throw InputError(path, "step_hashes", "", "is missing", "a repro lists the input and label hashes of every step it ran");
  }
  if (int64_t(r.step_hashes.size()) != r.verdict.steps_run) {
    throw InputError(path, "step_hashes", std::to_string(r.step_hashes.size()) + " steps",
                     "does not match verdict.steps_run (" + std::to_string(r.verdict.steps_run) + ")",
                     "the file was cut short or edited: record it again");
  }
  r.environment = environment_from_json(j.value("environment", json::object()), "environment", path);
  if (const json cls = j.value("scenario_class", json("")); cls.is_string()) r.scenario_class = cls.get<std::string>();
  else throw InputError(path, "scenario_class", cls.dump(), "must be a string");
  const json code = j.value("code", json::array());
  if (!code.is_array()) throw InputError(path, "code", code.dump().substr(0, 60), "must be a list of {path, hash}");
  for (size_t i = 0; i < code.size(); ++i) {
    const json& f = code[i];
    if (!f.is_object() || !f.value("path", json()).is_string() || !f.value("hash", json()).is_string()) {
      throw InputError(path, "code[" + std::to_string(i) + "]", f.dump().substr(0, 60),
                       "must be an object {\"path\": string, \"hash\": string}");
    }
    r.code.push_back({f["path"].get<std::string>(), f["hash"].get<std::string>()});
  }
  const json c = j.value("checkpoint", json());
  if (!c.is_null()) {
    try {
      ReproCheckpoint cp;
      cp.file = c.at("file").get<std::string>();
      cp.step = json_integer(c.at("step"), "checkpoint.step", path);
      if (!Hash128::parse(c.at("monitor").at("chain").get<std::string>(), &cp.monitor.chain)) {
        throw InputError(path, "checkpoint.monitor.chain", "", "is not a 32-digit hex hash");
      }
      cp.monitor.judge = c.at("monitor").at("judge");
      const json& judge = cp.monitor.judge;  // HealthJudge::state(): checked here, restored at replay
      if (!judge.is_object()) throw InputError(path, "checkpoint.monitor.judge", "", "is not an object");
      json_integer(judge.value("phase", json()), "checkpoint.monitor.judge.phase", path);
      for (const char* w : {"loss", "grad_norm", "activation"}) {
        const json& values = judge.value(w, json());
        bool ok = values.is_array();
        for (const json& x : ok ? values : json::array()) ok = ok && x.is_number();
        if (!ok) throw InputError(path, std::string("checkpoint.monitor.judge.") + w, "", "is not a list of numbers");
      }
      if (cp.file.empty() || cp.file.find('/') != std::string::npos) {
        throw InputError(path, "checkpoint.file", cp.file, "must name a file beside the repro");
      }
      if (cp.step < 0) throw InputError(path, "checkpoint.step", std::to_string(cp.step), "is negative");
      r.checkpoint = cp;
    } catch (const json::exception& e) {
      throw InputError(path, "checkpoint", "", std::string("is malformed: ") + e.what());
    }
  }
  return r;
}

Repro read_repro(const std::string& path) { return parse_repro(read_file(path, uint64_t{256} << 20), path); }

std::string repro_sibling(const std::string& repro_path, const std::string& suffix) {
  std::string base = repro_path;
  const std::string ext = ".repro.json";
  if (base.size() > ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0) {
    base.resize(base.size() - ext.size());
  }
  return base + suffix;
}

}  // namespace spikehunt
