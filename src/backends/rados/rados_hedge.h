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

#include "backends/rados/rados_object.h"
#include "sluice/backend.h"

namespace sluice {

struct HedgeOptions {
  bool enabled = true;
  double extra = 0.25;          // hedged bytes / bytes written, at most
  unsigned floor_ms = 100;      // no write is late sooner than this
  double factor = 3.0;          // late: past factor x the median of recent writes
  uint64_t max_held_bytes = 32ull << 20;
  unsigned max_copies = 3;      // the first write and two hedges
  unsigned avoid_ms = 30'000;   // how long a late placement group is avoided
};

// What the objects of one backend share: recent latencies, the placement
// groups found slow, the byte budget, and the operations still in flight
// (also those of objects that stopped waiting for them). Thread-safe.
class HedgeState final : public HedgedWrites {
 public:
  using Clock = std::chrono::steady_clock;
  // Every placement group's acting OSDs, by PG seed (the pool's PGs only);
  // NotSupported when the client may not ask (no mgr 'allow r' cap: never
  // asked again), another error when it may later.
  using ActingSets = std::map<uint32_t, std::vector<int>>;
  using FetchActing = std::function<Result<ActingSets>()>;
  // `fetch_acting` may be empty: slow placement groups are then avoided
  // one by one, never by the OSD they share.
  HedgeState(HedgeOptions options, FetchActing fetch_acting)
      : options_(options), fetch_acting_(std::move(fetch_acting)) {}
  const HedgeOptions& options() const { return options_; }

  // How long a write may take before it is late: factor x the median of
  // recent latencies, at least floor_ms (and 500 ms until 16 are known).
  Clock::duration Deadline() const;
  // Past this a finished write counts against its OSDs (MarkSlow):
  // twice the median, at least half the floor.
  Clock::duration SlowAfter() const;
  // A write that finished on the first copy of an object never hedged.
  void RecordLatency(Clock::duration d);
  // A write to placement group `pg` was late. The PG is avoided for
  // avoid_ms; so is every PG of an OSD that most recent late writes' PGs share
  // (the slow OSD: it serves about half the PGs of a 6-OSD, 3-host pool,
  // far more than a client learns one late PG at a time).
  void MarkSlow(uint32_t pg);
  // A write to `pg` finished before its deadline: its OSDs are cleared.
  void MarkOnTime(uint32_t pg);
  bool IsSlow(uint32_t pg);
  // The OSDs suspected slow now, for messages and tests.
  std::vector<int> SuspectOsds();

  void Submitted(uint64_t bytes);
  // Takes `bytes` of the extra-byte budget if they fit.
  bool Reserve(uint64_t bytes);
  void CountRefused();
  void CountHedged();
  void CountWon();
  void CountAvoided();
  HedgeStats Stats() const override;

  // Every operation the hedged objects start, counted until it completes,
  // so that the cluster handle outlives them (WaitIdle before shutdown).
  void OpStarted();
  void OpEnded();
  // False if operations were still in flight after `timeout`.
  bool WaitIdle(Clock::duration timeout);

 private:
  Clock::duration DeadlineLocked() const;
  std::vector<int> SuspectsLocked() const;

  const HedgeOptions options_;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::vector<int64_t> samples_ns_;  // ring of recent latencies
  size_t next_sample_ = 0;
  mutable size_t since_computed_ = 0;  // samples since p50_ns_ was computed
  mutable int64_t p50_ns_ = 0;
  std::map<uint32_t, Clock::time_point> slow_until_;
  FetchActing fetch_acting_;
  ActingSets acting_;                         // as of acting_at_
  Clock::time_point acting_at_{};
  bool acting_unavailable_ = false;           // the cluster refused: do not ask again
  Clock::time_point acting_failed_at_{};      // the last time asking failed (timed out)
  std::deque<std::vector<int>> recent_late_;     // acting sets of the latest late PGs
  std::deque<std::vector<int>> recent_on_time_;  // and of the latest written on time
  std::map<int, Clock::time_point> suspect_until_;
  HedgeStats stats_;
  size_t ops_in_flight_ = 0;
};

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
