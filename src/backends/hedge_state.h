// The Placement (sluice/backend.h) the backends whose names choose where
// bytes go share (RADOS placement groups, the directories of a
// multi-directory file store), all but Place, which each defines: recent
// write latencies and the deadline derived from them, the placements found
// slow, the extra-byte budget, and what hedging cost.
//
// A "placement" is where a backend puts an object: a RADOS placement group,
// or a file store's directory. A late write marks its placement slow for a
// while, and new objects keep away from it. Where the backend can say which
// devices a placement spans (a PG's acting OSDs), a device most late
// placements share is suspected, and all its placements are avoided.
//
// Internal to src/backends.
#ifndef SLUICE_BACKENDS_HEDGE_STATE_H_
#define SLUICE_BACKENDS_HEDGE_STATE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

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

// What the write queues of one backend share: recent latencies, the
// placement groups found slow, the byte budget, and the backend's own
// operations still in flight. Thread-safe.
class HedgeState : public Placement {
 public:
  using Clock = std::chrono::steady_clock;
  // The devices each placement spans (RADOS: every placement group's
  // acting OSDs, by PG seed); NotSupported when the backend may not ask (no
  // mgr 'allow r' cap: never asked again), another error when it may later.
  using ActingSets = std::map<uint32_t, std::vector<int>>;
  using FetchActing = std::function<Result<ActingSets>()>;
  // `fetch_acting` may be empty: slow placement groups are then avoided
  // one by one, never by the OSD they share.
  HedgeState(HedgeOptions options, FetchActing fetch_acting);
  const HedgeOptions& options() const { return options_; }

  // Placement, but for Place:
  const HedgePolicy& policy() const override { return policy_; }
  bool Slow(const std::string& name) const override;
  // factor x the median of recent latencies, at least floor_ms (and 500 ms
  // until 16 are known).
  std::chrono::nanoseconds Deadline() const override;
  // Past SlowAfter the name's placement is marked slow, else on time.
  void Observe(const std::string& name, std::chrono::nanoseconds latency, bool sample) override;
  bool Reserve(uint64_t bytes) override;
  void Count(HedgeEvent event, uint64_t bytes) override;
  HedgeStats Stats() const override;

  // Past this a finished write counts against its OSDs (MarkSlow):
  // twice the median, at least half the floor.
  Clock::duration SlowAfter() const;
  // A write that finished on the first copy of an object never hedged.
  void RecordLatency(Clock::duration d);
  // A write to placement group `pg` was late. The PG is avoided for
  // avoid_ms; so is every PG of an OSD that most recent late PGs (each
  // counted once) share
  // (the slow OSD: it serves about half the PGs of a 6-OSD, 3-host pool,
  // far more than a client learns one late PG at a time).
  void MarkSlow(uint32_t pg);
  // A write to `pg` finished before its deadline: its OSDs are cleared.
  void MarkOnTime(uint32_t pg);
  bool IsSlow(uint32_t pg) const;
  // Whether reads served by `pg`'s primary would wait on a suspect: its
  // first acting OSD is suspected slow (false where acting sets are unknown).
  bool PrimarySlow(uint32_t pg) const;
  // Where the backend puts an object called `name` (a PG seed, a directory
  // index); nullopt where it cannot tell. Set once, before use; unset,
  // PlacementSlow is always false.
  using PlacementOf = std::function<std::optional<uint32_t>(const std::string& name)>;
  void SetPlacementOf(PlacementOf placement_of) { placement_of_ = std::move(placement_of); }
  std::optional<uint32_t> PlacementOfName(const std::string& name) const {
    return placement_of_ ? placement_of_(name) : std::nullopt;
  }
  // Shares suspects with later processes through the file at `path` (a
  // few lines; empty: not shared). Suspects found there and still fresh
  // are avoided from the start, so that a new process does not learn a
  // lasting fault again with hedges of its own (each leaves a loser queued
  // at the slow device). A new suspect is written with kSharedSuspectMs to
  // run; a late write only it explains (the one suspect of that PG) renews
  // its entry once half of that is gone; a suspect cleared is dropped; the
  // others keep their own expiry. Best effort: a file that cannot be read
  // or written changes nothing else. Call once, before use.
  void ShareSuspects(std::string path);
  static constexpr int64_t kSharedSuspectMs = 5 * 60 * 1000;
  // What a probe found before anything was written (RadosBackend reads from
  // each OSD's placement groups when it opens): `late`, the OSDs most of
  // whose probes were not answered within the floor, are suspected like
  // those late writes share, and shared, unless suspected already; `acting`,
  // the sets the probe used, are kept, so that the first late write need not
  // fetch them. A probe never clears a suspect: an OSD slow to write may
  // still answer a read from its cache.
  void SuspectProbed(const std::vector<int>& late, ActingSets acting);
  // The OSDs suspected slow now, for messages and tests.
  std::vector<int> SuspectOsds();

  // The backend's own operations (RADOS: probes, hedged record reads),
  // counted until they complete, so that the cluster handle outlives them
  // (WaitIdle before shutdown).
  void OpStarted();
  void OpEnded();
  // False if operations were still in flight after `timeout`.
  bool WaitIdle(Clock::duration timeout);

 private:
  Clock::duration DeadlineLocked() const;
  bool IsSlowLocked(uint32_t pg, Clock::time_point now) const;
  std::vector<int> SuspectsLocked() const;
  // Suspects `osd` (for avoid_ms here, kSharedSuspectMs shared) unless it
  // is suspected already; whether it was added. Under mu_.
  bool AddSuspectLocked(int osd, Clock::time_point now, int64_t now_ms);
  // The suspects as the shared file lists them: each with its own
  // expiry (unix ms), numbered in the order taken. Under mu_.
  struct SharedLines {
    uint64_t seq = 0;
    std::vector<std::pair<int, int64_t>> lines;
  };
  SharedLines SharedLinesLocked();
  // Writes them to shared_path_ (when set), outside mu_; a snapshot older
  // than one already written is dropped.
  void WriteShared(const SharedLines& suspects);

  const HedgeOptions options_;
  const HedgePolicy policy_;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::vector<int64_t> samples_ns_;  // ring of recent latencies
  size_t next_sample_ = 0;
  mutable size_t since_computed_ = 0;  // samples since p50_ns_ was computed
  mutable int64_t p50_ns_ = 0;
  std::map<uint32_t, Clock::time_point> slow_until_;
  FetchActing fetch_acting_;
  PlacementOf placement_of_;  // set once, before use
  ActingSets acting_;                         // as of acting_at_
  Clock::time_point acting_at_{};
  bool acting_unavailable_ = false;           // the cluster refused: do not ask again
  Clock::time_point acting_failed_at_{};      // the last time asking failed (timed out)
  // The latest late PGs, each once (a record rewritten late in the same PG
  // again and again would otherwise outvote the rest), with acting sets.
  std::deque<std::pair<uint32_t, std::vector<int>>> recent_late_;
  std::deque<std::vector<int>> recent_on_time_;  // and of the latest written on time
  std::map<int, Clock::time_point> suspect_until_;
  std::string shared_path_;  // set once, before use
  // Each suspect's expiry in the shared file (unix ms): set when it is
  // found, or read from the file, and renewed only by a late write that it
  // alone explains, so that an OSD suspected beside the slow one (both in
  // the first late PGs) is not kept alive by the slow one's renewals.
  std::map<int, int64_t> shared_until_ms_;
  uint64_t shared_seq_ = 0;            // snapshots taken (under mu_)
  std::mutex shared_write_mu_;         // orders the writes of the shared file
  uint64_t shared_written_seq_ = 0;    // the newest snapshot written (under shared_write_mu_)
  HedgeStats stats_;
  size_t ops_in_flight_ = 0;
  size_t writes_in_flight_ = 0;
  Clock::time_point writing_since_{};  // while writes_in_flight_ > 0
  Clock::duration writing_{};          // summed over earlier busy spells
};

// The hedging options of a store URI, parsed the same for every backend
// that hedges: hedge=on|off, hedge_extra=F (0..4), hedge_floor_ms=MS.
struct HedgeUriOptions {
  bool hedge = true;
  double extra = 0.25;
  unsigned floor_ms = 100;
};
// Takes `key`=`val` into `out` when it is one of them (true), or leaves it
// (false); InvalidArgument naming `uri` for a bad value.
Result<bool> ParseHedgeUriOption(const std::string& uri, const std::string& key, const std::string& val,
                                 HedgeUriOptions* out);

// `name` with `tag` put before its extension: ("a/b-000003.dat", "-h1") ->
// "a/b-000003-h1.dat" (a name with no extension gets the tag appended).
std::string NameBeside(const std::string& name, const std::string& tag);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_HEDGE_STATE_H_
