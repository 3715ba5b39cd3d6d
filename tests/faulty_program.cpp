// faulty_program.cpp — a user's program around faulty_scenario.h: register,
// then spikehunt::cli_main (so it is a worker, a sweep and a guard of its
// own), like examples/user_project/main.cpp.
#include <spikehunt/spikehunt.h>

#include "faulty_scenario.h"

int main(int argc, char** argv) {
  register_faulty_scenario();
  return spikehunt::cli_main(argc, argv);
}
