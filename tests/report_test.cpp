// Tests generators/html_report.h: a real small sweep's report opened in
// headless Chromium (no JavaScript error, every chart drawn with its data),
// self-contained, and bad input that writes nothing.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "generators/html_report.h"
#include "harness/repro_file.h"
#include "scenarios/error.h"
#include "scenarios/files.h"
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
