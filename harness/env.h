// env.h — the environment fingerprint a result is only reproducible within:
// spikehunt and LibTorch versions, the BLAS actually loaded at run time (not
// the one LibTorch was built against), device, threads and compiler.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace spikehunt
