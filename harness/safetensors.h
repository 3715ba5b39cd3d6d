// safetensors.h — reads, writes and audits safetensors files without LibTorch:
// 8-byte little-endian header length, a JSON header mapping each tensor name to
// {dtype, shape, data_offsets}, then the raw little-endian tensor bytes.
// Reading never executes anything; every header field is checked (lengths,
// offsets within the buffer, byte counts matching shape × dtype, no holes or
// overlaps), and a bad file is an InputError naming the file and the field.
// Example:
//   SafeTensors f = read_safetensors("results/x/first_bad.safetensors");
//   for (const TensorAudit& a : audit(f)) ...
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace spikehunt {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

const char* to_string(DType d);  // the safetensors name: "F32", "BF16", ...
size_t dtype_size(DType d);
bool is_float(DType d);

struct TensorEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
  int64_t numel() const;
};

struct SafeTensors {
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::vector<TensorEntry> tensors;             // in data order
  std::string bytes;                            // the whole file
  size_t data_start = 0;                        // where the data section begins
  std::string_view data(const TensorEntry& t) const {
    return std::string_view(bytes).substr(data_start + t.begin, t.end - t.begin);
  }
  const TensorEntry* find(const std::string& name) const;
};

SafeTensors parse_safetensors(std::string bytes, const std::string& file);
SafeTensors read_safetensors(const std::string& path);

// A tensor to write: its bytes must be numel × dtype_size long.
struct TensorBlob {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
std::string serialize_safetensors(const std::vector<TensorBlob>& tensors,
                                  const std::map<std::string, std::string>& metadata);
void write_safetensors(const std::string& path, const std::vector<TensorBlob>& tensors,
                       const std::map<std::string, std::string>& metadata);

// Element i of a float tensor as a double (F64/F32/F16/BF16; integers too).
double element(const TensorEntry& t, std::string_view data, int64_t i);

// ---- audit ----
struct TensorAudit {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t nan = 0, pos_inf = 0, neg_inf = 0;
  double max_abs = 0;  // over finite elements
  bool finite() const { return nan == 0 && pos_inf == 0 && neg_inf == 0; }
};
std::vector<TensorAudit> audit(const SafeTensors& f);

// ---- pair validation ----
struct PairDiff {
  bool same = true;            // same names, dtypes, shapes and bytes
  std::string first_tensor;    // the first differing tensor, in name order
  std::string reason;          // what differs: "missing in B", "dtype F32 vs F64", "values", ...
  double max_abs_diff = 0;     // largest |a - b| over that tensor's elements (values only)
  int64_t max_diff_index = -1; // flat index of that element
  int64_t differing = 0;       // elements that differ bitwise
};
PairDiff compare(const SafeTensors& a, const SafeTensors& b);

}  // namespace spikehunt
