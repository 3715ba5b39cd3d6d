#include "base/hash.h"

#include <cstdio>
#include <new>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace spikehunt {

std::string Hash128::hex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return buf;
}

bool Hash128::parse(const std::string& hex, Hash128* out) {
  if (hex.size() != 32) return false;
  uint64_t parts[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else return false;
    parts[i / 16] = (parts[i / 16] << 4) | uint64_t(v);
  }
  *out = {parts[0], parts[1]};
  return true;
}

Hash128 hash_bytes(const void* data, size_t size) {
  const XXH128_hash_t h = XXH3_128bits(data, size);
  return {h.high64, h.low64};
}

Hasher::Hasher() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}

Hasher::~Hasher() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Hasher::update(const void* data, size_t size) { XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, size); }

Hash128 Hasher::digest() const {
  const XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return {h.high64, h.low64};
}

Hash128 chain(const Hash128& previous, const Hash128& input, const Hash128& labels) {
  const uint64_t words[6] = {previous.high, previous.low, input.high, input.low, labels.high, labels.low};
  return hash_bytes(words, sizeof words);
}

}  // namespace spikehunt
