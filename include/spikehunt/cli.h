/// cli.h — the whole spikehunt command line for a program of your own:
/// register your scenarios, then return cli_main(argc, argv); its sweeps
/// spawn the program itself, so the workers know your scenarios too.
///
/// Public names: cli_main, Cli (add verbs of your own), add_verbs.
///
///   int main(int argc, char** argv) {
///     spikehunt::register_scenario("mine", make_mine);
///     return spikehunt::cli_main(argc, argv);  // my_program sweep --space my_space.json
///   }
#pragma once

#include "spikehunt/scenario.h"

#include "cli/cli.h"
