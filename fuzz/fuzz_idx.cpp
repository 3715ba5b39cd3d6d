// fuzz_idx — idx files (MNIST format), raw or gzip. Never crashes, never reads
// past the input; an array that parses holds exactly product(dims) bytes.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "scenarios/dataset.h"

using namespace spikehunt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const IdxArray a = parse_idx(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz-idx3-ubyte");
    uint64_t n = 1;
    for (int64_t d : a.dims) n *= uint64_t(d);
    if (a.dims.empty() || a.dims.size() > 4 || n != a.data.size()) std::abort();
  } catch (const InputError& e) {
    (void)e.what();
  }
  return 0;
}
