// The XXH3-128 streaming functions of one build (content_hash.cc picks one).
#ifndef SLUICE_IO_CONTENT_HASH_IMPL_H_
#define SLUICE_IO_CONTENT_HASH_IMPL_H_

#include <cstddef>
#include <cstdint>

namespace sluice::content_hash_impl {

// Room for an XXH3_state_t (576 bytes, 64-byte aligned in xxhash 0.8).
struct alignas(64) RawState {
  unsigned char bytes[640];
};

struct Functions {
  void (*reset)(RawState*);
  void (*update)(RawState*, const void*, size_t);
  void (*digest)(const RawState*, uint64_t* low, uint64_t* high);
  void (*oneshot)(const void*, size_t, uint64_t* low, uint64_t* high);
};

const Functions& Avx2();      // content_hash_avx2.cc, built with -mavx2
const Functions& Baseline();  // content_hash_baseline.cc

}  // namespace sluice::content_hash_impl

#endif  // SLUICE_IO_CONTENT_HASH_IMPL_H_
