// env.h — the environment fingerprint a result is only reproducible within:
// spikehunt and LibTorch versions, the BLAS actually loaded at run time (not
// the one LibTorch was built against) and the kernels it picked, ATen's CPU
// capability (its own kernel choice), device, threads and compiler; and the
// node it ran on, which is where, not what (two nodes of one kind are one
// environment).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "spikehunt/version.h"

namespace spikehunt {

struct Environment {
  std::string spikehunt = kVersion;
  std::string libtorch;  // e.g. "2.11.0"
  std::string blas;      // e.g. "MKL 2024.2 (linked into LibTorch)", "OpenBLAS 0.3.21 (openmp, Haswell) via ..."
  std::string device;    // "cpu" or "cuda"
  int64_t threads = 0;   // LibTorch intra-op threads
  std::string compiler;  // e.g. "GCC 12.2.0"
  std::string cpu_capability;  // ATen's kernels: "AVX2", "AVX512", "DEFAULT" ("" when not recorded)
  std::string node;            // SLURMD_NODENAME, else the host name ("" when not recorded)
};

// The BLAS library this process loaded, found among its shared objects.
std::string blas_in_use();
// ATen's CPU capability ("AVX2"), as LibTorch reports it in show_config().
std::string aten_cpu_capability();
// This node's name: $SLURMD_NODENAME under Slurm, else the host name.
std::string node_name();
Environment environment(const std::string& device, int64_t threads);
nlohmann::json to_json(const Environment& e);
std::string describe(const Environment& e);  // one line for headers
// What bit-exactness depends on, as one line: everything but the node and the
// thread count (a config field). Two runs with equal keys ran in one environment.
std::string environment_key(const Environment& e);
// Strict: a malformed fingerprint is an InputError naming `file` and `field`.
Environment environment_from_json(const nlohmann::json& j, const std::string& field, const std::string& file);
// LibTorch, BLAS or ATen's CPU capability differing between where a result was recorded and here
// (threads are a config field: callers compare them), as warnings
// ("LibTorch 2.1 here, 1.13.0 in the repro: bit-exactness is not promised").
std::vector<std::string> environment_warnings(const Environment& recorded, const Environment& here,
                                              const std::string& where);

}  // namespace spikehunt
