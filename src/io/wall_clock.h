// The wall clock as records carry it (created_unix_ms, a lock's start) and
// as ages are judged against it (gc's --min-age, stale locks).
//
// Thread-safety: a pure function of the system clock.
#ifndef SLUICE_IO_WALL_CLOCK_H_
#define SLUICE_IO_WALL_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace sluice {

// Milliseconds since the Unix epoch, now.
inline int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace sluice

#endif  // SLUICE_IO_WALL_CLOCK_H_
