// env.h — the environment fingerprint a result is only reproducible within:
// spikehunt and LibTorch versions, the BLAS actually loaded at run time (not
// the one LibTorch was built against), device, threads and compiler.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace spikehunt {

constexpr const char* kVersion = "0.1.0";

struct Environment {
  std::string spikehunt = kVersion;
  std::string libtorch;  // e.g. "1.13.0"
  std::string blas;      // e.g. "OpenBLAS 0.3.21 (openmp, Haswell) via /usr/lib/.../libblas.so.3"
  std::string device;    // "cpu" or "cuda"
  int64_t threads = 0;   // LibTorch intra-op threads
  std::string compiler;  // e.g. "GCC 12.2.0"
};

// The BLAS library this process loaded, found among its shared objects.
std::string blas_in_use();
Environment environment(const std::string& device, int64_t threads);
nlohmann::json to_json(const Environment& e);
std::string describe(const Environment& e);  // one line for headers
// Strict: a malformed fingerprint is an InputError naming `file` and `field`.
Environment environment_from_json(const nlohmann::json& j, const std::string& field, const std::string& file);
// LibTorch or BLAS differing between where a result was recorded and here
// (threads are a config field: callers compare them), as warnings
// ("LibTorch 2.1 here, 1.13.0 in the repro: bit-exactness is not promised").
std::vector<std::string> environment_warnings(const Environment& recorded, const Environment& here,
                                              const std::string& where);

}  // namespace spikehunt
