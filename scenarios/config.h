// config.h — TrainingConfig: one point of the search space, as a plain struct.
// Every field has a default (the motivating case's values where it has one);
// JSON conversion lives in config.cpp and round-trips exactly (every field
// once in config_fields.h; reading a file with its overrides in
// config_file.cpp, Params in params.cpp); validate() (config_check.cpp) names
// every bad field with its value and a hint; describe_*() in
// config_describe.cpp.
// Example:
//   TrainingConfig c = load_config("configs/default.json", {"optimizer.lr=0.01"});
//   std::string text = config_to_json(c).dump(2);
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "scenarios/health_rules.h"

namespace spikehunt {

enum class ActivationKind { kRelu, kLeakyRelu, kGelu, kTanh, kSigmoid };
enum class OptimizerKind { kSgd, kAdam, kAdamW };
enum class DatasetKind { kSynthetic, kIdx, kText };
enum class DeviceKind { kCpu, kCuda };
enum class ScheduleKind { kConstant, kLinear, kCosine, kStep };
enum class ParamType { kNumber, kInteger, kBoolean, kString, kList };
enum class Precision { kFp32, kBf16, kFp16 };

constexpr int64_t kNumClasses = 10;  // every built-in image dataset has 10 classes
constexpr int64_t kTextVocab = 256;  // the text dataset's tokens are bytes

// A decoder-only transformer (model kind "gpt", on a text dataset).
struct GptConfig {
  int64_t width = 128;          // residual width, a multiple of heads, [8, 8192]
  int64_t layers = 2;           // blocks, [1, 64]
  int64_t heads = 4;            // attention heads, [1, 128]
  int64_t context = 64;         // tokens per sequence, [2, 8192]
  bool qk_layernorm = false;    // LayerNorm on each head's queries and keys (Wortsman et al. 2023)
  double z_loss = 0.0;          // loss += z_loss × mean(log² Z) over tokens; 1e-4 in Wortsman et al., [0, 1]
  bool tied_embeddings = false; // the output layer reuses the token embedding
};

struct ModelConfig {
  std::string kind = "simple_cnn";  // simple_cnn | mlp | gpt
  int64_t mlp_depth = 2;            // mlp hidden layers, [1, 64]
  int64_t mlp_width = 128;          // mlp units per hidden layer, [1, 65536]
  GptConfig gpt;                    // gpt
};

struct ActivationConfig {
  ActivationKind kind = ActivationKind::kLeakyRelu;
  double slope = 0.01;  // leaky_relu negative slope, [0, 1]
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  double lr = 0.05;                            // (0, 10]
  double momentum = 0.9;                       // sgd, [0, 1)
  bool nesterov = false;                       // sgd, needs momentum > 0
  double weight_decay = 0.0;                   // [0, 1]
  std::array<double, 2> betas = {0.9, 0.999};  // adam/adamw, each [0, 1)
  double eps = 1e-8;                           // adam/adamw, (0, 1]
  // adamw: decay by the schedule's factor × weight_decay each step, not by
  // lr × weight_decay (Wortsman et al.'s independent decay; 1e-4 is theirs).
  bool independent_weight_decay = false;
};

struct ProtocolConfig {
  // Domain i (named 'A' + i) trains on the classes listed in domains[i].
  std::vector<std::vector<int64_t>> domains = {{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}};
  std::vector<int64_t> task_order = {0, 1};  // a permutation of domain indices
  int64_t epochs_per_phase = 1;              // epochs on each domain, [1, 1000]
  int64_t relaxation_epochs = 1;             // then epochs on all classes, [0, 1000]
};

struct DatasetConfig {
  DatasetKind kind = DatasetKind::kSynthetic;
  std::string path = "/usr/share/datasets/fashion-mnist";  // idx directory (kind idx)
  int64_t synthetic_train_per_class = 500;  // synthetic: training images per class, [1, 100000]
  int64_t synthetic_test_per_class = 100;   // synthetic: held-out images per class, [1, 100000]
  // text: a file, or a directory whose regular files (not symlinks, not
  // *.dat) are read in name order; bytes are the tokens.
  std::string text_path = "/usr/share/games/fortunes";
};

// The learning-rate schedule the harness applies to every group of every
// optimizer of any scenario (lr_schedule.h): a group's lr at step s is the lr
// it was built with × factor(s). Warm-up first, then the kind's decay.
struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::kConstant;  // constant | linear | cosine | step
  int64_t warmup_steps = 0;  // linear warm-up: factor (s+1)/warmup_steps on the first steps, [0, 10^9]
  double min_lr = 0.0;       // linear/cosine: where the decay ends, for a group at optimizer.lr, [0, optimizer.lr]
  int64_t decay_steps = 0;   // linear/cosine: the step the decay ends at; 0: the last planned step
  int64_t step_size = 100;   // step: steps between drops after the warm-up, [1, 10^9]
  double gamma = 0.1;        // step: factor per drop, (0, 1]
};

// A scenario's own knobs ("params": {"warmup": 30, "dropout": 0.1}): flat
// JSON values (numbers, booleans, strings, lists of them), read by a
// scenario through typed accessors. Declared parameters (declare_params) are
// checked when a config is parsed and their defaults filled in, so a config
// always records every value its run used.
class Params {
 public:
  bool has(const std::string& name) const { return values_.contains(name); }
  // The value, which must be there (declared, or set in the config): an
  // InputError naming "params.NAME" when it is missing or of another type.
  double number(const std::string& name) const;
  int64_t integer(const std::string& name) const;
  bool boolean(const std::string& name) const;
  std::string string(const std::string& name) const;
  std::vector<double> numbers(const std::string& name) const;
  // The same with a fallback when the config does not set it.
  double number(const std::string& name, double fallback) const;
  int64_t integer(const std::string& name, int64_t fallback) const;
  bool boolean(const std::string& name, bool fallback) const;
  std::string string(const std::string& name, const std::string& fallback) const;

  void set(const std::string& name, nlohmann::json value) { values_[name] = std::move(value); }
  const nlohmann::json& values() const { return values_; }  // an object
  nlohmann::json& values() { return values_; }
  bool operator==(const Params& o) const { return values_ == o.values_; }

 private:
  const nlohmann::json& at(const std::string& name) const;
  nlohmann::json values_ = nlohmann::json::object();
};

// One declared parameter of a scenario: what --print-config shows, what a
// config is checked against, and what a space may sweep as "params.NAME".
struct ParamSpec {
  std::string name;
  ParamType type = ParamType::kNumber;
  nlohmann::json default_value;        // filled in when a config does not set it
  std::optional<double> min, max;      // numbers and integers: closed range
  std::vector<std::string> choices;    // strings: the allowed values (empty: any)
  std::string doc;                     // one line, shown with the defaults

  static ParamSpec number(std::string name, double default_value, double min, double max, std::string doc);
  static ParamSpec integer(std::string name, int64_t default_value, int64_t min, int64_t max, std::string doc);
  static ParamSpec boolean(std::string name, bool default_value, std::string doc);
  static ParamSpec string(std::string name, std::string default_value, std::vector<std::string> choices,
                          std::string doc);
  static ParamSpec list(std::string name, nlohmann::json default_value, std::string doc);
};

// The most LibTorch threads a config (`threads`) or a flag (`replay --threads`) may ask for.
constexpr int64_t kMaxThreads = 1024;

struct TrainingConfig {
  std::string name = "default";  // free text, shown in reports
  std::string scenario = "standard";  // a registered scenario (catalog.h); "standard": the built-in one
  ModelConfig model;
  ActivationConfig activation;
  OptimizerConfig optimizer;
  ProtocolConfig protocol;
  DatasetConfig dataset;
  HealthRules health;
  ScheduleConfig schedule;            // the learning rate over the steps
  Params params;                      // the scenario's own knobs
  uint64_t seed = 0;                  // weight init and data order (not the data itself)
  int64_t batch_size = 64;            // [1, 65536]
  int64_t max_batches_per_epoch = 0;  // 0: whole epochs; else a short burst
  double grad_clip = 0.0;             // max global grad norm; 0: no clipping
  int64_t accumulation_steps = 1;     // micro-batches per optimizer step (gradients summed, loss / k), [1, 4096]
  DeviceKind device = DeviceKind::kCpu;
  // fp32; bf16: forward and loss under autocast (fp32 master weights);
  // fp16: the same with dynamic loss scaling (a CUDA device only).
  Precision precision = Precision::kFp32;
  int64_t threads = 2;                // LibTorch intra-op threads, [1, kMaxThreads]
  // Data-parallel: the processes (ranks) a burst trains on, each its
  // contiguous shard of every batch, gradients averaged; [1, 64], at most batch_size.
  int64_t world_size = 1;
};

// ---- names ----
const char* to_string(ActivationKind k);
const char* to_string(OptimizerKind k);
const char* to_string(DatasetKind k);
const char* to_string(DeviceKind k);
const char* to_string(StopAt k);
const char* to_string(ScheduleKind k);
const char* to_string(ParamType t);
const char* to_string(Precision p);

// ---- JSON ----
nlohmann::json config_to_json(const TrainingConfig& c);
// Strict: wrong types and unknown keys are problems, reported all at once as
// an InputError naming `file`. Missing keys keep their defaults.
TrainingConfig config_from_json(const nlohmann::json& j, const std::string& file);
// Every out-of-range or inconsistent field.
std::vector<Problem> validate(const TrainingConfig& c);

// Applies "key=value" overrides (dotted keys, JSON or bare-string values) to a
// config's JSON. Keys that are not config fields are an InputError ("--set").
void apply_overrides(nlohmann::json& j, const std::vector<std::string>& overrides);

// The --set overrides that turn `base` into `c` ("optimizer.lr=0.3", ...),
// leaf by leaf in key order: the config as a diff, readable and replayable
// (apply_overrides(config_to_json(base), diff) gives c back).
std::vector<std::string> config_diff(const TrainingConfig& base, const TrainingConfig& c);

// Overrides, parses and validates config JSON that came from `file`.
TrainingConfig parse_config(nlohmann::json j, const std::string& file,
                            const std::vector<std::string>& overrides = {});
// Reads, overrides, parses and validates; throws InputError naming the file.
TrainingConfig load_config(const std::string& path,
                           const std::vector<std::string>& overrides = {});
// The built-in default (what `spikehunt run` uses without --config), with overrides.
TrainingConfig default_config(const std::vector<std::string>& overrides = {});
// Writes pretty JSON atomically (temp file + rename).
void save_config(const TrainingConfig& c, const std::string& path);

// Short one-line summaries for reports, e.g. "sgd lr=0.05 momentum=0.9".
std::string describe_optimizer(const OptimizerConfig& o);
std::string describe_activation(const ActivationConfig& a);
std::string describe_gpt(const GptConfig& g);  // "width 128, 2 layers, 4 heads, context 64, qk-layernorm"
// What the model's kind leaves open: the gpt's shape, else the activation.
std::string describe_model_details(const TrainingConfig& c);
std::string describe_protocol(const ProtocolConfig& p);
std::string describe_schedule(const ScheduleConfig& s);  // "" for a constant lr
std::string describe_params(const Params& p);             // "warmup=30 dropout=0.1"

}  // namespace spikehunt
