// The user's command line: `spirals run --config spirals.json`, `spirals sweep
// --space spirals_space.json`, `spirals doctor`, `spirals guard check`, ...
// Sweeps spawn this program for each burst, so the children know "spirals" too.
#include "spirals.h"

int main(int argc, char** argv) {
  register_spirals();
  return spikehunt::cli_main(argc, argv);
}
