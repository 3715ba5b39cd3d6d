// fuzz_safetensors — the checkpoint reader, audit and pair validator. Never
// crashes; a file that parses compares equal to itself, and writing its
// tensors again gives a file with the same audit.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "harness/safetensors.h"

using namespace spikehunt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const SafeTensors f = parse_safetensors(std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
    const std::vector<TensorAudit> a = audit(f);
    if (!compare(f, f).same) std::abort();
    std::vector<TensorBlob> blobs;
    for (const TensorEntry& t : f.tensors) blobs.push_back({t.name, t.dtype, t.shape, std::string(f.data(t))});
    const SafeTensors g = parse_safetensors(serialize_safetensors(blobs, f.metadata), "rewritten");
    const std::vector<TensorAudit> b = audit(g);
    if (a.size() != b.size() || !compare(f, g).same || g.metadata != f.metadata) std::abort();
    for (size_t i = 0; i < a.size(); ++i) {
      const bool same_max = a[i].max_abs == b[i].max_abs || (std::isnan(a[i].max_abs) && std::isnan(b[i].max_abs));
      if (a[i].nan != b[i].nan || a[i].pos_inf != b[i].pos_inf || a[i].neg_inf != b[i].neg_inf || !same_max) {
        std::fprintf(stderr, "audit differs after rewriting %s\n", a[i].name.c_str());
        std::abort();
      }
    }
  } catch (const InputError& e) {
    (void)e.what();
  }
  return 0;
}
