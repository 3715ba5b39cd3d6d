// The user's command line: `fashion_bugs doctor --config fashion.json --set params.bug=raw_pixels`, ...
#include "fashion.h"

int main(int argc, char** argv) {
  register_fashion();
  return spikehunt::cli_main(argc, argv);
}
