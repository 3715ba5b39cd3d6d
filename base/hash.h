// hash.h — XXH3-128 of raw bytes, printed as 32 hex digits; and the hash
// chain that ties a burst's batches together (chain_i = H(chain_{i-1} ‖
// input_i ‖ labels_i)), so one value proves a replay saw the same data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace spikehunt {

struct Hash128 {
  uint64_t high = 0;
  uint64_t low = 0;
  bool operator==(const Hash128& o) const { return high == o.high && low == o.low; }
  bool operator!=(const Hash128& o) const { return !(*this == o); }
  std::string hex() const;  // 32 lowercase hex digits, high first
  static bool parse(const std::string& hex, Hash128* out);
};

Hash128 hash_bytes(const void* data, size_t size);

// XXH3-128 of several buffers as if they were one (the bytes of a step's
// micro-batches): the same value hash_bytes gives their concatenation.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void update(const void* data, size_t size);
  Hash128 digest() const;

 private:
  void* state_;  // XXH3_state_t
};
Hash128 chain(const Hash128& previous, const Hash128& input, const Hash128& labels);

}  // namespace spikehunt
