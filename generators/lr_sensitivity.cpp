#include "generators/lr_sensitivity.h"
#include "generators/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>

#include "base/error.h"
#include "base/files.h"
#include "base/number_format.h"
#include "base/out_lock.h"
#include "base/program.h"
#include "generators/shrinker.h"
#include "harness/burst.h"
#include "harness/report.h"
#include "harness/results.h"

namespace spikehunt {

namespace fs = std::filesystem;
using nlohmann::json;

const std::vector<double>& wortsman_lr_grid() {
  static const std::vector<double> grid = {3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1};
  return grid;
}

std::vector<LrVariant> lr_variants(const std::vector<LrVary>& vary) {
  std::vector<LrVariant> out = {{"", {}}};
  for (const LrVary& v : vary) {
    std::vector<LrVariant> next;
    for (const LrVariant& base : out) {
      for (const std::string& value : v.values) {
        LrVariant x = base;
        const std::string set = v.field + "=" + value;
        x.label += (x.label.empty() ? "" : " ") + set;
        x.sets.push_back(set);
        next.push_back(std::move(x));
      }
    }
    out = std::move(next);
  }
  if (out.size() == 1 && out[0].label.empty()) out[0].label = "base";
  return out;
}

bool LrPoint::diverged() const {
  if (summary.verdict.outcome == Outcome::kNonFinite || !summary.metrics) return true;
  const RunMetrics& m = *summary.metrics;
  return !std::isfinite(m.final_loss) || m.final_loss >= m.init_loss;
}

double lr_sensitivity(const std::vector<double>& final_losses, const std::vector<double>& init_losses) {
  if (final_losses.empty()) return std::numeric_limits<double>::quiet_NaN();
  double best = std::numeric_limits<double>::infinity();
  for (double f : final_losses) {
    if (std::isfinite(f)) best = std::min(best, f);
  }
  double sum = 0;
  for (size_t i = 0; i < final_losses.size(); ++i) {
    const double f = final_losses[i], init = init_losses[i];
    sum += (std::isfinite(f) ? std::min(f, init) : init) - best;
  }
  return sum / double(final_losses.size());
}

LrCurve make_curve(LrVariant variant, std::vector<LrPoint> points) {
  LrCurve c{std::move(variant), std::move(points), std::numeric_limits<double>::infinity(), 0, 0};
  std::vector<double> finals, inits;
  for (const LrPoint& p : c.points) {
    const RunMetrics m = p.summary.metrics.value_or(RunMetrics{});
    const double final_loss = p.summary.verdict.outcome == Outcome::kNonFinite || !p.summary.metrics
                                  ? std::numeric_limits<double>::infinity()
                                  : m.final_loss;
    finals.push_back(final_loss);
    inits.push_back(m.init_loss);
    if (std::isfinite(final_loss) && final_loss < c.best_loss) c.best_loss = final_loss, c.best_lr = p.lr;
  }
  c.sensitivity = lr_sensitivity(finals, inits);
  return c;
}

json lr_spec_json(const LrSensitivityOptions& o) {
  json variants = json::array();
  for (const LrVariant& v : lr_variants(o.vary)) variants.push_back({{"label", v.label}, {"sets", v.sets}});
  return {{"lr_sensitivity",
           {{"config", config_to_json(o.config)}, {"lrs", o.lrs}, {"variants", variants}, {"heldout", o.heldout}}}};
}

namespace {

std::vector<LrVariant> variants_of(const json& spec) {
  std::vector<LrVariant> out;
  for (const json& v : spec.at("lr_sensitivity").at("variants")) {
    out.push_back({v.at("label").get<std::string>(), v.at("sets").get<std::vector<std::string>>()});
  }
  return out;
}


std::string verdict_word(const LrPoint& p) {
  const Verdict& v = p.summary.verdict;
  std::string s = to_string(v.outcome);
  if (v.onset_step) s += " at step " + std::to_string(*v.onset_step);
  if (!v.onset_rules.empty()) s += " (" + v.onset_rules.front() + ")";
  if (p.diverged()) s += ", diverged";
  return s;
}

}  // namespace

std::vector<LrCurve> lr_curves_from(const json& spec, const std::vector<RunRow>& runs) {
  const std::vector<double> lrs = spec.at("lr_sensitivity").at("lrs").get<std::vector<double>>();
  const std::vector<LrVariant> variants = variants_of(spec);
  std::map<int64_t, const RunRow*> by_sample;
  for (const RunRow& r : runs) by_sample[r.sample] = &r;
  std::vector<LrCurve> curves;
  for (size_t v = 0; v < variants.size(); ++v) {
    std::vector<LrPoint> points;
    for (size_t i = 0; i < lrs.size(); ++i) {
      const auto it = by_sample.find(int64_t(v * lrs.size() + i));
      if (it != by_sample.end()) points.push_back({lrs[i], it->second->summary});
    }
    curves.push_back(make_curve(variants[v], std::move(points)));
  }
  return curves;
}

int run_lr_sensitivity(const LrSensitivityOptions& o, std::ostream& out) {
  if (o.lrs.empty()) throw InputError("--lrs", "", "[]", "is empty", "give learning rates, e.g. --lrs 1e-3,1e-2,1e-1");
  const std::vector<LrVariant> variants = lr_variants(o.vary);
  // Every point's config, checked before anything runs.
  std::vector<TrainingConfig> configs;
  for (const LrVariant& v : variants) {
    for (double lr : o.lrs) {
      std::vector<std::string> sets = v.sets;
      char lr_text[32];
      std::snprintf(lr_text, sizeof lr_text, "%.17g", lr);
      sets.push_back(std::string("optimizer.lr=") + lr_text);
      try {
        configs.push_back(parse_config(config_to_json(o.config), o.source, sets));
      } catch (const InputError& e) {  // the config itself was valid: the variant or the lr is not
        throw InputError("--vary " + v.label + " at lr " + lr_text, unfiled(e.problems()));
      }
    }
  }
  if (o.heldout_given) {  // before anything is written or trained
    const int64_t there = heldout_samples(configs.front(), o.heldout);
    if (there < o.heldout) {
      throw flag_error("lr-sensitivity", "--heldout", std::to_string(o.heldout),
                       "is beyond the data: its held-out split holds " + std::to_string(there) + " samples",
                       "give --heldout " + std::to_string(there) + " or less (or leave it out: the default takes up "
                       "to 256 of what there is)");
    }
  }
  refuse_foreign_report(o.out_dir + "/report.html", "--out");  // the user's own page there is never replaced
  const OutLock lock = OutLock::folder(o.out_dir, "lr-sensitivity");
  const json spec = lr_spec_json(o);
  SweepStore store(o.out_dir + "/sweep.db", spec.dump(), 0);
  const std::string binary = o.binary.empty() ? self_executable() : o.binary;
  ChildEvaluator children(binary, o.jobs, o.timeout_seconds, o.out_dir + "/work", o.pool);
  children.set_extra_args({"--heldout", std::to_string(o.heldout)});
  EvalCache cache(&store);
  out << "lr-sensitivity: " << o.source << " over " << o.lrs.size() << " peak learning rates x " << variants.size()
      << " variant(s) (" << configs.size() << " runs), " << o.jobs << " at a time; database " << store.path() << "\n";

  std::vector<TrainingConfig> to_run;
  std::vector<int64_t> to_run_sample;
  int64_t done = 0;
  for (size_t i = 0; i < configs.size(); ++i) {
    if (store.has_sample(int64_t(i), "lr")) {
      ++done;
      continue;
    }
    to_run.push_back(configs[i]);
    to_run_sample.push_back(int64_t(i));
  }
  if (done > 0) out << "resuming: " << done << " of " << configs.size() << " runs already in the database\n";
  children.evaluate(to_run, [&](size_t k, const BurstSummary& s) {
    cache.add("lr", to_run_sample[k], to_run[k], s);
    const size_t sample = size_t(to_run_sample[k]);
    out << "  [" << ++done << "/" << configs.size() << "] " << variants[sample / o.lrs.size()].label << " lr "
        << significant(o.lrs[sample % o.lrs.size()], 3) << ": " << to_string(s.verdict.outcome)
        << (s.metrics ? ", final loss " + significant(s.metrics->final_loss, 3) : std::string()) << "\n"
        << std::flush;
  });
  if (const std::string retried = describe_retries(children.retries()); !retried.empty()) out << retried << "\n";
  std::error_code ec;
  fs::remove(o.out_dir + "/work", ec);  // only when empty

  const std::vector<LrCurve> curves = lr_curves_from(spec, store.runs("lr"));
  json result = {{"config", o.source}, {"lrs", o.lrs}, {"heldout", o.heldout}, {"variants", json::array()}};
  for (const LrCurve& c : curves) {
    out << "\nvariant " << c.variant.label << "\n";
    char line[160];
    std::snprintf(line, sizeof line, "  %-9s %-10s %-10s %-13s %-11s %s\n", "peak lr", "init loss", "final loss",
                  "max attn", "max |log Z|", "verdict");
    out << line;
    bool training_losses = !c.points.empty();
    for (const LrPoint& p : c.points) training_losses &= p.summary.metrics && p.summary.metrics->heldout_samples == 0;
    json points = json::array();
    for (const LrPoint& p : c.points) {
      const RunMetrics m = p.summary.metrics.value_or(RunMetrics{});
      std::snprintf(line, sizeof line, "  %-9s %-10s %-10s %-13s %-11s %s\n", significant(p.lr, 3).c_str(), significant(m.init_loss, 3).c_str(),
                    significant(m.final_loss, 3).c_str(), significant(m.max_attention_logit, 3).c_str(), significant(m.max_logit_z, 3).c_str(),
                    verdict_word(p).c_str());
      out << line;
      points.push_back({{"lr", p.lr},
                        {"outcome", to_string(p.summary.verdict.outcome)},
                        {"onset_step", p.summary.verdict.onset_step ? json(*p.summary.verdict.onset_step) : json()},
                        {"diverged", p.diverged()},
                        {"init_loss", number(m.init_loss)},
                        {"final_loss", number(m.final_loss)},
                        {"max_attention_logit", number(m.max_attention_logit)},
                        {"max_logit_z", number(m.max_logit_z)}});
    }
    out << "  LR sensitivity " << significant(c.sensitivity, 3) << " (best final loss " << significant(c.best_loss, 3) << " at lr "
        << significant(c.best_lr, 3) << ")\n";
    if (training_losses) {
      out << "  losses: the training loss (step 0's; the mean of the last 10 steps'): the scenario gives no "
             "held-out data\n";
    }
    result["variants"].push_back({{"label", c.variant.label},
                                  {"losses", training_losses ? "training" : "heldout"},
                                  {"sets", c.variant.sets},
                                  {"lr_sensitivity", number(c.sensitivity)},
                                  {"best_loss", number(c.best_loss)},
                                  {"best_lr", c.best_lr},
                                  {"points", points}});
  }
  out << "\nsummary (LR sensitivity: the mean over the grid of min(final loss, loss at init) - best final loss)\n";
  char line[200];
  std::snprintf(line, sizeof line, "  %-52s %-15s %-10s %s\n", "variant", "LR sensitivity", "best loss", "diverged");
  out << line;
  for (const LrCurve& c : curves) {
    int64_t diverged = 0;
    for (const LrPoint& p : c.points) diverged += p.diverged();
    std::snprintf(line, sizeof line, "  %-52s %-15s %-10s %lld of %zu\n", c.variant.label.c_str(), significant(c.sensitivity, 3).c_str(),
                  significant(c.best_loss, 3).c_str(), static_cast<long long>(diverged), c.points.size());
    out << line;
  }
  write_file_atomic(o.out_dir + "/lr_sensitivity.json", result.dump(2) + "\n");
  out << "\nwrote " << o.out_dir << "/lr_sensitivity.json; " << program_name() << " report " << o.out_dir
      << " draws final loss against learning rate\n";
  return 0;
}

}  // namespace spikehunt
