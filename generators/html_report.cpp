#include "generators/html_report.h"

#include "generators/lr_sensitivity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/files.h"
#include "base/html.h"
#include "base/number_format.h"
#include "base/out_lock.h"
#include "base/program.h"
#include "generators/rates.h"
#include "generators/space.h"
#include "generators/store.h"
#include "harness/env.h"
#include "harness/report.h"
#include "harness/repro_file.h"

namespace spikehunt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string escape(const std::string& text) { return html_escape(text); }

std::string rate_text(const RateCell& c) {
  const auto [lo, hi] = wilson_interval(c.failed, c.runs);
  return std::to_string(c.failed) + "/" + std::to_string(c.runs) + " (" +
         percent(c.runs ? double(c.failed) / double(c.runs) : 0) + ", 95% " + percent(lo) + "–" + percent(hi) + ")";
}

// A cell shaded by its failure rate: white at 0, red at 1.
std::string rate_cell(const RateCell& c) {
  if (c.runs == 0) return "<td class=\"empty\">–</td>";
  const double r = double(c.failed) / double(c.runs);
  char style[64];
  std::snprintf(style, sizeof style, "background:hsl(0,75%%,%.0f%%)", 100 - 45 * r);
  return "<td style=\"" + std::string(style) + "\" title=\"" + escape(rate_text(c)) + "\">" + std::to_string(c.failed) +
         "/" + std::to_string(c.runs) + "</td>";
}

// A trace value for a log-scale chart: finite and positive, else null.
json plotted(const json& v) {
  if (!v.is_number()) return nullptr;
  const double x = v.get<double>();
  return std::isfinite(x) && x > 0 ? json(x) : json(nullptr);
}

// Rows [step, loss, grad norm, max |grad|, max |activation|, max |state|, lr] of a
// trace.jsonl; malformed lines end the chart there (the report still renders).
json trace_rows(const std::string& path, std::string* problem) {
  json rows = json::array();
  if (!fs::exists(path)) {
    *problem = "no trace beside the repro (" + path + ")";
    return rows;
  }
  std::istringstream in(read_file(path));
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const json r = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!r.is_object() || !r.contains("step") || !r["step"].is_number_integer()) {
      *problem = path + ":" + std::to_string(line_no) + ": not a step record; the chart stops before it";
      break;
    }
    rows.push_back({r["step"], plotted(r.value("loss", json())), plotted(r.value("grad_norm", json())),
                    plotted(r.value("grad_max", json())), plotted(r.value("activation_max", json())),
                    plotted(r.value("state_max", json())), plotted(r.value("lr", json()))});
  }
  return rows;
}

constexpr const char* kStyle = R"(
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
.meta { color: #666; } .big { font-size: 1.3em; }
table { border-collapse: collapse; margin: .5em 0; } td, th { border: 1px solid #ddd; padding: 3px 9px; text-align: left; }
th { background: #f4f4f4; } td.empty { color: #aaa; text-align: center; } table.map td { text-align: center; min-width: 5em; }
code, pre { font: 12.5px ui-monospace, monospace; background: #f6f6f6; } pre { padding: .6em; overflow-x: auto; }
section.failure { border: 1px solid #ddd; border-radius: 6px; padding: 0 1em 1em; margin: 1.2em 0; }
.chart { width: 100%; height: 340px; margin-top: .8em; } .legend { font-size: 12px; min-height: 1.5em; margin: .3em 0 0 60px; }
.ok { color: #176c2f; } .bad { color: #b00020; }
)";

// Charts: drawn from the JSON data block; the page records what it drew and
// any JavaScript error on <body data-charts / data-errors> (the test reads them).
constexpr const char* kScript = R"(
(function () {
  var data = JSON.parse(document.getElementById('spikehunt-data').textContent);
  var status = [];
  // Saturated pixels: the series and marks (grid, axes and text are gray).
  function colored(div) {
    var n = 0;
    div.querySelectorAll('canvas').forEach(function (c) {
      if (!c.width || !c.height) return;
      var px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      for (var i = 0; i < px.length; i += 4) {
        if (px[i + 3] > 64 && Math.max(px[i], px[i + 1], px[i + 2]) - Math.min(px[i], px[i + 1], px[i + 2]) > 80) n++;
      }
    });
    return n;
  }
  // Points dygraphs laid out inside the plot area.
  function plotted(g) {
    var n = 0, a = g.getArea();
    (g.layout_.points || []).forEach(function (series) {
      series.forEach(function (p) {
        if (isFinite(p.canvasx) && isFinite(p.canvasy) && p.canvasx >= a.x - 1 && p.canvasx <= a.x + a.w + 1 &&
            p.canvasy >= a.y - 1 && p.canvasy <= a.y + a.h + 1) n++;
      });
    });
    return n;
  }
  function marks(list) {
    return function (ctx, area, g) {
      list.forEach(function (m) {
        if (m.step === null || m.step === undefined) return;
        var x = g.toDomXCoord(m.step);
        ctx.save();
        ctx.strokeStyle = m.color; ctx.fillStyle = m.color; ctx.lineWidth = 2; ctx.setLineDash([6, 4]);
        ctx.beginPath(); ctx.moveTo(x, area.y); ctx.lineTo(x, area.y + area.h); ctx.stroke();
        var text = m.label + ' (step ' + m.step + ')', w = ctx.measureText(text).width;
        var tx = x + 4 + w > area.x + area.w ? x - 4 - w : x + 4;
        ctx.fillText(text, tx, area.y + 12 + (m.row || 0) * 14);
        ctx.restore();
      });
    };
  }
  // A log axis ticks at whole decades only (every k-th when they would crowd).
  function decades(min, max, pixels) {
    if (!(min > 0) || !(max > min)) return [];
    var lo = Math.floor(Math.log10(min) + 1e-9), hi = Math.ceil(Math.log10(max) - 1e-9);
    var room = Math.max(2, Math.floor(pixels / 28)), k = Math.max(1, Math.ceil((hi - lo + 1) / room));
    var ticks = [];
    for (var e = Math.ceil(lo / k) * k; e <= hi; e += k) {
      ticks.push({v: Math.pow(10, e), label: e === 0 ? '1' : e === 1 ? '10' : '1e' + e});
    }
    return ticks;
  }
  function exp(v) { return v >= 0.01 && v < 1e4 ? String(+v.toPrecision(3)) : v.toExponential(0); }
  function draw(id, rows, options) {
    var div = document.getElementById(id);
    var legend = document.createElement('div');
    legend.className = 'legend';
    div.parentNode.insertBefore(legend, div.nextSibling);
    options.labelsDiv = legend;
    options.labelsSeparateLines = false;
    options.yRangePad = 8;
    try {
      var g = new Dygraph(div, rows, options);
      var ylabels = [];
      div.querySelectorAll('.dygraph-axis-label-y').forEach(function (e) { ylabels.push(e.textContent); });
      status.push({id: id, rows: g.numRows(), points: plotted(g), colored: colored(div), ylabels: ylabels});
    } catch (e) {
      window.spikehuntErrors.push(id + ': ' + e);
      status.push({id: id, rows: 0, points: 0, colored: 0});
    }
  }
  if (data.map.rows.length) {
    var m = data.map, first = m.rows[0][0], last = m.rows[m.rows.length - 1][0];
    var span = last > first ? last - first : Math.abs(last) || 1;
    draw('map', m.rows, {
      dateWindow: m.xlog ? [first / 1.5, last * 1.5] : [first - 0.05 * span, last + 0.05 * span],
      labels: m.labels, drawPoints: true, strokeWidth: 0, pointSize: 4, highlightCircleSize: 6,
      axes: {x: {logscale: m.xlog, axisLabelFormatter: exp}, y: {logscale: m.ylog}},
      valueRange: m.ylog ? null : m.yrange, xlabel: m.xlabel, ylabel: m.ylabel,
      colors: ['#2e8b57', '#e69500', '#c00020', '#555555'], legend: 'always'
    });
  }
  data.failures.forEach(function (f) {
    if (!f.rows.length) return;
    draw(f.id, f.rows, {
      labels: f.labels, logscale: true, xlabel: 'step', xRangePad: 12, ylabel: 'magnitude (log scale)', legend: 'always',
      axes: {y: {ticker: decades, axisLabelWidth: 60}},
      colors: ['#1f77b4', '#d62728', '#9467bd', '#2ca02c', '#ff7f0e', '#8c564b'],
      underlayCallback: marks([{step: f.mover_step, label: 'first mover: ' + f.mover, color: '#6a3d9a', row: 2},
                               {step: f.onset, label: 'onset (extreme)', color: '#e69500'},
                               {step: f.failure, label: 'first non-finite', color: '#c00020', row: 1}])
    });
  });
  if (data.lr && data.lr.rows.length) {
    draw('lr', data.lr.rows, {
      labels: data.lr.labels, drawPoints: true, pointSize: 3, strokeWidth: 1.5, legend: 'always',
      axes: {x: {logscale: true, axisLabelFormatter: exp}}, xRangePad: 12,
      xlabel: 'peak learning rate (log scale)', ylabel: 'final held-out loss',
      colors: ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#7f7f7f']
    });
  }
  document.body.dataset.charts = JSON.stringify(status);
  document.body.dataset.errors = JSON.stringify(window.spikehuntErrors);
})();
)";

}  // namespace

std::string dygraphs_dir() {
  const char* env = std::getenv("SPIKEHUNT_DYGRAPHS_DIR");
  return env != nullptr && *env != '\0' ? env : "/usr/share/javascript/dygraphs";
}

namespace {

// Marks every page spikehunt writes: a file at a report's path without it is the user's.
constexpr const char* kGenerator = "<meta name=\"generator\" content=\"spikehunt\">";

std::string page_head(const std::string& title, const std::string& dygraph_js, const std::string& dygraph_css) {
  return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n" + std::string(kGenerator) +
         "\n<title>" + escape(title) +
         "</title>\n<script>window.spikehuntErrors = [];\nwindow.addEventListener('error', function (e) { "
         "window.spikehuntErrors.push(String(e.message)); });</script>\n<style>" +
         dygraph_css + "\n" + kStyle + "</style>\n<script>" + dygraph_js + "</script>\n</head><body>\n";
}

// An lr-sensitivity database: the loss-vs-LR chart (one line per variant,
// log x, as in Wortsman et al.'s first figure) and each variant's table.
ReportFacts write_lr_report(const std::string& dir, const std::string& out_path, const SweepStore& store,
                            const json& spec, const std::string& dygraph_js, const std::string& dygraph_css) {
  const std::vector<LrCurve> curves = lr_curves_from(spec, store.runs("lr"));
  const std::vector<double> lrs = spec.at("lr_sensitivity").at("lrs").get<std::vector<double>>();
  ReportFacts facts;
  facts.path = out_path.empty() ? (fs::path(dir) / "report.html").string() : out_path;
  std::ostringstream h;
  h << page_head("spikehunt lr-sensitivity: " + dir, dygraph_js, dygraph_css);
  h << "<h1>spikehunt lr-sensitivity</h1>\n<p class=\"meta\">" << escape(dir) << " · spikehunt " << kVersion << "</p>\n";
  h << "<p>Each point trains the same config with this peak learning rate (the schedule's peak) and measures the "
       "held-out loss at the end. LR sensitivity is the mean over the grid of min(final loss, loss at init) − the best "
       "final loss (Wortsman et al. 2023). Non-finite final losses are gaps.</p>\n";
  h << "<div id=\"lr\" class=\"chart\"></div>\n";
  h << "<h2>Per variant</h2>\n<table><tr><th>variant</th><th>LR sensitivity</th><th>best final loss</th><th>at lr</th>"
       "<th>diverged</th></tr>\n";
  json labels = json::array({"peak lr"});
  for (const LrCurve& c : curves) {
    int64_t diverged = 0;
    for (const LrPoint& p : c.points) diverged += p.diverged();
    facts.runs += int64_t(c.points.size());
    facts.failed += diverged;
    labels.push_back(c.variant.label);
    h << "<tr><td>" << escape(c.variant.label) << "</td><td>" << significant(c.sensitivity, 3) << "</td><td>"
      << significant(c.best_loss, 3) << "</td><td>" << significant(c.best_lr, 3) << "</td><td>" << diverged << " of " << c.points.size()
      << "</td></tr>\n";
  }
  h << "</table>\n<h2>Every run</h2>\n<table><tr><th>variant</th><th>peak lr</th><th>final loss</th>"
       "<th>max attention logit</th><th>max |log Z|</th><th>verdict</th></tr>\n";
  json rows = json::array();
  for (double lr : lrs) rows.push_back(json::array({lr}));
  for (const LrCurve& c : curves) {
    for (size_t i = 0; i < lrs.size(); ++i) {
      json value = nullptr;
      for (const LrPoint& p : c.points) {
        if (p.lr != lrs[i] || !p.summary.metrics) continue;
        const RunMetrics& m = *p.summary.metrics;
        if (std::isfinite(m.final_loss)) value = m.final_loss;
        const Verdict& v = p.summary.verdict;
        h << "<tr><td>" << escape(c.variant.label) << "</td><td>" << significant(p.lr, 3) << "</td><td>" << significant(m.final_loss, 3)
          << "</td><td>" << significant(m.max_attention_logit, 3) << "</td><td>" << significant(m.max_logit_z, 3) << "</td><td>"
          << to_string(v.outcome) << (v.onset_step ? " at step " + std::to_string(*v.onset_step) : "")
          << (v.onset_rules.empty() ? "" : " (" + escape(v.onset_rules.front()) + ")") << (p.diverged() ? ", diverged" : "")
          << "</td></tr>\n";
      }
      rows[i].push_back(value);
    }
  }
  h << "</table>\n";
  facts.charts = curves.empty() ? 0 : 1;
  const json data = {{"map", {{"rows", json::array()}}}, {"failures", json::array()}, {"lr", {{"labels", labels}, {"rows", rows}}}};
  h << "<details><summary>grid and variants</summary><pre>" << escape(spec.dump(2)) << "</pre></details>\n";
  h << "<script type=\"application/json\" id=\"spikehunt-data\">" << script_json(data) << "</script>\n<script>"
    << kScript << "</script>\n</body></html>\n";
  write_file_atomic(facts.path, h.str());
  return facts;
}

}  // namespace

bool is_spikehunt_report(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(4096, '\0');
  in.read(head.data(), std::streamsize(head.size()));
  head.resize(size_t(in.gcount()));
  return head.rfind("<!doctype html>", 0) == 0 &&
         (head.find(kGenerator) != std::string::npos || head.find("<h1>spikehunt ") != std::string::npos ||
          head.find("<title>spikehunt ") != std::string::npos);
}

void refuse_foreign_report(const std::string& path, const std::string& flag) {
  std::error_code ec;
  if (!fs::exists(path, ec) || is_spikehunt_report(path)) return;
  throw InputError(path, flag, path,
                   fs::is_directory(path, ec) ? "is a folder, not a report"
                                              : "is a file spikehunt did not write (not one of its reports): it is "
                                                "left as it is",
                   "give " + flag + " a path of its own, or move the file away");
}

ReportFacts write_sweep_report(const std::string& dir, const std::string& out_path) {
  refuse_foreign_report(out_path.empty() ? (fs::path(dir) / "report.html").string() : out_path,
                        out_path.empty() ? "report.html" : "--out");
  const std::string db = (fs::path(dir) / "sweep.db").string();
  if (!fs::exists(db)) {
    throw InputError(dir, "", "", "has no sweep.db", "give the --out folder of a spikehunt sweep (default results/sweep)");
  }
  const std::string lib = dygraphs_dir();
  std::string dygraph_js, dygraph_css;
  try {
    dygraph_js = read_file(lib + "/dygraph.min.js");
    dygraph_css = read_file(lib + "/dygraph.min.css");
  } catch (const InputError&) {
    throw InputError(lib + "/dygraph.min.js", "", "", "is missing: the report inlines Debian's dygraphs",
                     "install libjs-dygraphs (scripts/setup.sh does) or set SPIKEHUNT_DYGRAPHS_DIR");
  }
  const std::unique_ptr<SweepStore> store = SweepStore::open_read_only(db);
  const json stored_space = json::parse(store->space_json());
  if (stored_space.contains("lr_sensitivity")) {
    return write_lr_report(dir, out_path, *store, stored_space, dygraph_js, dygraph_css);
  }
  const SearchSpace space = SearchSpace::from_json(json::parse(store->space_json()), db + ": space");
  const TrainingConfig simplest = space.simplest();
  const std::vector<RunRow> searched = store->runs("search");
  const SweepRates rates = sweep_rates(searched, space);

  ReportFacts facts;
  facts.path = out_path.empty() ? (fs::path(dir) / "report.html").string() : out_path;
  facts.runs = rates.all.runs;
  facts.failed = rates.all.failed;

  std::ostringstream h;
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  h << page_head("spikehunt sweep: " + dir, dygraph_js, dygraph_css);

  // ---- summary ----
  const auto [lo, hi] = wilson_interval(rates.all.failed, rates.all.runs);
  h << "<h1>spikehunt sweep</h1>\n<p class=\"meta\">" << escape(dir) << " · seed " << store->seed() << " · spikehunt "
    << kVersion << " · report written " << when << "</p>\n";
  if (const std::string running = OutLock::other_holder(dir); !running.empty()) {
    h << "<p class=\"bad\">This sweep is still running (" << escape(running)
      << "): the page shows the runs committed so far.</p>\n";
    facts.running = running;
  }
  if (const auto changed = store->meta("code_changed")) {
    h << "<p class=\"bad\">The code changed during this sweep (--allow-code-change): builds " << escape(*changed)
      << ". Its runs trained more than one version of the code.</p>\n";
  }
  h << "<p class=\"big\"><b>" << rates.all.runs << "</b> runs, <b class=\"" << (rates.all.failed ? "bad" : "ok") << "\">"
    << rates.all.failed << " failed</b>: " << percent(rates.all.runs ? double(rates.all.failed) / double(rates.all.runs) : 0)
    << " (95% Wilson interval " << percent(lo) << " to " << percent(hi) << ")";
  for (const auto& [outcome, count] : rates.by_outcome) h << " · " << count << " " << escape(outcome);
  h << "</p>\n<p>" << store->count("shrink") << " shrink bursts. A run <i>fails</i> when it goes extreme (finite, but "
    << "past a health rule) or non-finite, crashes or times out.</p>\n";

  h << "<h2>Failure rate per factor</h2>\n<table><tr><th>factor</th><th>value</th><th>failed</th><th>rate</th>"
       "<th>95% interval</th></tr>\n";
  for (const FactorRate& f : rates.factors) {
    const auto [flo, fhi] = wilson_interval(f.cell.failed, f.cell.runs);
    h << "<tr><td>" << escape(f.field) << "</td><td>" << escape(f.bucket) << "</td><td>" << f.cell.failed << "/"
      << f.cell.runs << "</td><td>" << percent(double(f.cell.failed) / double(f.cell.runs)) << "</td><td>" << percent(flo)
      << "–" << percent(fhi) << "</td></tr>\n";
  }
  h << "</table>\n";

  // ---- the failure map: the space's first two numeric dimensions ----
  json map = {{"rows", json::array()}};
  if (rates.map_x.empty()) {
    h << "<h2>Failure map</h2>\n<p>The space has fewer than two numeric dimensions: no map.</p>\n";
  } else {
    h << "<h2>" << escape(rates.map_x) << " × " << escape(rates.map_y) << "</h2>\n<p>Failed / runs per bucket of the "
      << "space's first two numeric dimensions (darker: more failures).</p>\n<table class=\"map\"><tr><th>"
      << escape(rates.map_x) << " \\ " << escape(rates.map_y) << "</th>";
    for (const FactorRate& y : rates.map_y_buckets) h << "<th>" << escape(y.bucket) << "</th>";
    h << "</tr>\n";
    for (const FactorRate& x : rates.map_x_buckets) {
      h << "<tr><th>" << escape(x.bucket) << "</th>";
      for (const FactorRate& y : rates.map_y_buckets) {
        const auto it = rates.map.find({x.bucket, y.bucket});
        h << rate_cell(it == rates.map.end() ? RateCell{} : it->second);
      }
      h << "</tr>\n";
    }
    h << "</table>\n<p>Every run by its " << escape(rates.map_x) << " and " << escape(rates.map_y) << ":</p>\n"
         "<div id=\"map\" class=\"chart\"></div>\n";
    size_t xi = 0, yi = 0;
    for (size_t i = 0; i < space.dimensions().size(); ++i) {
      if (space.dimensions()[i].field == rates.map_x) xi = i;
      if (space.dimensions()[i].field == rates.map_y) yi = i;
    }
    std::vector<std::pair<double, json>> points;
    double ylo = INFINITY, yhi = -INFINITY;
    for (const RunRow& r : searched) {
      const std::vector<Factor> f = factors_of(space, json::parse(r.config_json));
      if (!f[xi].value || !f[yi].value) continue;
      const Outcome o = r.summary.verdict.outcome;
      const int column = o == Outcome::kHealthy ? 1 : o == Outcome::kExtreme ? 2 : o == Outcome::kNonFinite ? 3 : 4;
      json row = {*f[xi].value, nullptr, nullptr, nullptr, nullptr};
      row[size_t(column)] = *f[yi].value;
      ylo = std::min(ylo, *f[yi].value), yhi = std::max(yhi, *f[yi].value);
      points.emplace_back(*f[xi].value, row);
    }
    std::stable_sort(points.begin(), points.end(), [](auto& a, auto& b) { return a.first < b.first; });
    for (auto& p : points) map["rows"].push_back(p.second);
    const double pad = yhi > ylo ? 0.05 * (yhi - ylo) : std::max(0.05, std::fabs(yhi) * 0.05);
    map["labels"] = {rates.map_x, "healthy", "extreme", "non-finite", "crashed / timeout"};
    map["xlabel"] = rates.map_x;
    map["ylabel"] = rates.map_y;
    map["xlog"] = space.dimensions()[xi].log_scale();
    map["ylog"] = space.dimensions()[yi].log_scale();
    map["yrange"] = {ylo - pad, yhi + pad};
  }

  // ---- distinct failures ----
  std::vector<FailureRow> failures = store->failures();
  std::stable_sort(failures.begin(), failures.end(),
                   [](const FailureRow& a, const FailureRow& b) { return a.occurrences > b.occurrences; });
  facts.failures = int64_t(failures.size());
  json charts = json::array();
  h << "<h2>Distinct failures</h2>\n";
  if (failures.empty()) h << "<p class=\"ok\">None: every run stayed healthy.</p>\n";
  int index = 0;
  for (const FailureRow& f : failures) {
    ++index;
    h << "<section class=\"failure\"><h3>" << index << ". <code>" << escape(f.signature) << "</code></h3>\n<p>"
      << f.occurrences << " of " << rates.all.runs << " runs (first: run " << f.first_run << ")</p>\n";
    if (f.minimal_config_json.empty()) {
      h << "<p>Not shrunk (<code>--max-shrinks</code> or the time budget).</p></section>\n";
      continue;
    }
    const TrainingConfig minimal = config_from_json(json::parse(f.minimal_config_json), db);
    const std::vector<std::string> diff = config_diff(simplest, minimal);
    h << "<p>Minimal config (fields away from the space's simplest values), after " << f.shrink_evaluations
      << " shrink bursts" << (f.budget_exhausted ? " (budget spent: may not be minimal)" : " (a local minimum)")
      << ":</p>\n<pre>";
    if (diff.empty()) h << "(none: the simplest config of the space fails)";
    for (const std::string& d : diff) h << escape(d) << "\n";
    h << "</pre>\n<details><summary>full minimal config</summary><pre>" << escape(config_to_json(minimal).dump(2))
      << "</pre></details>\n";
    std::string repro_path = f.repro_path;
    if (!repro_path.empty() && !fs::exists(repro_path)) {  // the sweep ran from another directory
      repro_path = (fs::path(dir) / "repros" / fs::path(repro_path).filename()).string();
    }
    if (f.replay.rfind(one_failure_with(""), 0) == 0) {  // its repro is the other failure's
      h << "<p><b>" << escape(f.replay) << "</b>.</p></section>\n";
      continue;
    }
    if (repro_path.empty() || !fs::exists(repro_path)) {
      h << "<p>No repro: " << escape(f.replay.empty() ? "not recorded" : f.replay) << "</p></section>\n";
      continue;
    }
    const Repro repro = read_repro(repro_path);
    const Verdict& v = repro.verdict;
    h << "<p>Fails: <b>" << to_string(v.outcome) << "</b>";
    if (v.onset_step) h << ", onset (first extreme step) " << *v.onset_step;
    if (v.failure_step) h << ", first non-finite step " << *v.failure_step;
    if (v.lead_time()) h << ", lead time " << *v.lead_time() << " steps";
    if (v.fault) h << ", " << escape(v.fault->describe());
    if (!v.onset_rules.empty()) h << "; rules at the onset: " << escape(onset_rules_text(v));
    if (v.onset_step && !v.movers.empty()) {
      h << "</p>\n<p>Moved first: <b>" << escape(describe_movers(v.movers, *v.onset_step)) << "</b>";
    }
    h << "</p>\n<p>Replay: <span class=\"" << (f.replay.rfind("reproduced", 0) == 0 ? "ok" : "bad") << "\">"
      << escape(f.replay) << "</span><br>Replay it: <code>" << escape(program_name()) << " replay " << escape(repro_path)
      << (repro.checkpoint ? " --from-checkpoint" : "") << "</code></p>\n";
    std::string problem;
    json rows = trace_rows(repro_sibling(repro_path, ".trace.jsonl"), &problem);
    const std::string id = "failure-" + std::to_string(index);
    if (!problem.empty()) h << "<p class=\"meta\">" << escape(problem) << "</p>\n";
    if (!rows.empty()) {
      h << "<div id=\"" << id << "\" class=\"chart\"></div>\n<p class=\"meta\">The trace into the failure on a log scale; "
        << "non-finite values are gaps. Drag to zoom, double-click to reset.</p>\n";
      ++facts.charts;
    }
    h << "</section>\n";
    charts.push_back({{"id", id},
                      {"onset", v.onset_step ? json(*v.onset_step) : json(nullptr)},
                      {"failure", v.failure_step ? json(*v.failure_step) : json(nullptr)},
                      {"mover_step", v.movers.empty() ? json(nullptr) : json(v.movers.front().since)},
                      {"mover", v.movers.empty() ? "" : v.movers.front().tensor + " " + v.movers.front().quantity},
                      {"labels", {"step", "loss", "global grad norm", "max |grad|", "max |activation|", "max |optimizer state|",
                                  "learning rate"}},
                      {"rows", rows}});
  }
  h << "<details><summary>search space</summary><pre>" << escape(json::parse(store->space_json()).dump(2))
    << "</pre></details>\n";
  const json data = {{"map", map}, {"failures", charts}};
  h << "<script type=\"application/json\" id=\"spikehunt-data\">" << script_json(data) << "</script>\n<script>"
    << kScript << "</script>\n</body></html>\n";
  write_file_atomic(facts.path, h.str());
  return facts;
}

}  // namespace spikehunt
