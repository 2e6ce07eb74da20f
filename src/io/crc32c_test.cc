#include "io/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace sluice {
namespace {

TEST(Crc32c, StandardCheckValue) {
  // The CRC32C check value from the Castagnoli/iSCSI specification.
  const std::string s = "123456789";
  EXPECT_EQ(Crc32c(s.data(), s.size()), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32c, KnownVectorsFromRfc3720) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(inc.data(), 32), 0x46DD794Eu);
}

TEST(Crc32c, ExtendEqualsWholeAtEverySplit) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(5000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const uint32_t whole = Crc32c(buf.data(), buf.size());
  for (size_t split : {0ul, 1ul, 7ul, 64ul, 4095ul, 4999ul, 5000ul}) {
    uint32_t c = Crc32cExtend(0, buf.data(), split);
    c = Crc32cExtend(c, buf.data() + split, buf.size() - split);
    EXPECT_EQ(c, whole) << "split at " << split;
  }
}

TEST(Crc32c, DetectsEverySingleBitFlip) {
  std::vector<uint8_t> buf(512, 0x5a);
  const uint32_t good = Crc32c(buf.data(), buf.size());
  for (size_t i = 0; i < buf.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      buf[i] ^= static_cast<uint8_t>(1 << bit);
      ASSERT_NE(Crc32c(buf.data(), buf.size()), good) << "byte " << i << " bit " << bit;
      buf[i] ^= static_cast<uint8_t>(1 << bit);
    }
  }
}

}  // namespace
}  // namespace sluice
