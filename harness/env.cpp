#include "harness/env.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/csrc/api/include/torch/version.h>


#include "base/error.h"
#include "base/json.h"

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

// A function of LibTorch's, looked up at run time: this file is also linked
// without LibTorch (the parser fuzz targets). In the global scope for a
// program, else in the libtorch_cpu.so already loaded (Python loads torch's
// libraries into a local scope).
void* torch_symbol(const char* name) {
  if (void* f = ::dlsym(RTLD_DEFAULT, name)) return f;
  void* lib = ::dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
  return lib == nullptr ? nullptr : ::dlsym(lib, name);
}

// PyPI's torch links MKL into libtorch_cpu.so, so no BLAS shows among the
// shared objects; LibTorch exports MKL's version function, looked up at run
// time like OpenBLAS's below. MKL picks its kernels from the CPU as it runs
// (ATen's CPU capability, recorded beside it, follows the same CPU).
std::string mkl_in_libtorch() {
  using GetVersion = void (*)(char*, int);
  auto version = reinterpret_cast<GetVersion>(torch_symbol("MKL_Get_Version_String"));
  if (version == nullptr) return "";
  char buf[256] = {};
  version(buf, sizeof buf - 1);
  const std::string text = buf;  // "Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build ..."
  const std::string key = "Version ";
  const size_t at = text.find(key);
  std::string number = at == std::string::npos ? "" : text.substr(at + key.size());
  number = number.substr(0, number.find_first_of("- "));
  return "MKL " + (number.empty() ? std::string("(version unknown)") : number) + " (linked into LibTorch)";
}

}  // namespace

std::string blas_in_use() {
  // LibTorch's own MKL first: a BLAS that another library loaded (numpy's
  // OpenBLAS in a Python process) is not the one LibTorch calls.
  if (std::string linked = mkl_in_libtorch(); !linked.empty()) return linked;
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

std::string aten_cpu_capability() {
  static const std::string capability = [] {
    // at::show_config(), looked up at run time like OpenBLAS's functions
    // above: this file is also linked without LibTorch (the parser fuzz
    // targets), and ATen/Version.h would make it a LibTorch-sized unit.
    using ShowConfig = std::string (*)();
    auto show_config = reinterpret_cast<ShowConfig>(torch_symbol("_ZN2at11show_configB5cxx11Ev"));
    if (show_config == nullptr) return std::string("unknown");
    const std::string config = show_config();  // "... CPU capability usage: AVX2\n ..."
    const std::string key = "CPU capability usage: ";
    const size_t at = config.find(key);
    if (at == std::string::npos) return std::string("unknown");
    const size_t from = at + key.size();
    return config.substr(from, config.find_first_of("\n ", from) - from);
  }();
  return capability;
}

std::string node_name() {
  if (const char* slurm = std::getenv("SLURMD_NODENAME"); slurm != nullptr && *slurm != '\0') return slurm;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "unknown";
  return host;
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
  e.cpu_capability = aten_cpu_capability();
  e.node = node_name();
  return e;
}

nlohmann::json to_json(const Environment& e) {
  nlohmann::json j = {{"spikehunt", e.spikehunt}, {"libtorch", e.libtorch}, {"blas", e.blas},
                      {"device", e.device},       {"threads", e.threads},   {"compiler", e.compiler}};
  if (!e.cpu_capability.empty()) j["cpu_capability"] = e.cpu_capability;
  if (!e.node.empty()) j["node"] = e.node;
  return j;
}

std::string describe(const Environment& e) {
  return "spikehunt " + e.spikehunt + " | LibTorch " + e.libtorch + " | " + e.device + ", " +
         std::to_string(e.threads) + " thread(s) | BLAS: " + e.blas +
         (e.cpu_capability.empty() ? "" : " | ATen CPU: " + e.cpu_capability);
}

std::string environment_key(const Environment& e) {
  return "spikehunt " + e.spikehunt + " | LibTorch " + e.libtorch + " | " + e.device + " | BLAS: " + e.blas +
         " | ATen CPU: " + (e.cpu_capability.empty() ? "?" : e.cpu_capability) + " | " + e.compiler;
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
    e.cpu_capability = j.value("cpu_capability", "");
    e.node = j.value("node", "");
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
  if (!here.cpu_capability.empty() && !recorded.cpu_capability.empty() && here.cpu_capability != recorded.cpu_capability) {
    warnings.push_back("ATen picks " + here.cpu_capability + " kernels here, " + recorded.cpu_capability + " in the " +
                       where + ": bit-exactness is not promised");
  }
  return warnings;
}

}  // namespace spikehunt
