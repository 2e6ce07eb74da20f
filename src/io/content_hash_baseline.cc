// XXH3-128 inlined from libxxhash-dev's header (baseline build).
#include "io/content_hash_impl.h"

// The compiler's baseline for x86-64 is SSE2, which xxhash picks itself.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sluice::content_hash_impl {
namespace {

static_assert(sizeof(XXH3_state_t) <= sizeof(RawState), "RawState too small for XXH3_state_t");
static_assert(alignof(XXH3_state_t) <= alignof(RawState), "RawState under-aligned");

XXH3_state_t* S(RawState* r) { return reinterpret_cast<XXH3_state_t*>(r->bytes); }
const XXH3_state_t* S(const RawState* r) { return reinterpret_cast<const XXH3_state_t*>(r->bytes); }

void Reset(RawState* r) { XXH3_128bits_reset(S(r)); }
void Update(RawState* r, const void* p, size_t n) { XXH3_128bits_update(S(r), p, n); }
void Digest(const RawState* r, uint64_t* low, uint64_t* high) {
  XXH128_hash_t h = XXH3_128bits_digest(S(r));
  *low = h.low64;
  *high = h.high64;
}
void OneShot(const void* p, size_t n, uint64_t* low, uint64_t* high) {
  XXH128_hash_t h = XXH3_128bits(p, n);
  *low = h.low64;
  *high = h.high64;
}

}  // namespace

const Functions& Baseline() {
  static const Functions f{Reset, Update, Digest, OneShot};
  return f;
}

}  // namespace sluice::content_hash_impl
