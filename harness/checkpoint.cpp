#include "harness/checkpoint.h"

#include <algorithm>

#include "base/error.h"
#include "base/hash.h"

namespace spikehunt {

namespace {

struct DTypePair {
  DType ours;
  torch::ScalarType torch;
};
constexpr DTypePair kPairs[] = {
    {DType::kF64, torch::kFloat64}, {DType::kF32, torch::kFloat32}, {DType::kF16, torch::kFloat16},
    {DType::kBF16, torch::kBFloat16}, {DType::kI64, torch::kInt64}, {DType::kI32, torch::kInt32},
    {DType::kI16, torch::kInt16},   {DType::kI8, torch::kInt8},     {DType::kU8, torch::kUInt8},
    {DType::kBool, torch::kBool},
};

}  // namespace

TensorBlob to_blob(const std::string& name, const torch::Tensor& t) {
  const torch::Tensor host = t.detach().to(torch::kCPU).contiguous();
  TensorBlob b;
  b.name = name;
  b.shape = host.sizes().vec();
  bool known = false;
  for (const DTypePair& p : kPairs) {
    if (p.torch == host.scalar_type()) b.dtype = p.ours, known = true;
  }
  if (!known) throw std::invalid_argument("checkpoint: tensor " + name + " has an unsupported dtype");
  b.bytes.assign(static_cast<const char*>(host.data_ptr()), host.nbytes());
  return b;
}

void write_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorBlob> blobs;
  std::map<std::string, std::string> meta = metadata;
  for (const NamedTensor& t : tensors) {
    blobs.push_back(to_blob(t.name, t.tensor));
    meta[kContentHashPrefix + t.name] = hash_bytes(blobs.back().bytes.data(), blobs.back().bytes.size()).hex();
  }
  write_safetensors(path, blobs, meta);
}

void check_content_hashes(const SafeTensors& f, const std::string& file) {
  for (const TensorEntry& e : f.tensors) {
    const auto recorded = f.metadata.find(kContentHashPrefix + e.name);
    if (recorded == f.metadata.end()) continue;  // written before checkpoints carried hashes
    const std::string_view d = f.data(e);
    const std::string now = hash_bytes(d.data(), d.size()).hex();
    if (now != recorded->second) {
      throw InputError(file, e.name, "content hash " + now,
                       "does not match the hash written with it (" + recorded->second +
                           "): the checkpoint is damaged or was edited",
                       "record the repro again (or restore the file); nothing was replayed");
    }
  }
}

std::vector<NamedTensor> checkpoint_tensors(const SafeTensors& f) {
  std::vector<NamedTensor> out;
  for (const TensorEntry& e : f.tensors) {
    torch::ScalarType type = torch::kFloat32;
    for (const DTypePair& p : kPairs) {
      if (p.ours == e.dtype) type = p.torch;
    }
    const std::string_view d = f.data(e);
    torch::Tensor t = torch::empty(e.shape, type);
    std::copy(d.begin(), d.end(), static_cast<char*>(t.data_ptr()));
    out.push_back({e.name, t});
  }
  std::sort(out.begin(), out.end(), [](const NamedTensor& a, const NamedTensor& b) { return a.name < b.name; });
  return out;
}

std::vector<NamedTensor> read_checkpoint(const std::string& path) {
  const SafeTensors f = read_safetensors(path);
  check_content_hashes(f, path);
  return checkpoint_tensors(f);
}

}  // namespace spikehunt
