#include "backends/rados/rados_placement.h"

#include <rados/librados.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

namespace sluice {
namespace {

// Candidate names tried when looking for a placement group not found slow.
constexpr unsigned kPlacementTries = 32;

// Where this user's processes share the OSDs they found slow in a pool
// (HedgeState::ShareSuspects): $XDG_CACHE_HOME/sluice, else
// ~/.cache/sluice, else /tmp/sluice-<uid>; empty when none can be made.
std::string SharedSuspectsPath(Cluster& cluster, const std::string& pool) {
  std::string fsid;
  if (cluster.rados.cluster_fsid(&fsid) < 0 || fsid.empty()) return "";
  std::string dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    dir = std::string(xdg) + "/sluice";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
    dir = std::string(home) + "/.cache/sluice";
  } else {
    dir = "/tmp/sluice-" + std::to_string(::getuid());
  }
  // mkdir -p, private to the user.
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string part = dir.substr(0, slash);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return "";
    if (slash == std::string::npos) break;
  }
  std::string safe_pool;
  for (char c : pool) safe_pool += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_';
  return dir + "/slow-osds-" + fsid + "-" + safe_pool;
}

// Every PG of the pool with its acting OSDs, from the mgr's PG map (one
// round trip; the client needs mgr 'allow r', which sluice's recipe gives).
Result<HedgeState::ActingSets> FetchActingSets(Cluster& cluster) {
  librados::bufferlist in, out;
  std::string outs;
  int ret = cluster.rados.mgr_command(R"({"prefix": "pg dump", "dumpcontents": ["pgs_brief"], "format": "json"})",
                                      in, &out, &outs);
  if (ret == -EACCES || ret == -EPERM) {
    return Status::NotSupported("read the PG map: the client may not (it needs mgr 'allow r')");
  }
  if (ret < 0) {
    return Status::Unavailable(RadosError(ret, "read the PG map" + (outs.empty() ? "" : " (" + outs + ")")).message());
  }
  const std::string text = out.to_str();
  const std::string pool = std::to_string(cluster.io.get_id()) + ".";
  HedgeState::ActingSets sets;
  // {"pg_stats":[{"pgid":"2.3f",...,"acting":[3,0,1],...},...]}: read
  // field by field, not with a JSON library the core does not link.
  size_t pos = 0;
  while ((pos = text.find("\"pgid\":\"", pos)) != std::string::npos) {
    pos += 8;  // past "pgid":"
    const size_t end = text.find('"', pos);
    if (end == std::string::npos) break;
    const std::string pgid = text.substr(pos, end - pos);
    const size_t acting = text.find("\"acting\":[", end);
    const size_t next = text.find("\"pgid\":\"", end);
    if (acting == std::string::npos || (next != std::string::npos && acting > next)) continue;
    if (pgid.rfind(pool, 0) != 0) continue;
    char* stop = nullptr;
    const unsigned long seed = std::strtoul(pgid.c_str() + pool.size(), &stop, 16);
    if (stop == nullptr || *stop != '\0') continue;
    std::vector<int> osds;
    size_t p = acting + 10;
    while (p < text.size() && text[p] != ']') {
      char* after = nullptr;
      long v = std::strtol(text.c_str() + p, &after, 10);
      if (after == text.c_str() + p) break;
      osds.push_back(static_cast<int>(v));
      p = static_cast<size_t>(after - text.c_str());
      if (p < text.size() && text[p] == ',') ++p;
    }
    sets[static_cast<uint32_t>(seed)] = std::move(osds);
  }
  if (sets.empty()) return Status::Unavailable("the PG map names no placement group of the pool");
  return sets;
}

// One probe of ProbeOsds: a stat of a name that falls in a placement group
// of the OSD probed (no such object: the primary answers at once when it is
// not behind). Shared by the completion callback and ProbeOsds, which
// cancels a probe still unanswered once it has judged; the completion is
// released with the last owner, so a cancel never meets a released one.
struct OsdProbes {
  std::mutex mu;
  std::condition_variable cv;
  size_t left = 0;  // GUARDED_BY(mu): probes not answered yet
};
struct OsdProbe {
  ~OsdProbe() {
    if (completion != nullptr) completion->release();
  }
  std::shared_ptr<OsdProbes> probes;
  std::shared_ptr<HedgeState> state;  // counts the operation until it completes
  librados::ObjectReadOperation op;
  uint64_t size = 0;
  time_t mtime = 0;
  librados::AioCompletion* completion = nullptr;
  bool answered = false;  // GUARDED_BY(probes->mu)
};
void OnOsdProbeComplete(librados::completion_t, void* arg) {
  std::unique_ptr<std::shared_ptr<OsdProbe>> owner(static_cast<std::shared_ptr<OsdProbe>*>(arg));
  std::shared_ptr<OsdProbe> p = std::move(*owner);
  std::shared_ptr<OsdProbes> probes = p->probes;
  std::shared_ptr<HedgeState> state = p->state;
  {
    std::lock_guard<std::mutex> lock(probes->mu);
    p->answered = true;
    --probes->left;
  }
  probes->cv.notify_all();
  p.reset();  // the completion goes with the last owner
  state->OpEnded();
}

// Whether the cluster has an active mgr (`mgr stat`, asked of the mons).
bool MgrAvailable(Cluster& cluster) {
  librados::bufferlist in, out;
  std::string outs;
  if (cluster.rados.mon_command(R"({"prefix": "mgr stat", "format": "json"})", in, &out, &outs) < 0) return false;
  const std::string text = out.to_str();
  return text.find("\"available\":true") != std::string::npos ||
         text.find("\"available\": true") != std::string::npos;
}

std::optional<uint32_t> PgOf(Cluster& cluster, const std::string& oid) {
  uint32_t pg = 0;
  if (cluster.io.get_object_pg_hash_position2(oid, &pg) < 0) return std::nullopt;
  return pg;
}

}  // namespace

std::string HedgeName(const std::string& name, unsigned k) {
  if (k == 0) return name;
  return NameBeside(name, "-h" + std::to_string(k));
}

RadosPlacement::RadosPlacement(std::weak_ptr<Cluster> cluster, std::string object_prefix, HedgeOptions options,
                               FetchActing fetch_acting)
    : HedgeState(options, std::move(fetch_acting)),
      cluster_(std::move(cluster)),
      object_prefix_(std::move(object_prefix)) {}

std::shared_ptr<RadosPlacement> RadosPlacement::Open(const std::shared_ptr<Cluster>& cluster, const std::string& pool,
                                                     const std::string& object_prefix, HedgeOptions options) {
  // Weak references: the cluster holds the placement (its before_shutdown
  // waits for the placement's operations), and a strong one back would
  // keep both alive for good.
  std::weak_ptr<Cluster> weak = cluster;
  auto placement = std::make_shared<RadosPlacement>(
      weak, object_prefix, options, [weak]() -> Result<HedgeState::ActingSets> {
        auto c = weak.lock();
        if (!c) return Status::Unavailable("the store is closed");
        return FetchActingSets(*c);
      });
  // A name's placement group is computed from the client's OSD map: no I/O.
  placement->SetPlacementOf([weak, object_prefix](const std::string& name) -> std::optional<uint32_t> {
    auto c = weak.lock();
    if (!c) return std::nullopt;
    return PgOf(*c, object_prefix + name);
  });
  placement->ShareSuspects(SharedSuspectsPath(*cluster, pool));
  return placement;
}

std::string RadosPlacement::Place(const std::string& name, const std::vector<std::string>& taken, bool* avoided) {
  *avoided = false;
  std::vector<uint32_t> taken_pgs;
  for (const auto& t : taken) {
    if (auto pg = PlacementOfName(t)) taken_pgs.push_back(*pg);
  }
  std::optional<std::string> first_free;  // the first candidate in a group of its own
  for (unsigned k = 0; k < kPlacementTries; ++k) {
    std::string candidate = HedgeName(name, k);
    if (std::find(taken.begin(), taken.end(), candidate) != taken.end()) continue;
    const std::optional<uint32_t> pg = PlacementOfName(candidate);
    if (!pg) return taken.empty() ? name : std::string();  // the store is closed
    if (std::find(taken_pgs.begin(), taken_pgs.end(), *pg) != taken_pgs.end()) continue;
    if (!first_free) first_free = candidate;
    if (IsSlow(*pg)) continue;
    *avoided = candidate != *first_free;
    return candidate;
  }
  return first_free.value_or(std::string());
}

// Which OSDs are slow now, before anything is placed. Without this a
// process that starts under a slow OSD learns it from its own late writes:
// its first save places records and data in the slow OSD's groups, hedges
// them, and waits on the records (20 s for a 512 MiB save on the test bed,
// against 2 s). Each OSD is asked, as primary, for up to kProbesPerOsd
// names in different placement groups (a stat of an object that does not
// exist: no write, nothing left behind), all at once; an OSD most of whose
// probes are unanswered after hedge_floor_ms is suspected
// (HedgeState::SuspectProbed), as long as some OSD answered every probe
// (when none did, the client or the network is slow, not one OSD) and the
// suspects are a minority of the OSDs probed. Probes still unanswered are
// then cancelled, so that closing the store does not wait for them. A
// healthy cluster answers in a few milliseconds; the probe costs the PG
// map (one mgr round trip, kept for the first late write) and those reads.
// Only with an active mgr (one mon round trip to ask): without one the PG
// map request would wait out the mon timeout. Best effort: any failure
// leaves hedging to learn from writes.
void RadosPlacement::Probe() {
  std::shared_ptr<Cluster> cluster = cluster_.lock();
  if (!cluster) return;
  std::shared_ptr<HedgeState> self = shared_from_this();
  constexpr size_t kProbesPerOsd = 5;
  if (!MgrAvailable(*cluster)) return;
  auto acting = FetchActingSets(*cluster);
  if (!acting.ok()) return;
  std::map<uint32_t, int> wanted;  // PG -> the OSD it probes
  std::map<int, size_t> pgs_of;    // OSD -> PGs it is primary of, so far
  for (const auto& [pg, set] : *acting) {
    // (An erasure-coded group's missing shard reads as CRUSH_ITEM_NONE.)
    if (set.empty() || set.front() < 0 || set.front() == 0x7fffffff || pgs_of[set.front()] >= kProbesPerOsd) continue;
    ++pgs_of[set.front()];
    wanted[pg] = set.front();
  }
  // A name in each wanted PG, found by hashing candidates (no I/O).
  std::map<uint32_t, std::string> name_of;
  for (uint32_t k = 0; name_of.size() < wanted.size() && k < 64 * 1024; ++k) {
    std::string oid = object_prefix_ + "sluice-probe." + std::to_string(k);
    uint32_t pg = 0;
    if (cluster->io.get_object_pg_hash_position2(oid, &pg) < 0) return;
    if (wanted.count(pg) && !name_of.count(pg)) name_of[pg] = std::move(oid);
  }
  auto probes = std::make_shared<OsdProbes>();
  std::vector<std::pair<int, std::shared_ptr<OsdProbe>>> sent;  // OSD, probe
  for (const auto& [pg, oid] : name_of) {
    auto p = std::make_shared<OsdProbe>();
    p->probes = probes;
    p->state = self;
    p->op.stat(&p->size, &p->mtime, nullptr);
    auto owner = std::make_unique<std::shared_ptr<OsdProbe>>(p);
    p->completion = librados::Rados::aio_create_completion(owner.get(), &OnOsdProbeComplete);
    {
      std::lock_guard<std::mutex> lock(probes->mu);
      ++probes->left;
    }
    OpStarted();
    if (cluster->io.aio_operate(oid, p->completion, &p->op, 0, nullptr) < 0) {
      OpEnded();
      std::lock_guard<std::mutex> lock(probes->mu);
      --probes->left;
      continue;  // not sent: no evidence either way (the completion goes with `p`)
    }
    (void)owner.release();  // the callback's now
    sent.emplace_back(wanted.at(pg), std::move(p));
  }
  std::map<int, std::pair<size_t, size_t>> tally;  // OSD -> (late, probes)
  {
    std::unique_lock<std::mutex> lock(probes->mu);
    probes->cv.wait_for(lock, std::chrono::milliseconds(options().floor_ms), [&] { return probes->left == 0; });
    for (const auto& [osd, p] : sent) {
      auto& [late, n] = tally[osd];
      ++n;
      if (!p->answered) ++late;
    }
  }
  // Not under the lock: a cancel may complete the probe on this thread.
  for (const auto& [osd, p] : sent) {
    bool answered;
    {
      std::lock_guard<std::mutex> lock(probes->mu);
      answered = p->answered;
    }
    if (!answered) (void)cluster->io.aio_cancel(p->completion);
  }
  std::vector<int> slow;
  bool some_answered_all = false;
  for (const auto& [osd, t] : tally) {
    if (t.first * 2 > t.second) slow.push_back(osd);
    if (t.first == 0) some_answered_all = true;
  }
  if (!some_answered_all || slow.size() * 2 >= tally.size()) slow.clear();
  SuspectProbed(slow, std::move(acting).value());
}

}  // namespace sluice
