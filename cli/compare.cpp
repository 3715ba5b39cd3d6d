// compare.cpp — `spikehunt compare A B`: two sweeps' samples, verdicts, fault
// signatures, distinct failures and minimal configs, side by side.
#include <iostream>
#include <memory>
#include <utility>

#include <CLI/CLI.hpp>

#include "cli/verbs.h"
#include "generators/merge.h"

namespace spikehunt {

void add_compare_verb(Cli& cli) {
  auto cmp = std::make_shared<std::pair<std::string, std::string>>();
  CLI::App* compare = cli.verb(
      "compare", "Compare two sweeps: samples, verdicts, fault signatures, distinct failures and minimal configs",
      [cmp] { return run_compare(cmp->first, cmp->second, std::cout); });
  compare->add_option("A", cmp->first, "A sweep's --out folder (or a merge's OUT)")->required();
  compare->add_option("B", cmp->second, "Another")->required();
}

}  // namespace spikehunt
