// report.cpp — `spikehunt report`: DIR/report.html, a self-contained offline
// page of a sweep and its failures.
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "base/error.h"
#include "cli/verbs.h"
#include "generators/html_report.h"

namespace spikehunt {

void add_report_verb(Cli& cli) {
  auto report_dir = std::make_shared<std::string>("results/sweep");
  auto report_out = std::make_shared<std::string>();
  CLI::App* report = cli.verb("report", "Write DIR/report.html: a self-contained, offline page of a sweep and its failures",
                              [report_dir, report_out] {
                                const ReportFacts f = write_sweep_report(*report_dir, *report_out);
                                std::cout << "wrote " << f.path << ": " << f.runs << " runs, " << f.failed << " failed, "
                                          << f.failures << " distinct failure(s), " << f.charts << " chart(s)\n";
                                if (!f.running.empty()) {
                                  std::cout << "the sweep is still running (" << f.running
                                            << "): the report shows the runs committed so far\n";
                                }
                                return kExitOk;
                              });
  report->add_option("dir", *report_dir, "The sweep's --out folder")->capture_default_str();
  report->add_option("--out", *report_out, "Where to write the HTML (default DIR/report.html)");
}

}  // namespace spikehunt
