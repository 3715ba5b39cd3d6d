// The spikehunt binary: every verb over the built-in scenarios.
#include "cli/cli.h"

int main(int argc, char** argv) { return spikehunt::cli_main(argc, argv); }
