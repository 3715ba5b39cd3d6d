// checkpoint.h — LibTorch tensors to and from safetensors files: the model
// and optimizer state of a burst (last healthy / first bad), readable from
// Python and safe to audit.
// Example:
//   write_checkpoint("results/x/last_healthy.safetensors", snapshot.tensors,
//                    {{"step", "45"}});
//   std::vector<NamedTensor> t = read_checkpoint("results/x/last_healthy.safetensors");
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/safetensors.h"
#include "scenarios/scenario.h"

namespace spikehunt {

// Every checkpoint carries the XXH3-128 of each tensor's bytes (the generator's state, "rng.cpu",
// among them) in its metadata under this prefix; read_checkpoint checks them before anything is
// restored, and a tensor whose bytes changed is an InputError naming the file and the tensor.
inline constexpr const char* kContentHashPrefix = "spikehunt.xxh3.";

TensorBlob to_blob(const std::string& name, const torch::Tensor& t);  // copies to the host
void write_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata);
std::vector<NamedTensor> read_checkpoint(const std::string& path);  // CPU tensors, in name order
std::vector<NamedTensor> checkpoint_tensors(const SafeTensors& f);
void check_content_hashes(const SafeTensors& f, const std::string& file);

}  // namespace spikehunt
