#include "harness/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/files.h"

namespace spikehunt {

using json = nlohmann::json;

namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kF64, "F64", 8}, {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
    {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4}, {DType::kI16, "I16", 2}, {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},   {DType::kBool, "BOOL", 1},
};

constexpr uint64_t kMaxHeader = uint64_t{100} << 20;  // 100 MB, as the reference implementation

}  // namespace

const char* to_string(DType d) {
  for (const DTypeInfo& i : kDTypes) {
    if (i.dtype == d) return i.name;
  }
  return "?";
}

size_t dtype_size(DType d) {
  for (const DTypeInfo& i : kDTypes) {
    if (i.dtype == d) return i.size;
  }
  return 1;
}

bool is_float(DType d) {
  return d == DType::kF64 || d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
}

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

const TensorEntry* SafeTensors::find(const std::string& name) const {
  for (const TensorEntry& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// ---- reading ----

SafeTensors parse_safetensors(std::string bytes, const std::string& file) {
  auto fail = [&](const std::string& field, const std::string& value, const std::string& message,
                  const std::string& hint = "") -> InputError {
    return InputError(file, field, value, message, hint);
  };
  if (bytes.size() < 8) {
    throw fail("header length", std::to_string(bytes.size()) + " bytes",
               "is missing: a safetensors file starts with an 8-byte header length",
               "is this a safetensors file?");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  if (n > kMaxHeader || n > bytes.size() - 8) {
    // A random file gives a 19-digit "length": say what the bytes are rather than quoting it.
    if (n > kMaxHeader) {
      throw fail("header length", "", "is not one: the first 8 bytes do not give a header length under 100 MB (" +
                                          std::to_string(bytes.size()) + " bytes in the file)",
                 "this is not a safetensors file");
    }
    throw fail("header length", std::to_string(n),
               "exceeds the file (" + std::to_string(bytes.size()) + " bytes)", "the file is truncated");
  }
  SafeTensors f;
  f.data_start = 8 + n;
  json header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded()) throw fail("header", "", "is not valid JSON");
  if (!header.is_object()) throw fail("header", header.type_name(), "is not a JSON object");
  const uint64_t data_size = bytes.size() - f.data_start;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) throw fail("__metadata__", v.type_name(), "is not an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          throw fail("__metadata__." + m.key(), m.value().dump(), "is not a string");
        }
        f.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) throw fail(key, v.dump().substr(0, 60), "is not a tensor entry {dtype, shape, data_offsets}");
    TensorEntry t;
    t.name = key;
    const auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) throw fail(key + ".dtype", dt == v.end() ? "" : dt->dump(), "is missing or not a string");
    bool known = false;
    for (const DTypeInfo& i : kDTypes) {
      if (dt->get<std::string>() == i.name) t.dtype = i.dtype, known = true;
    }
    if (!known) throw fail(key + ".dtype", dt->dump(), "is not a supported dtype (F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
    const auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) throw fail(key + ".shape", sh == v.end() ? "" : sh->dump(), "is missing or not a list");
    uint64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) throw fail(key + ".shape", sh->dump(), "holds a value that is not a non-negative integer");
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > data_size / dim) {
        throw fail(key + ".shape", sh->dump(), "describes more elements than the file holds");
      }
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      throw fail(key + ".data_offsets", off == v.end() ? "" : off->dump(), "is not a pair [begin, end] of byte offsets");
    }
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_size) {
      throw fail(key + ".data_offsets", off->dump(),
                 "is outside the data section (" + std::to_string(data_size) + " bytes)",
                 "the file is truncated or its header is corrupt");
    }
    const size_t width = dtype_size(t.dtype);
    if (numel > std::numeric_limits<uint64_t>::max() / width || t.end - t.begin != numel * width) {
      throw fail(key + ".data_offsets", off->dump(),
                 "spans " + std::to_string(t.end - t.begin) + " bytes, but shape " + sh->dump() + " of " +
                     to_string(t.dtype) + " needs " + std::to_string(numel * width));
    }
    f.tensors.push_back(std::move(t));
  }
  // The data section must be covered exactly: no holes, no overlaps.
  std::sort(f.tensors.begin(), f.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t cursor = 0;
  for (const TensorEntry& t : f.tensors) {
    if (t.begin != cursor) {
      throw fail(t.name + ".data_offsets", "[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]",
                 t.begin < cursor ? "overlaps the tensor before it" : "leaves a hole before it",
                 "the header is corrupt");
    }
    cursor = t.end;
  }
  if (cursor != data_size) {
    throw fail("data", std::to_string(data_size) + " bytes",
               "has " + std::to_string(data_size - cursor) + " bytes no tensor covers");
  }
  f.bytes = std::move(bytes);
  return f;
}

SafeTensors read_safetensors(const std::string& path) {
  return parse_safetensors(read_file(path, uint64_t{1} << 36), path);
}

// ---- writing ----

std::string serialize_safetensors(const std::vector<TensorBlob>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorBlob& t : tensors) {
    header[t.name] = {{"dtype", to_string(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  std::string out(8, '\0');
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += h;
  for (const TensorBlob& t : tensors) out += t.bytes;
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorBlob>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

// ---- elements ----

namespace {

double half_to_double(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(double(mant), -24);
  else if (exp == 31) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(double(mant | 0x400), exp - 25);
  return sign ? -v : v;
}

template <class T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

double element(const TensorEntry& t, std::string_view data, int64_t i) {
  const char* p = data.data() + i * dtype_size(t.dtype);
  switch (t.dtype) {
    case DType::kF64: return load<double>(p);
    case DType::kF32: return load<float>(p);
    case DType::kF16: return half_to_double(load<uint16_t>(p));
    case DType::kBF16: {
      const uint32_t bits = uint32_t(load<uint16_t>(p)) << 16;
      return load<float>(reinterpret_cast<const char*>(&bits));
    }
    case DType::kI64: return double(load<int64_t>(p));
    case DType::kI32: return load<int32_t>(p);
    case DType::kI16: return load<int16_t>(p);
    case DType::kI8: return load<int8_t>(p);
    case DType::kU8: return load<uint8_t>(p);
    case DType::kBool: return load<uint8_t>(p) != 0;
  }
  return 0;
}

// ---- audit ----

std::vector<TensorAudit> audit(const SafeTensors& f) {
  std::vector<TensorAudit> out;
  for (const TensorEntry& t : f.tensors) {
    TensorAudit a{t.name, t.dtype, t.shape, t.numel()};
    const std::string_view d = f.data(t);
    for (int64_t i = 0; i < a.numel; ++i) {
      const double x = element(t, d, i);
      if (std::isnan(x)) ++a.nan;
      else if (std::isinf(x)) ++(x > 0 ? a.pos_inf : a.neg_inf);
      else a.max_abs = std::max(a.max_abs, std::fabs(x));
    }
    out.push_back(std::move(a));
  }
  std::sort(out.begin(), out.end(), [](const TensorAudit& a, const TensorAudit& b) { return a.name < b.name; });
  return out;
}

// ---- pairs ----

PairDiff compare(const SafeTensors& a, const SafeTensors& b) {
  std::vector<std::string> names;
  for (const TensorEntry& t : a.tensors) names.push_back(t.name);
  for (const TensorEntry& t : b.tensors) {
    if (!a.find(t.name)) names.push_back(t.name);
  }
  std::sort(names.begin(), names.end());
  PairDiff d;
  for (const std::string& name : names) {
    const TensorEntry* x = a.find(name);
    const TensorEntry* y = b.find(name);
    d.first_tensor = name;
    d.same = false;
    if (!x) return d.reason = "missing in the first file", d;
    if (!y) return d.reason = "missing in the second file", d;
    if (x->dtype != y->dtype) return d.reason = std::string("dtype ") + to_string(x->dtype) + " vs " + to_string(y->dtype), d;
    if (x->shape != y->shape) return d.reason = "shape " + json(x->shape).dump() + " vs " + json(y->shape).dump(), d;
    const std::string_view dx = a.data(*x), dy = b.data(*y);
    if (dx == dy) {
      d.same = true;
      continue;
    }
    d.reason = "values";
    const size_t w = dtype_size(x->dtype);
    for (int64_t i = 0; i < x->numel(); ++i) {
      if (dx.compare(size_t(i) * w, w, dy.substr(size_t(i) * w, w)) == 0) continue;
      ++d.differing;
      const double u = element(*x, dx, i), v = element(*y, dy, i);
      const double diff = std::isnan(u) && std::isnan(v)   ? 0.0  // NaNs with other payload bits
                          : std::isnan(u) || std::isnan(v) ? std::numeric_limits<double>::infinity()
                                                           : std::fabs(u - v);
      if (d.max_diff_index < 0 || diff > d.max_abs_diff) {
        d.max_abs_diff = diff;
        d.max_diff_index = i;
      }
    }
    return d;
  }
  d = PairDiff{};
  return d;
}

}  // namespace spikehunt
