#include "io/content_hash.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "io/content_hash_impl.h"

namespace sluice {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

Hash128 Of(const content_hash_impl::Functions& f, const std::vector<uint8_t>& v) {
  Hash128 h;
  f.oneshot(v.data(), v.size(), &h.low, &h.high);
  return h;
}

TEST(ContentHash, BothBuildsAgreeAndPiecesEqualTheWhole) {
  const bool avx2 = __builtin_cpu_supports("avx2");
  for (size_t n : {0ul, 1ul, 16ul, 17ul, 128ul, 240ul, 241ul, 1000ul, 4096ul, 65537ul, 3ul << 20}) {
    auto v = RandomBytes(n, static_cast<uint32_t>(n));
    const Hash128 whole = ContentHashOf(v.data(), v.size());
    EXPECT_EQ(whole, Of(content_hash_impl::Baseline(), v)) << n;
    if (avx2) EXPECT_EQ(whole, Of(content_hash_impl::Avx2(), v)) << n;
    ContentHasher h;
    size_t done = 0, piece = 1;
    while (done < n) {
      size_t k = std::min(piece, n - done);
      h.Update(v.data() + done, k);
      done += k;
      piece = piece * 3 + 7;
    }
    EXPECT_EQ(h.Digest(), whole) << n;
  }
  if (avx2) EXPECT_STREQ(ContentHashImplementation(), "avx2");
}

TEST(ContentHash, DiffersOnOneBitAndResets) {
  auto v = RandomBytes(1 << 20, 7);
  const Hash128 a = ContentHashOf(v.data(), v.size());
  v[123456] ^= 1;
  EXPECT_NE(a, ContentHashOf(v.data(), v.size()));
  ContentHasher h;
  h.Update(v.data(), 10);
  h.Reset();
  h.Update(v.data(), v.size());
  EXPECT_EQ(h.Digest(), ContentHashOf(v.data(), v.size()));
}

TEST(ContentHash, TheCollidingTestHashCollides) {
  auto a = RandomBytes(4096, 1), b = RandomBytes(4096, 2);
  testing::UseCollidingContentHashForTesting(true);
  EXPECT_EQ(ContentHashOf(a.data(), a.size()), ContentHashOf(b.data(), b.size()));
  testing::UseCollidingContentHashForTesting(false);
  EXPECT_NE(ContentHashOf(a.data(), a.size()), ContentHashOf(b.data(), b.size()));
}

}  // namespace
}  // namespace sluice
