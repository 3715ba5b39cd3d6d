#include "harness/cli.h"

int main(int argc, char** argv) { return spikehunt::cli_main(argc, argv); }
