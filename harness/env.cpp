#include "harness/env.h"

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/csrc/api/include/torch/version.h>

#include "harness/record.h"
#include "scenarios/error.h"

namespace spikehunt {

namespace {

int collect(dl_phdr_info* info, size_t, void* data) {
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') {
    static_cast<std::vector<std::string>*>(data)->push_back(info->dlpi_name);
  }
  return 0;
}

std::string real(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

}  // namespace

std::string blas_in_use() {
  std::vector<std::string> objects;
  dl_iterate_phdr(collect, &objects);
  std::string libblas;  // what the libblas.so.3 alternative resolves to
  bool openblas = false, mkl = false, blis = false;
  for (const std::string& o : objects) {
    const std::string r = real(o);
    if (contains(o, "libblas.so")) libblas = r;
    openblas |= contains(r, "openblas");
    mkl |= contains(r, "mkl");
    blis |= contains(r, "blis");
  }
  std::string name;
  if (openblas) {
    using GetConfig = char* (*)();
    using GetInt = int (*)();
    auto config = reinterpret_cast<GetConfig>(::dlsym(RTLD_DEFAULT, "openblas_get_config"));
    auto core = reinterpret_cast<GetConfig>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    auto parallel = reinterpret_cast<GetInt>(::dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
    name = "OpenBLAS";
    if (config) {
      const std::string c = config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
      const size_t sp = c.find(' ', 9);
      name = c.substr(0, sp);
    }
    std::string detail;
    if (parallel) {
      const int p = parallel();
      detail = p == 2 ? "openmp" : p == 1 ? "pthreads" : "sequential";
    }
    if (core) detail += (detail.empty() ? "" : ", ") + std::string(core());
    if (!detail.empty()) name += " (" + detail + ")";
  } else if (mkl) {
    name = "MKL";
  } else if (blis) {
    name = "BLIS";
  } else if (!libblas.empty()) {
    name = contains(libblas, "/blas/") ? "reference BLAS (slow: install libopenblas0-openmp)" : "BLAS";
  } else {
    return "none loaded";
  }
  if (!libblas.empty()) name += " via " + libblas;
  return name;
}

Environment environment(const std::string& device, int64_t threads) {
  Environment e;
  e.libtorch = TORCH_VERSION;
  e.blas = blas_in_use();
  e.device = device;
  e.threads = threads;
#if defined(__clang__)
  e.compiler = "Clang " __clang_version__;
#elif defined(__GNUC__)
  e.compiler = "GCC " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
               std::to_string(__GNUC_PATCHLEVEL__);
#endif
  return e;
}

nlohmann::json to_json(const Environment& e) {
  return {{"spikehunt", e.spikehunt}, {"libtorch", e.libtorch}, {"blas", e.blas},
          {"device", e.device},       {"threads", e.threads},   {"compiler", e.compiler}};
}

std::string describe(const Environment& e) {
  return "spikehunt " + e.spikehunt + " | LibTorch " + e.libtorch + " | " + e.device + ", " +
         std::to_string(e.threads) + " thread(s) | BLAS: " + e.blas;
}

Environment environment_from_json(const nlohmann::json& j, const std::string& field, const std::string& file) {
  if (!j.is_object()) throw InputError(file, field, j.dump(), "is not an object");
  Environment e;
  try {
    e.spikehunt = j.value("spikehunt", "");
    e.libtorch = j.value("libtorch", "");
    e.blas = j.value("blas", "");
    e.device = j.value("device", "");
    e.threads = j.contains("threads") ? json_integer(j["threads"], field + ".threads", file) : 0;
    e.compiler = j.value("compiler", "");
  } catch (const nlohmann::json::exception& ex) {
    throw InputError(file, field, "", std::string("is malformed: ") + ex.what());
  }
  return e;
}

std::vector<std::string> environment_warnings(const Environment& recorded, const Environment& here,
                                              const std::string& where) {
  std::vector<std::string> warnings;
  if (here.libtorch != recorded.libtorch) {
    warnings.push_back("LibTorch " + here.libtorch + " here, " + recorded.libtorch + " in the " + where +
                       ": bit-exactness is not promised");
  }
  if (here.blas != recorded.blas) {
    warnings.push_back("BLAS differs (here: " + here.blas + "; " + where + ": " + recorded.blas +
                       "): bit-exactness is not promised");
  }
  return warnings;
}

}  // namespace spikehunt
