// ContentHash: a chunk's 128-bit content identity (XXH3-128), which lets an
// incremental save recognise a chunk its base already holds. It is an
// identity, not an integrity check: a match is confirmed by the chunk's
// CRC32C before it is trusted (doc/format.md, "Incremental saves").
//
// XXH3 is compiled into sluice from libxxhash-dev's header, once for AVX2
// and once for the baseline (SSE2), and the AVX2 build is picked at run time
// where the CPU has it: Debian's shared libxxhash does not dispatch, and runs
// at about a fifth of the speed.
//
// Thread-safety: a ContentHasher belongs to one thread; the free functions
// are pure.
#ifndef SLUICE_IO_CONTENT_HASH_H_
#define SLUICE_IO_CONTENT_HASH_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace sluice {

struct Hash128 {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const Hash128& o) const { return low == o.low && high == o.high; }
  bool operator!=(const Hash128& o) const { return !(*this == o); }
};

// Hashes one chunk from pieces: Reset, Update over consecutive pieces, then
// Digest (equal to ContentHashOf the concatenation).
class ContentHasher {
 public:
  ContentHasher();
  ~ContentHasher();
  ContentHasher(const ContentHasher&) = delete;
  ContentHasher& operator=(const ContentHasher&) = delete;

  void Reset();
  void Update(const void* data, size_t len);
  Hash128 Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

Hash128 ContentHashOf(const void* data, size_t len);

// "avx2" or "sse2": which build of XXH3 this process uses.
const char* ContentHashImplementation();

namespace testing {
// Replaces the hash by one that collides for every chunk of a given length
// (the digest is the length), so tests can show that a collision is caught
// by the CRC before a reference is made. Not for production use.
void UseCollidingContentHashForTesting(bool on);
}  // namespace testing

}  // namespace sluice

#endif  // SLUICE_IO_CONTENT_HASH_H_
