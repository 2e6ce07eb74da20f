#include "backends/hedge_state.h"

#include "backends/uri_query.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

namespace sluice {

namespace {

constexpr size_t kLatencySamples = 256;
// Below this many samples the p95 means little: the deadline is at least
// kUnsampledDeadline.
constexpr size_t kMinSamples = 16;
constexpr auto kUnsampledDeadline = std::chrono::milliseconds(500);
// An OSD in at least kMinLateForSuspect of the last kRecentLate late
// placement groups, and in three quarters of them, is suspected slow.
constexpr size_t kRecentLate = 8;
constexpr size_t kMinLateForSuspect = 4;
// An OSD in kOnTimeToClear of the last kRecentOnTime PGs written on time
// is not suspected (a slow OSD's PGs are rarely on time under load).
constexpr size_t kRecentOnTime = 16;
constexpr size_t kOnTimeToClear = 2;
// The median is recomputed after this many new samples, not per question.
constexpr size_t kRecomputeEvery = 16;
constexpr uint64_t kBudgetCredit = 256ull << 20;

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

namespace {
HedgePolicy PolicyOf(const HedgeOptions& o) {
  HedgePolicy p;
  p.enabled = o.enabled;
  p.extra = o.extra;
  p.floor_ms = o.floor_ms;
  p.max_held_bytes = o.max_held_bytes;
  p.max_copies = o.max_copies;
  return p;
}
}  // namespace

HedgeState::HedgeState(HedgeOptions options, FetchActing fetch_acting)
    : options_(options), policy_(PolicyOf(options)), fetch_acting_(std::move(fetch_acting)) {}

std::chrono::nanoseconds HedgeState::Deadline() const {
  std::lock_guard<std::mutex> lock(mu_);
  return DeadlineLocked();
}

void HedgeState::Observe(const std::string& name, std::chrono::nanoseconds latency, bool sample) {
  if (sample) RecordLatency(latency);
  const std::optional<uint32_t> placement = PlacementOfName(name);
  if (!placement) return;
  // Where the OSDs are judged, a write is slow well before it is late:
  // past twice the median (a slow OSD that is idle for a moment still
  // answers in a few times a healthy write's latency, under the deadline).
  // Every write is evidence, weighted by how many writes a group took: an
  // OSD of a late object's group that is not slow is cleared by the writes
  // to its other groups that finish on time.
  if (latency > SlowAfter()) {
    MarkSlow(*placement);
  } else {
    MarkOnTime(*placement);
  }
}

HedgeState::Clock::duration HedgeState::DeadlineLocked() const {
  const auto floor = std::chrono::milliseconds(options_.floor_ms);
  if (samples_ns_.size() < kMinSamples) return std::max<Clock::duration>(floor, kUnsampledDeadline);
  if (since_computed_ >= kRecomputeEvery || p50_ns_ == 0) {
    std::vector<int64_t> sorted = samples_ns_;
    const size_t k = (sorted.size() - 1) / 2;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<ptrdiff_t>(k), sorted.end());
    p50_ns_ = sorted[k];
    since_computed_ = 0;
  }
  const auto late = std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(p50_ns_) * options_.factor));
  return std::max<Clock::duration>(floor, late);
}

HedgeState::Clock::duration HedgeState::SlowAfter() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (samples_ns_.size() < kMinSamples) return DeadlineLocked();
  (void)DeadlineLocked();  // brings p50_ns_ up to date
  return std::max<Clock::duration>(std::chrono::milliseconds(options_.floor_ms) / 2,
                                   std::chrono::nanoseconds(p50_ns_ * 2));
}

void HedgeState::RecordLatency(Clock::duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  if (samples_ns_.size() < kLatencySamples) {
    samples_ns_.push_back(ns);
  } else {
    samples_ns_[next_sample_] = ns;
    next_sample_ = (next_sample_ + 1) % kLatencySamples;
  }
  ++since_computed_;
}

void HedgeState::MarkSlow(uint32_t pg) {
  const Clock::time_point now = Clock::now();
  const auto avoid = std::chrono::milliseconds(options_.avoid_ms);
  // The acting sets are fetched again once they are older than the
  // avoidance window (a lost OSD's PGs move); outside the lock, as it is a
  // round trip to the cluster.
  bool fetch = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    slow_until_[pg] = now + avoid;
    fetch = fetch_acting_ && !acting_unavailable_ && (acting_.empty() || now - acting_at_ >= avoid) &&
            (acting_failed_at_ == Clock::time_point{} || now - acting_failed_at_ >= avoid);
  }
  std::optional<Result<ActingSets>> fetched;
  if (fetch) fetched.emplace(fetch_acting_());
  std::unique_lock<std::mutex> lock(mu_);
  if (fetched) {
    if (fetched->ok()) {
      acting_ = std::move(fetched->value());
      acting_at_ = now;
    } else if (fetched->status().code() == StatusCode::kNotSupported) {
      acting_unavailable_ = true;  // refused (no mgr cap): not asked again
    } else {
      acting_failed_at_ = now;  // asked again after the avoidance window
    }
  }
  auto it = acting_.find(pg);
  if (it == acting_.end()) return;
  recent_late_.erase(std::remove_if(recent_late_.begin(), recent_late_.end(),
                                    [pg](const auto& late) { return late.first == pg; }),
                     recent_late_.end());
  recent_late_.emplace_back(pg, it->second);
  while (recent_late_.size() > kRecentLate) recent_late_.pop_front();
  const int64_t now_ms = WallMs();
  bool share = false;
  // A late write on a PG where exactly one suspect serves bears that
  // suspicion out: it is kept, and shared again once the shared copy is
  // half way to expiring (a process that avoids the suspect from its first
  // write rarely writes late enough to find it anew, and without this the
  // fault would be learnt again, hedges and all, every kSharedSuspectMs).
  // A PG with two suspects explains neither: renewing both would keep an
  // OSD first suspected beside the slow one (a tie in the first late PGs)
  // alive for as long as the slow one, and with it half the PGs left.
  int sole = -1;
  int live = 0;
  for (int osd : it->second) {
    auto at = suspect_until_.find(osd);
    if (at == suspect_until_.end() || at->second <= now) continue;
    ++live;
    sole = osd;
  }
  if (live == 1) {
    suspect_until_[sole] = std::max(suspect_until_[sole], now + avoid);
    int64_t& shared = shared_until_ms_[sole];
    if (shared - now_ms < kSharedSuspectMs / 2) {
      shared = now_ms + kSharedSuspectMs;
      share = true;
    }
  }
  // The suspects: the OSDs found in the most recent late PGs, in three
  // quarters of them at least, and not cleared by writes on time.
  std::map<int, size_t> late, on_time;
  for (const auto& [late_pg, set] : recent_late_) {
    for (int osd : set) ++late[osd];
  }
  for (const auto& set : recent_on_time_) {
    for (int osd : set) ++on_time[osd];
  }
  size_t most = 0;
  for (const auto& [osd, n] : late) most = std::max(most, n);
  if (recent_late_.size() >= kMinLateForSuspect && most * 4 >= recent_late_.size() * 3) {
    for (const auto& [osd, n] : late) {
      if (n == most && on_time[osd] < kOnTimeToClear) {
        // Only a new suspect is set here: one already suspected is renewed
        // by a late write it alone explains (above), never by being among
        // the OSDs tied in the recent late PGs, which an OSD suspected
        // beside the slow one stays for as long as no late PG tells them apart.
        share = AddSuspectLocked(osd, now, now_ms) || share;
      }
    }
  }
  if (!share) return;
  const auto lines = SharedLinesLocked();
  lock.unlock();
  WriteShared(lines);
}

void HedgeState::MarkOnTime(uint32_t pg) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = acting_.find(pg);
  if (it == acting_.end()) return;
  recent_on_time_.push_back(it->second);
  while (recent_on_time_.size() > kRecentOnTime) recent_on_time_.pop_front();
  // A suspect seen writing on time again is one no longer.
  bool cleared = false;
  for (int osd : it->second) {
    size_t n = 0;
    for (const auto& set : recent_on_time_) n += static_cast<size_t>(std::count(set.begin(), set.end(), osd));
    if (n >= kOnTimeToClear && suspect_until_.erase(osd) > 0) {
      shared_until_ms_.erase(osd);
      cleared = true;
    }
  }
  if (!cleared) return;
  const auto lines = SharedLinesLocked();
  lock.unlock();
  WriteShared(lines);
}

void HedgeState::ShareSuspects(std::string path) {
  shared_path_ = std::move(path);
  if (shared_path_.empty()) return;
  // "osd <id> <until, unix ms>" per line.
  std::ifstream in(shared_path_);
  std::string line;
  const int64_t now_ms = WallMs();
  std::map<int, int64_t> fresh;  // osd -> ms left
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string word;
    int osd = -1;
    int64_t until = 0;
    if (fields >> word >> osd >> until && word == "osd" && osd >= 0 && until > now_ms) {
      fresh[osd] = std::min<int64_t>(until - now_ms, kSharedSuspectMs);
    }
  }
  if (fresh.empty()) return;
  // Suspects are avoided through the acting sets: fetch them now.
  std::optional<Result<ActingSets>> fetched;
  if (fetch_acting_) fetched.emplace(fetch_acting_());
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  if (fetched && fetched->ok()) {
    acting_ = std::move(fetched->value());
    acting_at_ = now;
  } else if (fetched && fetched->status().code() == StatusCode::kNotSupported) {
    acting_unavailable_ = true;
  }
  for (const auto& [osd, left] : fresh) {
    suspect_until_[osd] = now + std::chrono::milliseconds(left);
    shared_until_ms_[osd] = now_ms + left;
  }
}

bool HedgeState::AddSuspectLocked(int osd, Clock::time_point now, int64_t now_ms) {
  auto at = suspect_until_.find(osd);
  if (at != suspect_until_.end() && at->second > now) return false;
  suspect_until_[osd] = now + std::chrono::milliseconds(options_.avoid_ms);
  shared_until_ms_[osd] = now_ms + kSharedSuspectMs;
  return true;
}

void HedgeState::SuspectProbed(const std::vector<int>& late, ActingSets acting) {
  std::unique_lock<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  if (!acting.empty()) {
    acting_ = std::move(acting);
    acting_at_ = now;
  }
  const int64_t now_ms = WallMs();
  bool share = false;
  for (int osd : late) share = AddSuspectLocked(osd, now, now_ms) || share;  // unless held (the shared file)
  if (!share) return;
  const auto lines = SharedLinesLocked();
  lock.unlock();
  WriteShared(lines);
}

HedgeState::SharedLines HedgeState::SharedLinesLocked() {
  SharedLines out;
  out.seq = ++shared_seq_;
  auto& lines = out.lines;
  const int64_t now_ms = WallMs();
  for (int osd : SuspectsLocked()) {
    auto at = shared_until_ms_.find(osd);
    const int64_t until = at != shared_until_ms_.end() ? at->second : now_ms + kSharedSuspectMs;
    if (until > now_ms) lines.emplace_back(osd, until);
  }
  return out;
}

void HedgeState::WriteShared(const SharedLines& suspects) {
  if (shared_path_.empty()) return;
  // Snapshots are taken under mu_ and written outside it: two threads may
  // write at once, and the older snapshot must not land last.
  std::lock_guard<std::mutex> writing(shared_write_mu_);
  if (suspects.seq <= shared_written_seq_) return;
  shared_written_seq_ = suspects.seq;
  std::string text;
  for (const auto& [osd, until] : suspects.lines) text += "osd " + std::to_string(osd) + " " + std::to_string(until) + "\n";
  // Whole or not at all: a temporary beside it, renamed over it.
  // (A name of its own per call: another process may write at the same time.)
  static std::atomic<uint64_t> calls{0};
  const std::string tmp = shared_path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++calls);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), shared_path_.c_str()) != 0) ::unlink(tmp.c_str());
}

bool HedgeState::IsSlow(uint32_t pg) const {
  std::lock_guard<std::mutex> lock(mu_);
  return IsSlowLocked(pg, Clock::now());
}

bool HedgeState::IsSlowLocked(uint32_t pg, Clock::time_point now) const {
  // (An expired entry stays in slow_until_ until MarkSlow renews it: at
  // most one per placement group.)
  auto it = slow_until_.find(pg);
  if (it != slow_until_.end() && it->second > now) return true;
  auto set = acting_.find(pg);
  if (set == acting_.end()) return false;
  for (int osd : set->second) {
    auto s = suspect_until_.find(osd);
    if (s != suspect_until_.end() && s->second > now) return true;
  }
  return false;
}

bool HedgeState::PrimarySlow(uint32_t pg) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto set = acting_.find(pg);
  if (set == acting_.end() || set->second.empty()) return false;
  auto s = suspect_until_.find(set->second.front());
  return s != suspect_until_.end() && s->second > Clock::now();
}

bool HedgeState::Slow(const std::string& name) const {
  const std::optional<uint32_t> placement = PlacementOfName(name);
  if (!placement) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return IsSlowLocked(*placement, Clock::now());
}

std::vector<int> HedgeState::SuspectOsds() {
  std::lock_guard<std::mutex> lock(mu_);
  return SuspectsLocked();
}

std::vector<int> HedgeState::SuspectsLocked() const {
  std::vector<int> out;
  for (const auto& [osd, until] : suspect_until_) {
    if (until > Clock::now()) out.push_back(osd);
  }
  return out;
}

bool HedgeState::Reserve(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  // The budget is a fraction of the bytes written, plus the same fraction
  // of kBudgetCredit: the first late objects of a run come before many
  // bytes were written, and are the ones that teach where the slow OSD is.
  const double allowed = options_.extra * static_cast<double>(stats_.bytes_submitted + kBudgetCredit);
  if (static_cast<double>(stats_.extra_bytes + bytes) > allowed) return false;
  stats_.extra_bytes += bytes;
  return true;
}

void HedgeState::Count(HedgeEvent event, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  switch (event) {
    case HedgeEvent::kSubmitted: stats_.bytes_submitted += bytes; break;
    case HedgeEvent::kHedged: ++stats_.objects_hedged; break;
    case HedgeEvent::kWon: ++stats_.hedges_won; break;
    case HedgeEvent::kRefused: ++stats_.hedges_refused; break;
    case HedgeEvent::kAvoided: ++stats_.slow_avoided; break;
    case HedgeEvent::kWriteStarted:
      if (writes_in_flight_++ == 0) writing_since_ = Clock::now();
      break;
    case HedgeEvent::kWriteEnded:
      if (writes_in_flight_ > 0 && --writes_in_flight_ == 0) writing_ += Clock::now() - writing_since_;
      break;
  }
}

HedgeStats HedgeState::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  HedgeStats s = stats_;
  s.budget = options_.extra;
  s.suspect_devices = SuspectsLocked();
  s.deadline_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(DeadlineLocked()).count());
  Clock::duration writing = writing_;
  if (writes_in_flight_ > 0) writing += Clock::now() - writing_since_;
  s.write_seconds = std::chrono::duration<double>(writing).count();
  return s;
}

void HedgeState::OpStarted() {
  std::lock_guard<std::mutex> lock(mu_);
  ++ops_in_flight_;
}

void HedgeState::OpEnded() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--ops_in_flight_ == 0) idle_cv_.notify_all();
}

bool HedgeState::WaitIdle(Clock::duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return ops_in_flight_ == 0; });
}

Result<bool> ParseHedgeUriOption(const std::string& uri, const std::string& key, const std::string& val,
                                 HedgeUriOptions* out) {
  if (key == "hedge") {
    if (val != "on" && val != "off") {
      return Status::InvalidArgument("store URI '" + uri + "': option hedge='" + val + "' (expected on or off)");
    }
    out->hedge = val == "on";
  } else if (key == "hedge_extra") {
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(val.c_str(), &end);
    if (val.empty() || *end != '\0' || errno != 0 || !(v >= 0 && v <= 4)) {
      return Status::InvalidArgument("store URI '" + uri + "': option hedge_extra='" + val +
                                     "' (expected a fraction of the bytes written, 0..4, e.g. 0.25)");
    }
    out->extra = v;
  } else if (key == "hedge_floor_ms") {
    ASSIGN_OR_RETURN(out->floor_ms, ParseUnsignedOption(uri, key, val, 1, 600'000));
  } else {
    return false;
  }
  return true;
}

std::string NameBeside(const std::string& name, const std::string& tag) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.rfind('.');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash) && dot > 0) {
    return name.substr(0, dot) + tag + name.substr(dot);
  }
  return name + tag;
}

}  // namespace sluice
