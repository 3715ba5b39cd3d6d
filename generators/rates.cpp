#include "generators/rates.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/dotted_path.h"
#include "base/number_format.h"

namespace spikehunt {

using json = nlohmann::json;

std::pair<double, double> wilson_interval(int64_t k, int64_t n) {
  if (n <= 0) return {0.0, 1.0};
  const double z = 1.959963984540054, p = double(k) / double(n), nn = double(n);
  const double denom = 1 + z * z / nn;
  const double centre = (p + z * z / (2 * nn)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / nn + z * z / (4 * nn * nn)) / denom;
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

namespace {

std::string value_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

Factor factor_of(const Dimension& d, const json* v) {
  Factor f;
  f.field = d.field;
  if (v == nullptr) {
    f.bucket = "(unset)";
    f.order = -1e300;
    return f;
  }
  if (d.permutations()) {
    for (const json& x : *v) f.bucket += (f.bucket.empty() ? "" : ">") + std::string(1, char('A' + x.get<int64_t>()));
    return f;
  }
  if (d.kind == DimensionKind::kSet || !v->is_number()) {
    f.bucket = value_text(*v);
    const auto at = std::find(d.values.begin(), d.values.end(), *v);
    f.order = double(at - d.values.begin());
    if (v->is_number()) f.value = v->get<double>();
    return f;
  }
  const double x = v->get<double>();
  f.value = x;
  if (d.log_scale() && x > 0) {
    const int decade = static_cast<int>(std::floor(std::log10(x) + 1e-9));
    f.bucket = "[" + significant(std::pow(10.0, decade), 3) + ", " + significant(std::pow(10.0, decade + 1), 3) + ")";
    f.order = decade;
    return f;
  }
  if (d.values.size() <= 10) {
    f.bucket = value_text(*v);
    f.order = x;
    return f;
  }
  double lo = INFINITY, hi = -INFINITY;
  for (const json& e : d.values) lo = std::min(lo, e.get<double>()), hi = std::max(hi, e.get<double>());
  const double w = (hi - lo) / 4;
  const int k = w > 0 ? std::clamp(static_cast<int>(std::floor((x - lo) / w)), 0, 3) : 0;
  f.bucket = "[" + significant(lo + k * w, 3) + ", " + significant(lo + (k + 1) * w, 3) + (k == 3 ? "]" : ")");
  f.order = k;
  return f;
}

}  // namespace

std::vector<Factor> factors_of(const SearchSpace& space, const json& config) {
  std::vector<Factor> out;
  for (const Dimension& d : space.dimensions()) out.push_back(factor_of(d, find_path(config, d.field)));
  return out;
}

SweepRates sweep_rates(const std::vector<RunRow>& searched, const SearchSpace& space) {
  SweepRates rates;
  const std::vector<Dimension>& dims = space.dimensions();
  std::vector<size_t> numeric_dims;  // the map's axes: indices of its two dimensions
  for (const std::string& axis : space.map_axes()) {
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i].field == axis) numeric_dims.push_back(i);
    }
  }
  if (numeric_dims.size() == 2) rates.map_x = dims[numeric_dims[0]].field, rates.map_y = dims[numeric_dims[1]].field;
  std::map<std::pair<std::string, std::string>, FactorRate> cells;
  std::map<std::string, FactorRate> xs, ys;
  for (const RunRow& r : searched) {
    const bool bad = !failure_class(r.summary.verdict).empty();
    auto count = [bad](RateCell& cell) {
      cell.failed += bad;
      ++cell.runs;
    };
    count(rates.all);
    if (bad) ++rates.by_outcome[to_string(r.summary.verdict.outcome)];
    const std::vector<Factor> factors = factors_of(space, json::parse(r.config_json));
    for (const Factor& f : factors) {
      FactorRate& c = cells[{f.field, f.bucket}];
      c.field = f.field, c.bucket = f.bucket, c.order = f.order;
      count(c.cell);
    }
    if (!rates.map_x.empty()) {
      const Factor& x = factors[numeric_dims[0]];
      const Factor& y = factors[numeric_dims[1]];
      count(rates.map[{x.bucket, y.bucket}]);
      xs[x.bucket] = {x.field, x.bucket, x.order, {}};
      ys[y.bucket] = {y.field, y.bucket, y.order, {}};
    }
  }
  auto by_order = [](const FactorRate& a, const FactorRate& b) { return a.order < b.order; };
  for (const Dimension& d : dims) {
    std::vector<FactorRate> of_dim;
    for (const auto& [key, c] : cells) {
      if (key.first == d.field) of_dim.push_back(c);
    }
    std::stable_sort(of_dim.begin(), of_dim.end(), by_order);
    rates.factors.insert(rates.factors.end(), of_dim.begin(), of_dim.end());
  }
  for (const auto& [b, c] : xs) rates.map_x_buckets.push_back(c);
  for (const auto& [b, c] : ys) rates.map_y_buckets.push_back(c);
  std::stable_sort(rates.map_x_buckets.begin(), rates.map_x_buckets.end(), by_order);
  std::stable_sort(rates.map_y_buckets.begin(), rates.map_y_buckets.end(), by_order);
  return rates;
}

}  // namespace spikehunt
