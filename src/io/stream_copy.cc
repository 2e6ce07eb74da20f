#include "sluice/stream_copy.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace sluice {
namespace {

__attribute__((target("avx2"))) void StreamCopyAvx2(uint8_t* dst, const uint8_t* src, size_t n) {
  size_t head = (32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31;
  head = std::min(head, n);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();
}

}  // namespace

void StreamCopy(void* dst_v, const void* src_v, size_t n) {
  auto* dst = static_cast<uint8_t*>(dst_v);
  const auto* src = static_cast<const uint8_t*>(src_v);
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && n >= (64u << 10)) {
    StreamCopyAvx2(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

}  // namespace sluice
