// rates.h — a sweep's failure rates: overall, per factor of its space (a
// field and a bucket of its value) and over the failure map's two axes, each
// with its 95% Wilson interval. What the summary and the report print.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "generators/space.h"
#include "generators/store.h"

namespace spikehunt {

// 95% Wilson score interval of k successes in n trials.
std::pair<double, double> wilson_interval(int64_t k, int64_t n);

// Where a config falls along one dimension of its space, for the per-factor
// failure rates and the failure map: the dimension's field and a bucket of
// its value — a decade for a log range ("[0.01, 0.1)"), the value for a set,
// a task order ("B>A") or a range of at most 10 values, else one of four
// equal-width bins ("[0, 0.25)"). `order` sorts the buckets of a dimension.
struct Factor {
  std::string field;   // "optimizer.lr", "params.warmup", ...
  std::string bucket;
  double order = 0;
  std::optional<double> value;  // the numeric value, for the map's scatter
};
std::vector<Factor> factors_of(const SearchSpace& space, const nlohmann::json& config);

// Failure rates of a sweep's search runs, overall, per dimension of its space,
// and over its first two numeric dimensions (the failure map).
struct RateCell {
  int64_t failed = 0;
  int64_t runs = 0;
};
struct FactorRate {
  std::string field, bucket;
  double order = 0;
  RateCell cell;
};
struct SweepRates {
  RateCell all;
  std::map<std::string, int64_t> by_outcome;  // failed runs per outcome
  std::vector<FactorRate> factors;            // in the space's dimension order, buckets ascending
  // The failure map over SearchSpace::map_axes() ("" when the space has none).
  std::string map_x, map_y;
  std::vector<FactorRate> map_x_buckets, map_y_buckets;               // the axes, ascending
  std::map<std::pair<std::string, std::string>, RateCell> map;        // (x bucket, y bucket)
};
SweepRates sweep_rates(const std::vector<RunRow>& searched, const SearchSpace& space);

}  // namespace spikehunt
