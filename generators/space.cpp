#include "generators/space.h"

#include <algorithm>
#include <cmath>
#include <climits>
#include <cstdio>
#include <set>

#include "base/dotted_path.h"
#include "base/files.h"

namespace spikehunt {

namespace {
constexpr DimensionKind kDimensionKinds[] = {DimensionKind::kLogRange, DimensionKind::kRange, DimensionKind::kSet,
                                             DimensionKind::kPermutations};
}  // namespace

const char* to_string(DimensionKind k) {
  switch (k) {
    case DimensionKind::kLogRange: return "log_range";
    case DimensionKind::kRange: return "range";
    case DimensionKind::kSet: return "set";
    case DimensionKind::kPermutations: return "permutations";
  }
  return "?";
}

using json = nlohmann::json;

// ---- helpers ----

namespace {

// Rounds to 12 significant digits, so grid values read like the numbers a
// person would type (0.3, not 0.30000000000000004).
double tidy(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.12g", v);
  return std::strtod(buf, nullptr);
}

// Deep merge: objects merge key by key, anything else replaces.
void merge(json& into, const json& from) {
  for (auto it = from.begin(); it != from.end(); ++it) {
    if (it->is_object() && into.contains(it.key()) && into[it.key()].is_object()) merge(into[it.key()], *it);
    else into[it.key()] = *it;
  }
}

std::string show(const json& v) { return v.dump(); }

// Orders values by distance from the simplest one (stable: ties keep their order).
void order_by_distance(std::vector<json>& values, const json& simplest, bool log_scale) {
  const double s = simplest.get<double>();
  auto dist = [&](const json& v) {
    const double x = v.get<double>();
    return log_scale ? std::fabs(std::log(x) - std::log(s)) : std::fabs(x - s);
  };
  std::stable_sort(values.begin(), values.end(), [&](const json& a, const json& b) {
    const double da = dist(a), db = dist(b);
    return da != db ? da < db : a.get<double>() < b.get<double>();
  });
}

}  // namespace

std::vector<double> log_grid(double lo, double hi) {
  static const double kNice[] = {1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8};
  std::set<double> grid = {tidy(lo), tidy(hi)};
  for (int e = static_cast<int>(std::floor(std::log10(lo))) - 1; e <= static_cast<int>(std::ceil(std::log10(hi))); ++e) {
    for (double m : kNice) {
      const double v = tidy(m * std::pow(10.0, e));
      if (v >= lo && v <= hi) grid.insert(v);
    }
  }
  return {grid.begin(), grid.end()};
}

std::vector<int64_t> permutation_from_code(const std::vector<int64_t>& code, int64_t n) {
  std::vector<int64_t> pool(n), perm;
  for (int64_t i = 0; i < n; ++i) pool[i] = i;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = i < int64_t(code.size()) ? code[i] : 0;
    perm.push_back(pool[d]);
    pool.erase(pool.begin() + d);
  }
  return perm;
}

std::vector<int64_t> code_from_permutation(const std::vector<int64_t>& perm) {
  std::vector<int64_t> pool(perm.size()), code;
  for (size_t i = 0; i < perm.size(); ++i) pool[i] = int64_t(i);
  for (size_t i = 0; i + 1 < perm.size(); ++i) {
    const auto it = std::find(pool.begin(), pool.end(), perm[i]);
    code.push_back(it - pool.begin());
    pool.erase(it);
  }
  return code;
}

// ---- parsing ----

namespace {

class SpaceParser {
 public:
  SpaceParser(const std::string& file, std::vector<Problem>* problems, const json& base)
      : file_(file), problems_(problems), base_(base) {}

  // Returns false (with problems recorded) when the dimension is unusable.
  bool parse(const std::string& field, const json& spec, Dimension* d) {
    where_ = "dimensions." + field;
    d->field = field;
    static const json schema = config_to_json(TrainingConfig{});
    const json* leaf = find_path(schema, field);
    // A scenario's own knob: "params.NAME" (the scenario's declaration, if any, checks the name and values).
    const bool param = field.rfind("params.", 0) == 0 && field.size() > 7 && field.find('.', 7) == std::string::npos;
    if (!param && (leaf == nullptr || leaf->is_object())) {
      return fail("", leaf ? "is a group of fields, not a field" : "is not a config field",
                  "fields are dotted config keys, e.g. optimizer.lr, or params.NAME for a scenario's own knob");
    }
    if (!spec.is_object()) return fail(show(spec), "must be an object such as {\"range\": [0, 1]}");
    int kinds = 0;
    for (DimensionKind k : kDimensionKinds) kinds += spec.contains(to_string(k));
    if (kinds != 1) {
      return fail(show(spec), "needs exactly one of log_range, range, set, permutations");
    }
    for (auto it = spec.begin(); it != spec.end(); ++it) {
      static const std::set<std::string> known = {"log_range", "range", "set", "permutations", "simplest", "step"};
      if (!known.count(it.key())) fail("", "has an unknown key \"" + it.key() + "\"", "known: log_range, range, set, permutations, simplest, step");
    }
    if (spec.contains("permutations")) return permutations(spec, d);
    if (spec.contains("set")) return set(spec, d);
    return ranged(spec, d, spec.contains("log_range"));
  }

 private:
  bool fail(const std::string& value, const std::string& message, const std::string& hint = "") {
    problems_->push_back({where_, value, message, hint});
    return false;
  }

  // Is `v` a value the field accepts (applied to the base config)?
  bool accepted(const Dimension& d, const json& v) {
    json j = base_;
    make_path(j, d.field) = v;
    try {
      const TrainingConfig c = config_from_json(j, file_);
      for (const Problem& p : validate(c)) {
        if (p.field == d.field || p.field.rfind(d.field + "[", 0) == 0) {
          return fail(show(v), "is rejected by " + d.field + ": " + p.message, p.hint);
        }
      }
    } catch (const InputError& e) {
      return fail(show(v), "is rejected by " + d.field + ": " + e.problems().front().message);
    }
    return true;
  }

  bool permutations(const json& spec, Dimension* d) {
    d->kind = DimensionKind::kPermutations;
    if (spec["permutations"] != true) return fail(show(spec["permutations"]), "must be true");
    if (d->field != "protocol.task_order") return fail("", "permutations apply to protocol.task_order only");
    if (spec.contains("simplest") || spec.contains("step")) return fail("", "takes no simplest or step: the identity order is simplest");
    d->domains = static_cast<int64_t>(base_["protocol"]["domains"].size());
    return true;
  }

  bool set(const json& spec, Dimension* d) {
    d->kind = DimensionKind::kSet;
    const json& values = spec["set"];
    if (!values.is_array() || values.empty()) return fail(show(values), "must be a non-empty list", "list the values to try");
    if (spec.contains("step")) return fail("", "step applies to ranges only");
    bool ok = true;
    for (size_t i = 0; i < values.size(); ++i) {
      for (size_t k = 0; k < i; ++k) {
        if (values[k] == values[i]) ok = fail(show(values[i]), "is listed twice");
      }
      ok = accepted(*d, values[i]) && ok;
    }
    if (!ok) return false;
    d->values.assign(values.begin(), values.end());
    if (spec.contains("simplest")) {
      auto it = std::find(d->values.begin(), d->values.end(), spec["simplest"]);
      if (it == d->values.end()) return fail(show(spec["simplest"]), "simplest is not in the set");
      std::rotate(d->values.begin(), it, it + 1);  // simplest first, the rest in listed order
    }
    return true;
  }

  bool ranged(const json& spec, Dimension* d, bool log_scale) {
    d->kind = log_scale ? DimensionKind::kLogRange : DimensionKind::kRange;
    const json& r = spec[to_string(d->kind)];
    if (!r.is_array() || r.size() != 2 || !r[0].is_number() || !r[1].is_number()) {
      return fail(show(r), "must be [min, max] numbers");
    }
    if (spec.contains("step") && !spec["step"].is_number()) {  // found by fuzz_space
      return fail(show(spec["step"]), "step must be a number");
    }
    const double lo = r[0].get<double>(), hi = r[1].get<double>();
    if (lo > hi) return fail(show(r), "is empty: min > max", "write [min, max] with min <= max");
    if (log_scale && !(lo > 0)) return fail(show(r), "must be positive for a log range", "use range for values from 0");
    const bool integers = !log_scale && r[0].is_number_integer() && r[1].is_number_integer() &&
                          (!spec.contains("step") || spec["step"].is_number_integer());
    if (log_scale && spec.contains("step")) return fail("", "a log range takes no step (its grid is 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 per decade)");
    if (!accepted(*d, r[0]) || !accepted(*d, r[1])) return false;
    if (log_scale) {
      for (double v : log_grid(lo, hi)) d->values.push_back(v);
    } else if (integers) {
      auto too_big = [](const json& v) { return v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX); };
      if (too_big(r[0]) || too_big(r[1]) || (spec.contains("step") && too_big(spec["step"]))) {
        return fail(show(r), "has an integer beyond 2^63 - 1");
      }
      // In 128 bits: the ends may be anywhere in the int64 range (found by fuzz_space).
      const __int128 a = r[0].get<int64_t>(), b = r[1].get<int64_t>();
      const __int128 step = spec.contains("step") ? __int128(spec["step"].get<int64_t>()) : 1;
      if (step <= 0) return fail(show(spec["step"]), "step must be positive");
      if ((b - a) / step > 100000) return fail(show(r), "holds more than 100,000 values", "give a larger step");
      for (__int128 v = a; v <= b; v += step) d->values.push_back(int64_t(v));
    } else {
      const double step = spec.contains("step") ? spec["step"].get<double>() : (hi - lo) / 100;
      if (spec.contains("step") && !(step > 0)) return fail(show(spec["step"]), "step must be positive");
      if (hi > lo && (hi - lo) / step > 100000) return fail(show(r), "holds more than 100,000 values", "give a larger step");
      for (int64_t k = 0; hi == lo ? k == 0 : lo + k * step < hi - step * 1e-9; ++k) d->values.push_back(tidy(lo + k * step));
      if (hi > lo) d->values.push_back(hi);
    }
    json simplest = d->values.front();
    if (spec.contains("simplest")) {
      simplest = spec["simplest"];
      if (!simplest.is_number() || simplest.get<double>() < lo || simplest.get<double>() > hi) {
        return fail(show(simplest), "simplest is outside " + show(r));
      }
      if (!accepted(*d, simplest)) return false;
      if (std::find(d->values.begin(), d->values.end(), simplest) == d->values.end()) d->values.push_back(simplest);
    }
    order_by_distance(d->values, simplest, log_scale);
    return true;
  }

  std::string file_;
  std::vector<Problem>* problems_;
  const json& base_;
  std::string where_;
};

}  // namespace

SearchSpace SearchSpace::from_json(const json& j, const std::string& file) {
  if (!j.is_object()) throw InputError(file, "", "", "must hold a JSON object with \"dimensions\"");
  std::vector<Problem> problems;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "base" && it.key() != "dimensions" && it.key() != "comment" && it.key() != "map") {
      problems.push_back({it.key(), "", "is not a search-space key",
                          "a space has \"base\", \"dimensions\", \"map\" and \"comment\""});
    }
  }
  SearchSpace space;
  space.source_ = j;
  space.base_ = config_to_json(default_config());
  if (j.contains("base")) {
    if (!j["base"].is_object()) {
      problems.push_back({"base", show(j["base"]), "must be an object of config fields", ""});
    } else {
      merge(space.base_, j["base"]);
      try {
        std::vector<Problem> bad = validate(config_from_json(space.base_, file));
        for (Problem& p : bad) p.field = "base." + p.field;
        problems.insert(problems.end(), bad.begin(), bad.end());
      } catch (const InputError& e) {
        for (Problem p : e.problems()) {
          p.field = "base." + p.field;
          problems.push_back(p);
        }
      }
    }
  }
  const json dims = j.value("dimensions", json());
  if (!dims.is_object() || dims.empty()) {
    problems.push_back({"dimensions", dims.is_null() ? "" : show(dims), "must be a non-empty object of field: domain",
                        "e.g. {\"optimizer.lr\": {\"log_range\": [0.01, 1]}}"});
  } else if (problems.empty()) {
    SpaceParser parser(file, &problems, space.base_);
    for (auto it = dims.begin(); it != dims.end(); ++it) {
      Dimension d;
      if (parser.parse(it.key(), it.value(), &d)) space.dims_.push_back(std::move(d));
    }
  }
  if (j.contains("map") && problems.empty()) {
    const json& m = j["map"];
    bool ok = m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string() && m[0] != m[1];
    for (size_t i = 0; ok && i < 2; ++i) {
      const auto d = std::find_if(space.dims_.begin(), space.dims_.end(),
                                  [&](const Dimension& x) { return x.field == m[i].get<std::string>(); });
      ok = d != space.dims_.end() && d->numeric_range() && d->values.front().is_number();
    }
    if (ok) space.map_ = {m[0].get<std::string>(), m[1].get<std::string>()};
    else problems.push_back({"map", show(m), "must name two different numeric dimensions (range or log_range)",
                             "e.g. \"map\": [\"optimizer.lr\", \"optimizer.momentum\"]"});
  }
  if (!problems.empty()) throw InputError(file, std::move(problems));
  return space;
}

std::vector<std::string> SearchSpace::map_axes() const {
  if (!map_.empty()) return map_;
  auto numeric = [](const Dimension& d) {
    return d.numeric_range() && !d.values.empty() && d.values.front().is_number();
  };
  const Dimension* x = nullptr;
  for (const Dimension& d : dims_) {
    if (numeric(d) && d.log_scale()) {
      x = &d;
      break;
    }
  }
  for (const Dimension& d : dims_) {
    if (x == nullptr && numeric(d)) x = &d;
  }
  if (x == nullptr) return {};
  const std::string group = x->field.substr(0, x->field.find('.'));
  const Dimension* y = nullptr;
  auto better = [&](const Dimension& d) {
    if (y == nullptr) return true;
    const bool same = d.field.rfind(group + ".", 0) == 0, y_same = y->field.rfind(group + ".", 0) == 0;
    if (same != y_same) return same;
    return d.values.size() > y->values.size();
  };
  for (const Dimension& d : dims_) {
    if (&d != x && numeric(d) && better(d)) y = &d;
  }
  if (y == nullptr) return {};
  return {x->field, y->field};
}

SearchSpace SearchSpace::load(const std::string& path) {
  json j = read_json_file(path, "compare with configs/space.json");
  return from_json(j, path);
}

SearchSpace SearchSpace::builtin() {
  static const json kSpace = json::parse(R"({
    "comment": "The built-in sweep: the motivating case's CNN on the synthetic data, short bursts, one thread a burst.",
    "base": {"name": "sweep", "max_batches_per_epoch": 20, "threads": 1},
    "dimensions": {
      "optimizer.lr": {"log_range": [0.01, 0.5]},
      "optimizer.momentum": {"range": [0, 0.99], "step": 0.01},
      "optimizer.kind": {"set": ["sgd", "adam"]},
      "activation.kind": {"set": ["relu", "leaky_relu", "gelu", "tanh"]},
      "activation.slope": {"range": [0, 0.3], "step": 0.01},
      "protocol.task_order": {"permutations": true},
      "protocol.epochs_per_phase": {"range": [1, 2]},
      "max_batches_per_epoch": {"range": [5, 30]},
      "batch_size": {"set": [64, 32, 128]},
      "grad_clip": {"set": [0, 1.0]},
      "seed": {"range": [0, 9]}
    }
  })");
  return from_json(kSpace, "<built-in space>");
}

// ---- points ----

int64_t SearchSpace::digits() const {
  int64_t n = 0;
  for (const Dimension& d : dims_) n += d.arity();
  return n;
}

int64_t SearchSpace::dimension_of(int64_t digit) const {
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (digit < dims_[i].arity()) return int64_t(i);
    digit -= dims_[i].arity();
  }
  return -1;
}

int64_t SearchSpace::digit_limit(int64_t digit) const {
  for (const Dimension& d : dims_) {
    if (digit < d.arity()) return d.digit_limit(digit);
    digit -= d.arity();
  }
  return 0;
}

json SearchSpace::config_json(const SpacePoint& p) const {
  json j = base_;
  size_t at = 0;
  for (const Dimension& d : dims_) {
    if (d.permutations()) {
      const std::vector<int64_t> code(p.begin() + at, p.begin() + at + d.arity());
      make_path(j, d.field) = permutation_from_code(code, d.domains);
    } else {
      make_path(j, d.field) = d.values.at(size_t(p.at(at)));
    }
    at += size_t(d.arity());
  }
  return j;
}

TrainingConfig SearchSpace::config(const SpacePoint& p) const {
  const TrainingConfig c = config_from_json(config_json(p), "<space point>");
  std::vector<Problem> problems = validate(c);
  if (!problems.empty()) throw InputError("<space point>", std::move(problems));
  return c;
}

bool SearchSpace::valid(const SpacePoint& p) const {
  if (int64_t(p.size()) != digits()) return false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] < 0 || p[i] >= digit_limit(int64_t(i))) return false;
  }
  try {
    config(p);
    return true;
  } catch (const InputError&) {
    return false;
  }
}

SpacePoint SearchSpace::point_of(const TrainingConfig& c) const {
  const json j = config_to_json(c);
  SpacePoint p;
  for (const Dimension& d : dims_) {
    const json* v = find_path(j, d.field);
    if (v == nullptr) {  // a param the config does not set: the simplest value
      p.insert(p.end(), size_t(d.arity()), 0);
      continue;
    }
    if (d.permutations()) {
      std::vector<int64_t> code = code_from_permutation(v->get<std::vector<int64_t>>());
      code.resize(size_t(d.arity()), 0);
      p.insert(p.end(), code.begin(), code.end());
      continue;
    }
    auto exact = std::find(d.values.begin(), d.values.end(), *v);
    if (exact != d.values.end() || !v->is_number()) {
      p.push_back(exact == d.values.end() ? 0 : exact - d.values.begin());
      continue;
    }
    size_t best = 0;  // off the grid: the nearest value
    for (size_t i = 1; i < d.values.size(); ++i) {
      if (std::fabs(d.values[i].get<double>() - v->get<double>()) <
          std::fabs(d.values[best].get<double>() - v->get<double>())) {
        best = i;
      }
    }
    p.push_back(int64_t(best));
  }
  return p;
}

SearchSpace SearchSpace::around(const TrainingConfig& c) const {
  SearchSpace s = *this;
  s.base_ = config_to_json(c);
  for (Dimension& d : s.dims_) {
    const json* v = find_path(s.base_, d.field);
    if (d.permutations()) {
      d.domains = int64_t(s.base_["protocol"]["domains"].size());
      continue;
    }
    if (v == nullptr) continue;  // a param the config does not set
    if (std::find(d.values.begin(), d.values.end(), *v) != d.values.end()) continue;
    if (v->is_number() && d.values.front().is_number()) {
      const json simplest = d.values.front();
      d.values.push_back(*v);
      order_by_distance(d.values, simplest, d.log_scale() && v->get<double>() > 0);
    } else {
      d.values.push_back(*v);
    }
  }
  return s;
}

int64_t SearchSpace::fields_differing(const SpacePoint& p) const {
  int64_t n = 0;
  size_t at = 0;
  for (const Dimension& d : dims_) {
    bool differs = false;
    for (int64_t k = 0; k < d.arity(); ++k) differs |= p[at + k] != 0;
    n += differs;
    at += size_t(d.arity());
  }
  return n;
}

double SearchSpace::distance(const SpacePoint& p) const {
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const int64_t limit = digit_limit(int64_t(i));
    if (limit > 1) sum += double(p[i]) / double(limit - 1);
  }
  return sum;
}

TrainingConfig SearchSpace::simplest() const {
  const SpacePoint zero(size_t(digits()), 0);
  return valid(zero) ? config(zero) : config_from_json(base_, "<space>");
}

}  // namespace spikehunt
