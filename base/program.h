// program.h — this program: its executable, for spawning itself (workers,
// bursts), and how it was invoked, for commands printed to be pasted back.
#pragma once

#include <string>

namespace spikehunt {

// This process's executable (/proc/self/exe), for re-spawning spikehunt itself.
std::string self_executable();
// How this program was invoked (argv[0] as the shell gave it: "spikehunt"
// on PATH, "build/spikehunt", or a user's program that calls cli_main), so a
// printed command can be pasted back; the executable's file name when
// set_invoked_as() was not called.
std::string program_name();
void set_invoked_as(const std::string& argv0);

}  // namespace spikehunt
