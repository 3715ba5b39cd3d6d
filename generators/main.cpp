// The spikehunt binary: the harness's verbs and the generators' verbs.
#include "generators/cli.h"
#include "harness/cli.h"

int main(int argc, char** argv) {
  spikehunt::Cli cli;
  spikehunt::add_harness_verbs(cli);
  spikehunt::add_generator_verbs(cli);
  return cli.main(argc, argv);
}
