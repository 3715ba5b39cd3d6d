#include "harness/record.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <climits>
#include <cstdio>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json.h"
#include "base/number_format.h"

namespace spikehunt {

using json = nlohmann::json;

const char* to_string(Health h) {
  switch (h) {
    case Health::kFinite: return "finite";
    case Health::kExtreme: return "extreme";
    case Health::kNonFinite: return "non_finite";
  }
  return "?";
}

const char* to_string(Stage s) {
  switch (s) {
    case Stage::kForward: return "forward";
    case Stage::kLoss: return "loss";
    case Stage::kBackward: return "backward";
    case Stage::kOptimizerStep: return "optimizer_step";
  }
  return "?";
}

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::kHealthy: return "healthy";
    case Outcome::kExtreme: return "extreme";
    case Outcome::kNonFinite: return "non_finite";
    case Outcome::kCrashed: return "crashed";
    case Outcome::kTimeout: return "timeout";
  }
  return "?";
}

std::string Fault::describe() const {
  std::string s = tensor + " (" + to_string(stage) + "): ";
  std::string counts;
  auto add = [&](int64_t n, const char* what) {
    if (n > 0) counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  add(nan, "NaN");
  add(pos_inf, "+Inf");
  add(neg_inf, "-Inf");
  return s + counts + " of " + std::to_string(numel) + (rank >= 0 ? " on rank " + std::to_string(rank) : "");
}

std::optional<int64_t> Verdict::lead_time() const {
  if (!onset_step || !failure_step) return std::nullopt;
  return *failure_step - *onset_step;
}

json to_json(const Fault& f) {
  json j = {{"tensor", f.tensor}, {"stage", to_string(f.stage)}, {"nan", f.nan},
            {"pos_inf", f.pos_inf}, {"neg_inf", f.neg_inf},       {"numel", f.numel}};
  if (f.rank >= 0) j["rank"] = f.rank;
  return j;
}

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::string RuleHit::describe() const {
  const std::string q = " (value " + significant_named(quantity, 3) + ")";
  if (rule == "non_finite") return rule;
  if (ends_with(rule, "_growth")) {
    return rule + " ×" + significant_named(value, 3) + "/step ≥ ×" + significant_named(threshold, 3) + q;
  }
  if (ends_with(rule, "_spike")) return rule + " z " + significant_named(value, 3) + " > " + significant_named(threshold, 3) + q;
  if (ends_with(rule, "_sigma")) return rule + " " + significant_named(value, 3) + "σ > " + significant_named(threshold, 3) + "σ" + q;
  const std::string at = tensor.empty() ? "" : " at " + tensor;
  return rule + " " + significant_named(value, 3) + " > " + significant_named(threshold, 3) + at;
}

std::string describe_movers(const std::vector<Mover>& movers, int64_t onset, size_t max_named) {
  std::string s;
  for (size_t i = 0; i < movers.size() && i < max_named; ++i) {
    const Mover& m = movers[i];
    const int64_t before = onset - m.since;
    const std::string ratio = std::isinf(m.ratio) ? "non-finite" : significant_named(m.ratio, 3) + "×";
    const std::string ahead = std::to_string(before) + (before == 1 ? " step" : " steps") + " before the onset";
    if (i == 0) {
      s = m.tensor + " " + m.quantity + " " + (std::isinf(m.ratio) ? "non-finite" : ratio + " its trailing median") +
          (before == 0 ? " at the onset" : ", climbing since step " + std::to_string(m.since) + " (" + ahead + ")");
    } else {
      s += ", then " + m.tensor + " " + m.quantity + " (" + ratio + ", " +
           (before == 0 ? "at the onset" : "since step " + std::to_string(m.since) + ", " + ahead) + ")";
    }
  }
  return s;
}

json to_json(const RuleHit& h) {
  json j = {{"rule", h.rule}, {"value", number(h.value)}, {"threshold", number(h.threshold)},
            {"quantity", number(h.quantity)}};
  if (!h.tensor.empty()) j["tensor"] = h.tensor;
  return j;
}

json to_json(const Mover& m) {
  return {{"tensor", m.tensor}, {"quantity", m.quantity}, {"ratio", number(m.ratio)},
          {"value", number(m.value)}, {"baseline", number(m.baseline)}, {"since", m.since}};
}

namespace {

template <class T>
json list_json(const std::vector<T>& items) {
  json a = json::array();
  for (const T& x : items) a.push_back(to_json(x));
  return a;
}

// The statistics of a step and of a layer, by their JSON names: the trace
// writer and reader both walk these lists.
template <class Record, class V>
void each_step_number(Record& r, V&& v) {
  v("loss", r.loss);
  v("grad_norm", r.grad_norm);
  v("grad_max", r.grad_max);
  v("param_norm_before", r.param_norm_before);
  v("param_norm_after", r.param_norm_after);
  v("state_norm", r.state_norm);
  v("state_max", r.state_max);
  v("input_max", r.input_max);
  v("output_max", r.output_max);
  v("activation_max", r.activation_max);
  v("lr", r.lr);
  v("update_norm", r.update_norm);
  v("update_ratio", r.update_ratio);
  v("grad_spike_score", r.grad_spike_score);
}

template <class Metrics, class V>
void each_metric_number(Metrics& m, V&& v) {
  v("init_loss", m.init_loss);
  v("final_loss", m.final_loss);
  v("last_train_loss", m.last_train_loss);
  v("max_attention_logit", m.max_attention_logit);
  v("max_logit_z", m.max_logit_z);
}

// Statistics added after traces were first written (older traces lack them).
bool is_later_field(const std::string& key) {
  return key == "output_max" || key == "lr" || key == "update_norm" || key == "update_ratio" ||
         key == "grad_spike_score";
}

template <class Layer, class V>
void each_layer_number(Layer& l, V&& v) {
  v("grad_norm", l.grad_norm);
  v("grad_max", l.grad_max);
  v("param_norm_before", l.param_norm_before);
  v("param_norm_after", l.param_norm_after);
  v("state_norm", l.state_norm);
  v("state_max", l.state_max);
  v("update_norm", l.update_norm);
  v("update_ratio", l.update_ratio);
  v("grad_spike_score", l.grad_spike_score);
}

}  // namespace

namespace {

// A JSON value as text, as nlohmann::json's dump() writes it: a trace line is
// written straight into text, byte for byte what dumping its json object
// wrote (readers, merges and tests compare lines), without building one.
void put_double(std::string& out, double x) {  // null when not finite, as dump() writes it
  if (!std::isfinite(x)) {
    out += "null";
    return;
  }
  char b[64];
  out.append(b, nlohmann::detail::to_chars(b, b + sizeof b, x));
}

void put_number(std::string& out, double x) {  // number(x): non-finite as the strings "nan", "inf", "-inf"
  if (std::isnan(x)) out += "\"nan\"";
  else if (std::isinf(x)) out += x > 0 ? "\"inf\"" : "\"-inf\"";
  else put_double(out, x);
}

void put_integer(std::string& out, int64_t v) {
  char b[24];
  out.append(b, std::to_chars(b, b + sizeof b, v).ptr);
}

void put_string(std::string& out, std::string_view s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
  });
  if (!plain) {  // escapes and UTF-8 (checked, as dump() checks it) by the library
    out += json(std::string(s)).dump();
    return;
  }
  out += '"';
  out += s;
  out += '"';
}

template <class T, class Put>
void put_array(std::string& out, const std::vector<T>& items, Put&& put) {
  out += '[';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ',';
    put(out, items[i]);
  }
  out += ']';
}

// An object's members written in any order and dumped in the order a
// nlohmann::json (a std::map) keeps its keys; a key given twice keeps its
// last value, as assigning it twice does. Keys must outlive the object.
class ObjectText {
 public:
  // The text the value of `key` is appended to, until the next key.
  std::string& operator[](std::string_view key) {
    keys_.push_back({key, text_.size()});
    return text_;
  }
  void write(std::string& out) const {
    std::vector<size_t> order(keys_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys_[a].key < keys_[b].key; });
    out += '{';
    bool first = true;
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t i = order[k];
      if (k + 1 < order.size() && keys_[order[k + 1]].key == keys_[i].key) continue;  // assigned again later
      const size_t end = i + 1 < keys_.size() ? keys_[i + 1].at : text_.size();
      if (!first) out += ',';
      first = false;
      put_string(out, keys_[i].key);
      out += ':';
      out.append(text_, keys_[i].at, end - keys_[i].at);
    }
    out += '}';
  }

 private:
  struct Key {
    std::string_view key;
    size_t at;  // where its value starts in text_
  };
  std::vector<Key> keys_;
  std::string text_;
};

}  // namespace

void append_trace_line(const StepRecord& r, std::string& out) {
  ObjectText j;
  put_integer(j["step"], r.step);
  put_string(j["phase"], r.phase_name);
  put_integer(j["phase_index"], r.phase);
  put_integer(j["epoch"], r.epoch);
  put_integer(j["batch"], r.batch);
  put_string(j["input_hash"], r.input_hash.hex());
  put_string(j["label_hash"], r.label_hash.hex());
  put_string(j["health"], to_string(r.health));
  put_array(j["rules"], r.rules, [](std::string& o, const std::string& x) { put_string(o, x); });
  put_double(j["step_ms"], r.step_ms);
  ObjectText taps;
  for (const TapStats& t : r.taps) put_number(taps[t.name], t.max_abs);
  taps.write(j["activations"]);
  put_array(j["layers"], r.layers, [](std::string& o, const LayerStats& l) {
    ObjectText layer;
    put_string(layer["name"], l.name);
    layer["is_weight"] += l.is_weight ? "true" : "false";
    if (l.adaptive) layer["adaptive"] += "true";
    each_layer_number(l, [&](const char* key, double x) { put_number(layer[key], x); });
    layer.write(o);
  });
  each_step_number(r, [&](const char* key, double x) { put_number(j[key], x); });
  if (r.fault) j["fault"] += to_json(*r.fault).dump();
  if (!r.hits.empty()) j["hits"] += list_json(r.hits).dump();
  if (!r.movers.empty()) j["movers"] += list_json(r.movers).dump();
  if (r.micro_batches != 1) put_integer(j["micro_batches"], r.micro_batches);
  if (r.label_histogram.size() <= kTraceHistogramClasses) {
    put_array(j["label_histogram"], r.label_histogram, put_integer);
  } else {
    put_integer(j["classes"], int64_t(r.label_histogram.size()));  // the histogram's length, without its counts
  }
  if (r.loss_scale > 0) {
    put_number(j["loss_scale"], r.loss_scale);
    j["skipped"] += r.skipped ? "true" : "false";
  }
  if (r.groups.size() > 1) {
    put_array(j["groups"], r.groups, [](std::string& o, const GroupStats& g) {
      ObjectText group;
      put_string(group["optimizer"], g.optimizer);
      put_integer(group["group"], g.group);
      put_number(group["lr"], g.lr);
      put_number(group["state_norm"], g.state_norm);
      put_number(group["state_max"], g.state_max);
      group.write(o);
    });
  }
  j.write(out);
}

std::string trace_line(const StepRecord& r) {
  std::string line;
  append_trace_line(r, line);
  return line;
}

json to_json(const StepRecord& r) { return json::parse(trace_line(r)); }

namespace {

Hash128 hash_from(const json& v, const std::string& field, const std::string& file) {
  Hash128 h;
  if (!v.is_string() || !Hash128::parse(v.get<std::string>(), &h)) {
    throw InputError(file, field, v.dump(), "is not a 32-digit hex XXH3-128 hash");
  }
  return h;
}

template <class E, size_t N>
E enum_from(const json& v, const std::array<E, N>& values, const std::string& field, const std::string& file) {
  for (E e : values) {
    if (v.is_string() && v.get<std::string>() == to_string(e)) return e;
  }
  throw InputError(file, field, v.dump(), "is not a known value");
}

constexpr std::array<Stage, 4> kStages = {Stage::kForward, Stage::kLoss, Stage::kBackward, Stage::kOptimizerStep};
constexpr std::array<Outcome, 5> kOutcomes = {Outcome::kHealthy, Outcome::kExtreme, Outcome::kNonFinite,
                                              Outcome::kCrashed, Outcome::kTimeout};

Fault fault_from_json(const json& f, const std::string& field, const std::string& file) {
  auto integer = [&](const char* k) { return json_integer(f.at(k), field + "." + k, file); };
  Fault fault{f.at("tensor").get<std::string>(), enum_from(f.at("stage"), kStages, field + ".stage", file),
              integer("nan"), integer("pos_inf"), integer("neg_inf"), integer("numel")};
  if (f.contains("rank")) fault.rank = integer("rank");
  return fault;
}

std::vector<RuleHit> hits_from(const json& a) {
  std::vector<RuleHit> out;
  for (const json& h : a) {
    out.push_back({h.at("rule").get<std::string>(), number_from(h.at("value")), number_from(h.at("threshold")),
                   number_from(h.at("quantity")), h.value("tensor", std::string())});
  }
  return out;
}

std::vector<Mover> movers_from(const json& a) {
  std::vector<Mover> out;
  for (const json& m : a) {
    out.push_back({m.at("tensor").get<std::string>(), m.at("quantity").get<std::string>(), number_from(m.at("ratio")),
                   number_from(m.at("value")), number_from(m.at("baseline")), m.at("since").get<int64_t>()});
  }
  return out;
}

}  // namespace

StepRecord step_record_from_json(const json& j, const std::string& file) {
  try {
    StepRecord r;
    r.step = j.at("step").get<int64_t>();
    r.phase_name = j.at("phase").get<std::string>();
    r.phase = j.value("phase_index", int64_t{0});
    r.epoch = j.at("epoch").get<int64_t>();
    r.batch = j.at("batch").get<int64_t>();
    // Fields that came later: a trace without them reads them as 0.
    each_step_number(r, [&](const char* key, double& x) {
      x = is_later_field(key) && !j.contains(key) ? 0.0 : number_from(j.at(key));
    });
    r.micro_batches = j.value("micro_batches", int64_t{1});
    r.loss_scale = j.contains("loss_scale") ? number_from(j.at("loss_scale")) : 0.0;
    r.skipped = j.value("skipped", false);
    for (const auto& [name, v] : j.at("activations").items()) r.taps.push_back({name, number_from(v)});
    for (const json& l : j.at("layers")) {
      LayerStats s;
      s.name = l.at("name").get<std::string>();
      s.is_weight = l.value("is_weight", false);
      s.adaptive = l.value("adaptive", false);
      each_layer_number(s, [&](const char* key, double& x) {
        x = is_later_field(key) && !l.contains(key) ? 0.0 : number_from(l.at(key));
      });
      r.layers.push_back(s);
    }
    r.input_hash = hash_from(j.at("input_hash"), "input_hash", file);
    r.label_hash = hash_from(j.at("label_hash"), "label_hash", file);
    r.label_histogram = j.value("label_histogram", std::vector<int64_t>{});
    r.health = enum_from(j.at("health"), std::array<Health, 3>{Health::kFinite, Health::kExtreme, Health::kNonFinite},
                         "health", file);
    r.rules = j.value("rules", std::vector<std::string>{});
    r.hits = hits_from(j.value("hits", json::array()));
    r.movers = movers_from(j.value("movers", json::array()));
    if (j.contains("fault")) {
      r.fault = fault_from_json(j.at("fault"), "fault", file);
    }
    r.step_ms = j.value("step_ms", 0.0);
    return r;
  } catch (const json::exception& e) {
    throw InputError(file, "step", j.is_object() && j.contains("step") ? j["step"].dump() : "",
                     std::string("is not a trace record: ") + e.what());
  }
}

std::string failure_class(const Verdict& v) {
  switch (v.outcome) {
    case Outcome::kHealthy: return "";
    case Outcome::kNonFinite: return std::string("non_finite:") + (v.fault ? to_string(v.fault->stage) : "?");
    default: return to_string(v.outcome);
  }
}

std::string fault_signature(const Verdict& v) {
  std::string s = failure_class(v);
  if (v.outcome == Outcome::kNonFinite && v.fault) s += ":" + v.fault->tensor;
  if (v.outcome == Outcome::kExtreme && !v.onset_rules.empty()) s += ":" + v.onset_rules.front();
  return s;
}

Verdict verdict_from_json(const json& j, const std::string& file) {
  try {
    Verdict v;
    v.outcome = enum_from(j.at("outcome"), kOutcomes, "verdict.outcome", file);
    auto integer = [&](const json& obj, const char* k) { return json_integer(obj.at(k), std::string("verdict.") + k, file); };
    auto opt = [&](const char* k) { return j.at(k).is_null() ? std::nullopt : std::optional<int64_t>(integer(j, k)); };
    v.onset_step = opt("onset_step");
    v.failure_step = opt("failure_step");
    v.onset_rules = j.at("onset_rules").get<std::vector<std::string>>();
    if (!j.at("fault").is_null()) {
      v.fault = fault_from_json(j.at("fault"), "verdict.fault", file);
    }
    v.steps_run = integer(j, "steps_run");
    v.planned_steps = integer(j, "planned_steps");
    v.wall_seconds = number_from(j.at("wall_seconds"));
    v.hash_chain = hash_from(j.at("hash_chain"), "verdict.hash_chain", file);
    v.message = j.at("message").get<std::string>();
    v.crash_stage = j.value("stage", std::string());
    v.crash_cause = j.value("cause", std::string());
    v.onset_hits = hits_from(j.value("onset_hits", json::array()));
    v.movers = movers_from(j.value("movers", json::array()));
    for (const json& w : j.value("warnings", json::array())) {
      v.warnings.push_back({w.at("message").get<std::string>(), integer(w, "count")});
    }
    const std::pair<const char*, std::optional<int64_t>> counts[] = {{"onset_step", v.onset_step},
                                                                     {"failure_step", v.failure_step},
                                                                     {"steps_run", v.steps_run},
                                                                     {"planned_steps", v.planned_steps}};
    for (const auto& [name, value] : counts) {
      if (value && *value < 0) {
        throw InputError(file, std::string("verdict.") + name, std::to_string(*value), "is negative",
                         "steps count from 0: the file was edited or is not spikehunt's");
      }
    }
    return v;
  } catch (const json::exception& e) {
    throw InputError(file, "verdict", "", std::string("is malformed: ") + e.what());
  }
}

BurstSummary summary_of(Verdict verdict, std::vector<StepHashes> step_hashes) {
  BurstSummary s;
  s.verdict = std::move(verdict);
  s.step_hashes = std::move(step_hashes);
  if (!s.step_hashes.empty()) s.first = s.step_hashes.front();
  return s;
}

json to_json(const BurstSummary& s) {
  json hashes = json::array();
  for (const StepHashes& h : s.step_hashes) hashes.push_back({h.input.hex(), h.labels.hex()});
  json j = {{"verdict", to_json(s.verdict)},
            {"first_input_hash", s.first.input.hex()},
            {"first_label_hash", s.first.labels.hex()},
            {"step_hashes", hashes}};
  if (s.metrics) {
    const RunMetrics& m = *s.metrics;
    json& out = j["metrics"];
    each_metric_number(m, [&](const char* key, double x) { out[key] = number(x); });
    out["heldout_samples"] = m.heldout_samples;
  }
  if (s.environment) j["environment"] = to_json(*s.environment);
  return j;
}

StepHashes step_hashes_from_json(const json& entry, size_t index, const std::string& file) {
  const std::string field = "step_hashes[" + std::to_string(index) + "]";
  if (!entry.is_array() || entry.size() != 2) throw InputError(file, field, entry.dump(), "is not [input, labels]");
  return {hash_from(entry[0], field, file), hash_from(entry[1], field, file)};
}

BurstSummary summary_from_json(const json& j, const std::string& file) {
  if (!j.is_object() || !j.contains("verdict")) throw InputError(file, "verdict", "", "is missing");
  BurstSummary s;
  s.verdict = verdict_from_json(j["verdict"], file);
  s.first.input = hash_from(j.value("first_input_hash", json()), "first_input_hash", file);
  s.first.labels = hash_from(j.value("first_label_hash", json()), "first_label_hash", file);
  const json hashes = j.value("step_hashes", json::array());
  if (!hashes.is_array()) throw InputError(file, "step_hashes", "", "is not a list");
  for (size_t i = 0; i < hashes.size(); ++i) s.step_hashes.push_back(step_hashes_from_json(hashes[i], i, file));
  if (j.contains("metrics")) {
    const json& m = j["metrics"];
    RunMetrics r;
    try {
      each_metric_number(r, [&](const char* key, double& x) { x = number_from(m.at(key)); });
      r.heldout_samples = json_integer(m.at("heldout_samples"), "metrics.heldout_samples", file);
    } catch (const json::exception& e) {
      throw InputError(file, "metrics", m.dump(), "is not a metrics object", e.what());
    }
    s.metrics = r;
  }
  if (j.contains("environment")) s.environment = environment_from_json(j["environment"], "environment", file);
  return s;
}

std::string describe_warnings(const std::vector<WarningCount>& warnings) {
  std::string s;
  for (const WarningCount& w : warnings) s += "  " + thousands(w.count) + "x " + w.message + "\n";
  return s;
}

json to_json(const Verdict& v) {
  auto opt = [](const std::optional<int64_t>& x) { return x ? json(*x) : json(nullptr); };
  json j = {{"outcome", to_string(v.outcome)},
          {"onset_step", opt(v.onset_step)},
          {"failure_step", opt(v.failure_step)},
          {"lead_time", opt(v.lead_time())},
          {"onset_rules", v.onset_rules},
          {"fault", v.fault ? to_json(*v.fault) : json(nullptr)},
          {"steps_run", v.steps_run},
          {"planned_steps", v.planned_steps},
          {"wall_seconds", v.wall_seconds},
          {"hash_chain", v.hash_chain.hex()},
          {"message", v.message}};
  if (!v.onset_hits.empty()) j["onset_hits"] = list_json(v.onset_hits);
  if (!v.movers.empty()) {
    j["movers"] = list_json(v.movers);
    if (v.onset_step) j["first_mover"] = describe_movers(v.movers, *v.onset_step);
  }
  if (!v.crash_stage.empty()) j["stage"] = v.crash_stage;
  if (!v.crash_cause.empty()) j["cause"] = v.crash_cause;
  if (!v.warnings.empty()) {
    json w = json::array();
    for (const WarningCount& c : v.warnings) w.push_back({{"message", c.message}, {"count", c.count}});
    j["warnings"] = w;
  }
  return j;
}

}  // namespace spikehunt
