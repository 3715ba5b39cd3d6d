// program.h — this program: its executable, for spawning itself (workers,
// bursts), and how it was invoked, for commands printed to be pasted back.
// A program that is not one executable (a Python script run by
// /usr/bin/python3) says how to start it again with set_self_command.
#pragma once

#include <string>
#include <vector>

namespace spikehunt {

// This process's executable (/proc/self/exe), for re-spawning spikehunt itself.
std::string self_executable();
// How this program was invoked (argv[0] as the shell gave it: "spikehunt"
// on PATH, "build/spikehunt", or a user's program that calls cli_main), so a
// printed command can be pasted back; the executable's file name when
// set_invoked_as() was not called.
std::string program_name();
void set_invoked_as(const std::string& argv0);

// The command that starts this program again: {self_executable()} unless
// set_self_command() said otherwise ({"/usr/bin/python3", "/home/me/train.py"}
// for a Python script that calls spikehunt.main()). Children started with
// argv[0] == self_executable() (child.h) start as this command.
std::vector<std::string> self_command();
// `command` starts this program again; `build_files` are the files whose
// bytes make this build besides the executable (the extension module, the
// script), for build_id (store.h).
void set_self_command(std::vector<std::string> command, std::vector<std::string> build_files = {});
// The command a child whose argv[0] is `program` runs: self_command() for
// self_executable(), else {program}.
std::vector<std::string> command_of(const std::string& program);
// The files build_id hashes for `program`: the executable, and for this
// program the build files set_self_command named.
std::vector<std::string> build_files_of(const std::string& program);
// The build id (store.h's build_id) of the code this process loaded, when it
// was taken at start-up (a persistent worker's: the files may change on disk
// while it runs); "" when none was.
void set_loaded_build(std::string id);
const std::string& loaded_build();

}  // namespace spikehunt
