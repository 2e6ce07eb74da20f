// A backend decorator that paces reads through a TokenBucket: each read
// takes its bytes' worth of tokens (and a concurrency slot) before it
// starts and gives the slot back when it is reaped. Background readers
// (scrub, later rebuild) use it so that they never take more of a tier than
// their cap, whatever the reader's queue depth. Writes and small reads pass
// through unpaced.
//
// Thread-safety: as the wrapped backend's; the bucket is thread-safe.
#ifndef SLUICE_ENGINE_THROTTLED_READS_H_
#define SLUICE_ENGINE_THROTTLED_READS_H_

#include <atomic>
#include <memory>

#include "io/token_bucket.h"
#include "sluice/backend.h"

namespace sluice {

std::unique_ptr<Backend> NewThrottledReads(std::unique_ptr<Backend> target,
                                           std::shared_ptr<TokenBucket> bucket);

// The same over a backend the caller keeps open (it must outlive the
// result). Once `stop` (optional) turns true, reads fail at once with
// Unavailable, so that a background reader ends without waiting out its cap.
std::unique_ptr<Backend> NewThrottledReads(Backend& borrowed, std::shared_ptr<TokenBucket> bucket,
                                           const std::atomic<bool>* stop = nullptr);

}  // namespace sluice

#endif  // SLUICE_ENGINE_THROTTLED_READS_H_
