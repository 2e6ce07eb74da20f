#include "io/content_hash.h"

#include <atomic>

#include "io/content_hash_impl.h"

namespace sluice {
namespace {

using content_hash_impl::Functions;
using content_hash_impl::RawState;

const Functions& Chosen() {
  static const Functions& f = __builtin_cpu_supports("avx2") ? content_hash_impl::Avx2()
                                                             : content_hash_impl::Baseline();
  return f;
}

std::atomic<bool> colliding{false};

}  // namespace

struct ContentHasher::State {
  RawState raw;
  uint64_t length = 0;  // for the colliding test hash
};

ContentHasher::ContentHasher() : state_(new State) { Reset(); }
ContentHasher::~ContentHasher() = default;

void ContentHasher::Reset() {
  Chosen().reset(&state_->raw);
  state_->length = 0;
}

void ContentHasher::Update(const void* data, size_t len) {
  Chosen().update(&state_->raw, data, len);
  state_->length += len;
}

Hash128 ContentHasher::Digest() const {
  if (colliding.load(std::memory_order_relaxed)) return Hash128{state_->length, 0};
  Hash128 h;
  Chosen().digest(&state_->raw, &h.low, &h.high);
  return h;
}

Hash128 ContentHashOf(const void* data, size_t len) {
  if (colliding.load(std::memory_order_relaxed)) return Hash128{len, 0};
  Hash128 h;
  Chosen().oneshot(data, len, &h.low, &h.high);
  return h;
}

const char* ContentHashImplementation() {
  return &Chosen() == &content_hash_impl::Avx2() ? "avx2" : "sse2";
}

namespace testing {
void UseCollidingContentHashForTesting(bool on) { colliding.store(on); }
}  // namespace testing

}  // namespace sluice
