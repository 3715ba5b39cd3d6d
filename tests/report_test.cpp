// Tests generators/html_report.h: a real small sweep's report opened in
// headless Chromium (no JavaScript error, every chart drawn with its data),
// self-contained, and bad input that writes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/files.h"
#include "base/html.h"
#include "base/number_format.h"
#include "cli/flags.h"
#include "generators/html_report.h"
#include "generators/lr_sensitivity.h"
#include "harness/repro_file.h"
#include "test_util.h"

namespace spikehunt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::run_spikehunt;
using testing::TempDir;

using testing::has;

// The sweep tests' tiny MLP space, with momentum for the failure map.
const std::string kSpace = testing::tiny_space(R"("optimizer.momentum": {"range": [0, 0.9], "step": 0.3},)");

struct Page {
  json charts;                 // [{id, rows, points, colored}]
  json errors;                 // JavaScript errors the page caught
  std::string console;         // Chromium's stderr (uncaught errors are logged there too)
};

std::string unescape_attribute(std::string s) {
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"&quot;", "\""}, {"&lt;", "<"}, {"&gt;", ">"},
                                 {"&amp;", "&"}}) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  }
  return s;
}

std::string attribute(const std::string& dom, const std::string& name) {
  const std::string key = name + "=\"";
  const size_t at = dom.find(key);
  if (at == std::string::npos) return "";
  const size_t end = dom.find('"', at + key.size());
  return unescape_attribute(dom.substr(at + key.size(), end - at - key.size()));
}

// Loads `html` in headless Chromium (Debian's, installed by scripts/setup.sh)
// and reads what the page recorded on <body> after its scripts ran.
Page open_in_chromium(const std::string& html, const TempDir& dir) {
  const int found = std::system("command -v chromium > /dev/null 2>&1");
  if (found != 0) {
    ADD_FAILURE() << "chromium is not installed: run scripts/setup.sh (it installs Debian's chromium)";
    return {};
  }
  const std::string cmd = "timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
                          "--disable-background-networking --disable-component-update --disable-sync "
                          "--enable-logging=stderr --v=0 --user-data-dir=" + dir.file("chromium-profile") +
                          " --dump-dom 'file://" + fs::absolute(html).string() + "' > " + dir.file("dom.html") + " 2> " +
                          dir.file("chromium.log");
  const int rc = std::system(cmd.c_str());
  Page page;
  page.console = read_file(dir.file("chromium.log"));
  EXPECT_EQ(rc, 0) << page.console;
  const std::string dom = read_file(dir.file("dom.html"));
  const std::string charts = attribute(dom, "data-charts"), errors = attribute(dom, "data-errors");
  EXPECT_FALSE(charts.empty()) << "the page's script did not finish: " << page.console;
  page.charts = json::parse(charts.empty() ? "[]" : charts);
  page.errors = json::parse(errors.empty() ? "[]" : errors);
  return page;
}

TEST(Report, ASmallRealSweepRendersInChromiumWithEveryChartDrawn) {
  TempDir dir;
  testing::write_bytes(dir.file("space.json"), kSpace);
  const std::string out = dir.file("sweep");
  const auto sweep = run_spikehunt("sweep --space " + dir.file("space.json") + " --runs 8 -j 2 --shrink-bursts 20 --out " +
                                   out + " --no-progress");
  ASSERT_EQ(sweep.exit_code, 1) << sweep.output;  // lr 4 at sample 4 diverges
  EXPECT_TRUE(has(sweep.output, "report: " + out + "/report.html")) << sweep.output;

  // The repro's trace sits beside it: one JSON line per step up to the failure.
  const std::string repro_path = out + "/repros/non_finite-forward-out_logits.repro.json";
  ASSERT_TRUE(fs::exists(repro_path)) << sweep.output;
  const Repro repro = read_repro(repro_path);
  std::istringstream trace(read_file(repro_sibling(repro_path, ".trace.jsonl")));
  int64_t lines = 0;
  for (std::string line; std::getline(trace, line);) EXPECT_EQ(json::parse(line)["step"], lines++);
  EXPECT_EQ(lines, repro.verdict.steps_run);

  EXPECT_FALSE(fs::exists(out + "/work")) << "the children's scratch folder goes when empty";
  fs::remove(out + "/report.html");
  const auto r = run_spikehunt("report " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "8 runs, 1 failed, 1 distinct failure(s), 1 chart(s)")) << r.output;
  for (const char* side : {"/sweep.db-wal", "/sweep.db-shm"}) {
    EXPECT_FALSE(fs::exists(out + side)) << side << ": a read-only open leaves no files";
  }
  const std::string html = read_file(out + "/report.html");

  // Self-contained: nothing fetched, the library inlined.
  for (const char* external : {"<script src", "<link", "http://", "https://cdn", "src=\"http"}) {
    EXPECT_FALSE(has(html, external)) << external;
  }
  EXPECT_TRUE(has(html, "dygraphs/blob/v2")) << "dygraphs' licence header is inlined";
  for (const char* part : {"8</b> runs", "95% Wilson interval", "Failure rate per factor", "optimizer.lr × optimizer.momentum",
                           "non_finite:forward:out_logits", "optimizer.lr=4.0", "spikehunt replay ", "--from-checkpoint",
                           "first non-finite step " }) {
    EXPECT_TRUE(has(html, part)) << part;
  }

  const Page page = open_in_chromium(out + "/report.html", dir);
  EXPECT_EQ(page.errors, json::array()) << page.console;
  EXPECT_FALSE(has(page.console, "Uncaught")) << page.console;
  ASSERT_EQ(page.charts.size(), 2u) << page.charts.dump();
  const json& map = page.charts[0];
  EXPECT_EQ(map["id"], "map");
  EXPECT_EQ(map["rows"], 8) << "one point per run";
  EXPECT_EQ(map["points"], 8) << "every run inside the plot area";
  EXPECT_GT(map["colored"].get<int64_t>(), 8 * 20) << "the points are drawn in colour";
  const json& chart = page.charts[1];
  EXPECT_EQ(chart["id"], "failure-1");
  EXPECT_EQ(chart["rows"], repro.verdict.steps_run);
  // Loss, grad norm, max |grad| and max |activation| are finite before the failure step.
  EXPECT_GE(chart["points"].get<int64_t>(), 4 * (*repro.verdict.failure_step)) << chart.dump();
  EXPECT_GT(chart["colored"].get<int64_t>(), 2000) << "the lines and the onset/failure marks are drawn";
  // The log axis ticks at whole decades only: "1e-3", "1", "10", "1e4", never "9e+31" or "2e+28".
  ASSERT_GE(chart["ylabels"].size(), 2u) << chart.dump();
  for (const json& label : chart["ylabels"]) {
    const std::string text = label.get<std::string>();
    EXPECT_TRUE(text == "1" || text == "10" || (text.rfind("1e", 0) == 0 && text.find('+') == std::string::npos))
        << text;
  }
}

TEST(LrSensitivity, IsWortsmansExpectationOverTheGrid) {
  // final losses 3, 2.5, inf (diverged), 6 (above init 5.5): min(final, init) - best, averaged.
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_DOUBLE_EQ(lr_sensitivity({3, 2.5, inf, 6}, {5.5, 5.5, 5.5, 5.5}), (0.5 + 0 + 3 + 3) / 4.0);
  EXPECT_DOUBLE_EQ(lr_sensitivity({2, 2}, {5, 5}), 0.0) << "flat: insensitive";
  EXPECT_TRUE(std::isnan(lr_sensitivity({}, {})));

  const std::vector<LrVariant> v = lr_variants({parse_vary("model.gpt.qk_layernorm=false,true"),
                                                parse_vary("model.gpt.z_loss=0,1e-4")});
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[1].label, "model.gpt.qk_layernorm=false model.gpt.z_loss=1e-4");
  EXPECT_EQ(v[2].sets, (std::vector<std::string>{"model.gpt.qk_layernorm=true", "model.gpt.z_loss=0"}));
  EXPECT_EQ(lr_variants({}).front().label, "base");
  EXPECT_EQ(parse_lrs("3e-4,0.1"), (std::vector<double>{3e-4, 0.1}));
  for (const char* bad : {"1e-3,,0.1", "20", "fast", "0"}) {
    try {
      parse_lrs(bad);
      ADD_FAILURE() << bad << " parses";
    } catch (const InputError& e) {
      EXPECT_TRUE(has(e.what(), "--lrs")) << e.what();
    }
  }
  EXPECT_EQ(significant(0.33214, 3), "0.332");
  EXPECT_EQ(significant(-inf, 3), "-inf");
  for (const char* bad : {"model.gpt.qk_layernorm", "model.gpt.qk_layernorm=true,,false", "model.gpt.qk_layrnorm=true"}) {
    try {
      parse_vary(bad);
      ADD_FAILURE() << bad << " parses";
    } catch (const InputError& e) {
      EXPECT_TRUE(has(e.what(), "--vary")) << e.what();
    }
  }
}

TEST(LrSensitivity, ARealGridOnTextPrintsResumesAndDrawsLossAgainstLr) {
  TempDir dir;
  testing::write_bytes(dir.file("gpt.json"), R"({"model": {"kind": "gpt", "gpt": {"width": 16, "layers": 1, "heads": 2, "context": 16}},
    "dataset": {"kind": "text"}, "optimizer": {"kind": "adamw", "lr": 0.01, "betas": [0.9, 0.95]},
    "schedule": {"kind": "cosine", "warmup_steps": 2}, "batch_size": 4, "max_batches_per_epoch": 8, "threads": 1})");
  const std::string out = dir.file("lr");
  const std::string cmd = "lr-sensitivity --config " + dir.file("gpt.json") +
                          " --lrs 1e-3,0.03 --vary model.gpt.qk_layernorm=false,true --heldout 16 -j 2 --out " + out;
  const auto r = run_spikehunt(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "over 2 peak learning rates x 2 variant(s) (4 runs)")) << r.output;
  EXPECT_TRUE(has(r.output, "variant model.gpt.qk_layernorm=true")) << r.output;
  const json j = json::parse(read_file(out + "/lr_sensitivity.json"));
  ASSERT_EQ(j["variants"].size(), 2u);
  for (const json& v : j["variants"]) {
    ASSERT_EQ(v["points"].size(), 2u) << v.dump();
    for (const json& p : v["points"]) {
      EXPECT_NEAR(p["init_loss"].get<double>(), std::log(256.0), 0.1) << "held-out loss at init is chance";
      EXPECT_LT(p["final_loss"].get<double>(), p["init_loss"].get<double>()) << "8 steps learn something";
      EXPECT_GT(p["max_attention_logit"].get<double>(), 0.0);
    }
    EXPECT_GE(v["lr_sensitivity"].get<double>(), 0.0);
    EXPECT_TRUE(has(r.output, "LR sensitivity " )) << r.output;
  }
  EXPECT_FALSE(fs::exists(out + "/work"));

  const auto again = run_spikehunt(cmd);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(has(again.output, "resuming: 4 of 4 runs already in the database")) << again.output;
  EXPECT_EQ(json::parse(read_file(out + "/lr_sensitivity.json")), j) << "the same numbers, from the database";
  const auto other = run_spikehunt("lr-sensitivity --config " + dir.file("gpt.json") + " --lrs 1e-3 --out " + out);
  EXPECT_EQ(other.exit_code, 2) << "another grid is another database: " << other.output;

  const auto report = run_spikehunt("report " + out);
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_TRUE(has(report.output, "4 runs")) << report.output;
  const Page page = open_in_chromium(out + "/report.html", dir);
  EXPECT_EQ(page.errors, json::array()) << page.console;
  ASSERT_EQ(page.charts.size(), 1u) << page.charts.dump();
  EXPECT_EQ(page.charts[0]["id"], "lr");
  EXPECT_EQ(page.charts[0]["rows"], 2) << "one row per learning rate";
  EXPECT_EQ(page.charts[0]["points"], 4) << "one point per variant and learning rate";
  EXPECT_GT(page.charts[0]["colored"].get<int64_t>(), 100) << "the lines are drawn";
}

// A tap name, a --vary value or an exception's text holding markup cannot end or open an element of
// the page: not in its text, its attributes or its JSON data blocks (base/html.h; fuzzed by fuzz_html).
TEST(Report, HostileStringsAreEscapedInTextAttributesAndDataBlocks) {
  for (const std::string s : {"<!--<script>", "</script><script>alert(1)</script>", "a&b\"c'd>e", "<!--"}) {
    const std::string data = script_json(nlohmann::json{{"tap", s}, {s, {s}}});
    for (const char* bad : {"<!--", "<script", "</script", "<", ">", "&"}) {
      EXPECT_EQ(data.find(bad), std::string::npos) << bad << " in " << data;
    }
    EXPECT_EQ(nlohmann::json::parse(data)["tap"], s);  // what the page's script reads back
    const std::string text = html_escape(s);
    EXPECT_EQ(text.find_first_of("<>\"'"), std::string::npos) << text;
  }
  EXPECT_EQ(html_escape("<!--<script>"), "&lt;!--&lt;script&gt;");
}

TEST(Report, BadInputIsExitTwoAndWritesNothing) {
  TempDir dir;
  auto r = run_spikehunt("report " + dir.file("nowhere"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, dir.file("nowhere") + ": has no sweep.db")) << r.output;

  fs::create_directories(dir.file("junk"));
  testing::write_bytes(dir.file("junk/sweep.db"), "this is not a database");
  r = run_spikehunt("report " + dir.file("junk"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, dir.file("junk/sweep.db"))) << r.output;
  EXPECT_TRUE(has(r.output, "sweep database")) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("junk/report.html")));

  // Without the charting library the report is not written half-way.
  setenv("SPIKEHUNT_DYGRAPHS_DIR", dir.file("no-dygraphs").c_str(), 1);
  EXPECT_THROW(
      {
        try {
          write_sweep_report(dir.file("junk"));
        } catch (const InputError& e) {
          EXPECT_TRUE(has(e.what(), "libjs-dygraphs")) << e.what();
          throw;
        }
      },
      InputError);
  unsetenv("SPIKEHUNT_DYGRAPHS_DIR");
  EXPECT_FALSE(fs::exists(dir.file("junk/report.html")));
}

}  // namespace
}  // namespace spikehunt
