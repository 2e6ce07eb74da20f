// Hedged RADOS writes: an object written through CreateRelocatable whose
// writes are late is written again, whole, under another name in another
// placement group, and the first copy to hold every byte is the one the
// caller records (WritableObject::StoredName); the others are removed.
//
// Why: a RADOS object lives in one placement group, and one slow OSD in its
// acting set holds up every write to it (ops on a PG are applied in order).
// Writes are only late with respect to what this client has seen lately, so
// the deadline is `factor` x the median of recent write latencies, never
// under `floor_ms`. The median, not a p95 or p99: when a slow OSD serves
// half the placement groups, a high percentile is the slow writes' own
// latency and would never call them late; the median stays a healthy
// write's as long as most writes are healthy, which avoiding slow
// placement groups (below) soon makes true. A placement group found late is avoided for `avoid_ms` by new
// objects too (their names get a suffix that maps them elsewhere), so a
// lasting fault costs a few hedges, not one per object. Extra bytes are
// bounded: a hedge is refused once hedged bytes would pass `extra` x the
// bytes callers wrote, and an object larger than `max_held_bytes` is not
// held in memory and not hedged.
//
// Internal to src/backends/rados.
#ifndef SLUICE_BACKENDS_RADOS_RADOS_HEDGE_H_
#define SLUICE_BACKENDS_RADOS_RADOS_HEDGE_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/hedge_state.h"
#include "backends/rados/rados_object.h"
#include "sluice/backend.h"

namespace sluice {

// `name` as the hedged object `k` beside it: "a/b-000003.dat" -> "a/b-000003-h<k>.dat"
// (other names get "-h<k>" appended). k = 0 is `name` itself.
std::string HedgeName(const std::string& name, unsigned k);

// A writable for Backend::CreateRelocatable: `name` under `object_prefix`.
// Creates nothing until the first write (the exclusive create travels with
// it), so AlreadyExists comes back from that write's Reap, for the name the
// first copy took: where `name`'s placement group is avoided, that is a
// name beside it, and an object already at `name` goes unnoticed (callers
// name data objects by a writer id of their own, so none is expected).
// The PG map is fetched (MarkSlow) on the writer's thread, bounded by the
// monitor op timeout.
std::unique_ptr<WritableObject> NewHedgedRadosWritable(std::shared_ptr<Cluster> cluster,
                                                       std::shared_ptr<HedgeState> state,
                                                       std::string object_prefix, std::string name,
                                                       size_t depth, uint64_t size_hint);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_RADOS_RADOS_HEDGE_H_
