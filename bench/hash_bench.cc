// hash_bench: what checksumming and content hashing cost per GiB, on one
// core, against a memcpy of the same bytes (the stall floor).
//
//   build/sluice-hash-bench [GIB] [ROUNDS]
//
// Prints per pass the median GiB/s and CPU-seconds per GiB of memcpy,
// CRC32C (ISA-L) and XXH3-128 (the build this CPU runs), over a GIB-sized
// buffer (default 1) that does not fit in cache, ROUNDS (default 5) rounds
// alternating the three.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "sluice/aligned_buffer.h"
#include "io/content_hash.h"
#include "io/crc32c.h"

namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 1.0;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (!(gib > 0 && gib <= 64) || rounds < 1) {
    std::fprintf(stderr, "usage: %s [GIB in (0,64]] [ROUNDS >= 1]\n", argv[0]);
    return 2;
  }
  const size_t n = static_cast<size_t>(gib * (1ull << 30)) / 4096 * 4096;
  auto src = sluice::AlignedBuffer::Allocate(n);
  auto dst = sluice::AlignedBuffer::Allocate(n);
  if (!src.ok() || !dst.ok()) {
    std::fprintf(stderr, "cannot allocate 2 x %zu bytes\n", n);
    return 1;
  }
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = i * 0x9E3779B97F4A7C15ull;
    std::memcpy(src->data() + i, &v, 8);
  }
  std::memset(dst->data(), 1, n);
  constexpr size_t kChunk = 4 << 20;  // hashed chunk by chunk, as a save does
  volatile uint64_t sink = 0;
  std::vector<double> cpu[3];
  for (int r = 0; r < rounds; ++r) {
    for (int what = 0; what < 3; ++what) {
      const double c0 = CpuSeconds();
      if (what == 0) {
        std::memcpy(dst->data(), src->data(), n);
        sink = sink + dst->data()[n / 2];
      } else if (what == 1) {
        uint32_t crc = 0;
        for (size_t off = 0; off < n; off += kChunk) crc ^= sluice::Crc32c(src->data() + off, std::min(kChunk, n - off));
        sink = sink + crc;
      } else {
        uint64_t x = 0;
        for (size_t off = 0; off < n; off += kChunk) x ^= sluice::ContentHashOf(src->data() + off, std::min(kChunk, n - off)).low;
        sink = sink + x;
      }
      cpu[what].push_back((CpuSeconds() - c0) / (static_cast<double>(n) / (1ull << 30)));
    }
  }
  const char* names[3] = {"memcpy", "crc32c (ISA-L)", "xxh3-128"};
  std::printf("%zu MiB, %d rounds, medians, one core; xxh3 build: %s\n", n >> 20, rounds,
              sluice::ContentHashImplementation());
  for (int what = 0; what < 3; ++what) {
    const double s = Median(cpu[what]);
    std::printf("  %-15s %6.1f GiB/s  %.4f CPU-s/GiB  %.2fx memcpy's time\n", names[what], 1.0 / s, s,
                s / Median(cpu[0]));
  }
  return sink == 42 ? 3 : 0;
}
