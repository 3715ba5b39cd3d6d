// cli.h — the `spikehunt` command line: one binary with verbs.
//   spikehunt run   [--config FILE] [--set key=value]... [--out DIR] [--no-checkpoints]
//   spikehunt audit FILE.safetensors
//   spikehunt audit --pair A.safetensors B.safetensors
//   spikehunt --version
// Exit codes: 0 ok, 1 a finding (the burst failed, a checkpoint holds
// non-finite values, two checkpoints differ), 2 bad input, 3 internal error.
#pragma once

namespace spikehunt {

int cli_main(int argc, char** argv);

}  // namespace spikehunt
