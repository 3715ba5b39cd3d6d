// space.h — SearchSpace: which config fields a sweep explores, over which set
// or closed range, and the *simplest* value shrinking moves toward.
// A space file is JSON:
//   {
//     "base": { ...config fields... },        // optional; the built-in default otherwise
//     "dimensions": {
//       "optimizer.lr":        {"log_range": [0.01, 1.0]},           // simplest: the low end
//       "optimizer.momentum":  {"range": [0, 0.99], "step": 0.01},
//       "activation.kind":     {"set": ["relu", "leaky_relu"]},      // simplest: the first
//       "protocol.task_order": {"permutations": true},               // simplest: identity
//       "seed":                {"range": [0, 9], "simplest": 0}
//     },
//     "map": ["optimizer.lr", "optimizer.momentum"]  // optional: the failure map's axes
//   }
// Each dimension is a finite list of values ordered by distance from its
// simplest value (index 0): a point of the space is one index ("digit") per
// scalar dimension, and n-1 Lehmer-code digits for a permutation of n
// domains. Shrinking lowers digits; all-zero digits are the simplest config.
//   log_range [lo, hi]  nice values (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k)
//                       in [lo, hi] plus both ends: log-uniform, ≤ 2 significant digits
//   range [lo, hi]      integers when both ends are integers, else lo + k·step
//                       (step defaults to (hi − lo)/100), both ends included
//   set [v, ...]        any JSON values the field accepts
//   permutations: true  task orders, for the base config's number of domains
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/config.h"

namespace spikehunt {

// How a dimension lists its values (above); each kind's name is its key in a space file.
enum class DimensionKind { kLogRange, kRange, kSet, kPermutations };
const char* to_string(DimensionKind k);  // "log_range", "range", "set", "permutations"

struct Dimension {
  std::string field;                // dotted config path, e.g. "optimizer.lr"
  DimensionKind kind = DimensionKind::kSet;
  std::vector<nlohmann::json> values;  // by distance from the simplest (values[0]); empty for permutations
  int64_t domains = 0;              // permutations: how many domains are ordered
  bool permutations() const { return kind == DimensionKind::kPermutations; }
  bool log_scale() const { return kind == DimensionKind::kLogRange; }
  // A range of numbers (log_range or range): its values are ordered along the number line.
  bool numeric_range() const { return kind == DimensionKind::kLogRange || kind == DimensionKind::kRange; }
  int64_t arity() const { return permutations() ? std::max<int64_t>(domains - 1, 0) : 1; }
  // Exclusive upper bound of digit d (0 ≤ d < arity()).
  int64_t digit_limit(int64_t d) const { return permutations() ? domains - d : int64_t(values.size()); }
};

// One point: every dimension's digits, concatenated in dimension order.
using SpacePoint = std::vector<int64_t>;

class SearchSpace {
 public:
  // Parses and checks a space; every problem is an InputError naming `file`
  // and the dimension (empty range, min > max, unknown field, a value the
  // field rejects, a simplest value outside the domain, unknown keys).
  static SearchSpace from_json(const nlohmann::json& j, const std::string& file);
  static SearchSpace load(const std::string& path);
  // The built-in space `spikehunt sweep` explores without --space (configs/space.json).
  static SearchSpace builtin();

  const std::vector<Dimension>& dimensions() const { return dims_; }
  const nlohmann::json& base() const { return base_; }  // the base config as JSON
  int64_t digits() const;                                 // length of a SpacePoint
  int64_t digit_limit(int64_t i) const;                   // exclusive bound of digit i
  int64_t dimension_of(int64_t digit) const;              // which dimension digit i belongs to

  // The config at a point; throws InputError when the combination is invalid
  // (e.g. nesterov without momentum).
  TrainingConfig config(const SpacePoint& p) const;
  nlohmann::json config_json(const SpacePoint& p) const;
  bool valid(const SpacePoint& p) const;
  // The config every dimension shrinks toward (the base when that
  // combination is invalid): minimal configs are shown as a diff from it.
  TrainingConfig simplest() const;
  // The point nearest a config: each dimension's value in the config, or
  // (off the grid) the grid value nearest it. Fields outside the space are ignored.
  SpacePoint point_of(const TrainingConfig& c) const;

  // Minimality, in order: dimensions away from their simplest value, then the
  // summed normalized distance (each digit / its largest value).
  int64_t fields_differing(const SpacePoint& p) const;
  double distance(const SpacePoint& p) const;

  // This space centred on one config: the config is the base (fields outside
  // the space keep its values), and each dimension's grid gains the config's
  // value if it lacks it, so point_of(c) is exact. Shrinking a config uses it.
  SearchSpace around(const TrainingConfig& c) const;

  // The space's canonical JSON (what a sweep database records).
  nlohmann::json to_json() const { return source_; }

  // The two numeric dimensions of the failure map (report and summary): the
  // space's "map": [x, y] when given, else the first log range (or numeric
  // dimension) as x and, as y, the numeric dimension in x's group (e.g.
  // optimizer.*) with the most values, else any with the most values.
  // Empty when the space has fewer than two numeric dimensions.
  std::vector<std::string> map_axes() const;

 private:
  nlohmann::json base_;
  nlohmann::json source_;
  std::vector<Dimension> dims_;
  std::vector<std::string> map_;  // "map": [x, y], when the file names them
};

// The value of a permutation from its Lehmer digits (all zeros: identity).
std::vector<int64_t> permutation_from_code(const std::vector<int64_t>& code, int64_t n);
std::vector<int64_t> code_from_permutation(const std::vector<int64_t>& perm);

// The nice log grid in [lo, hi] (both ends included), ascending.
std::vector<double> log_grid(double lo, double hi);

}  // namespace spikehunt
