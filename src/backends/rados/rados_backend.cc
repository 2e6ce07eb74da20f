#include "backends/rados/rados_backend.h"

#include <rados/librados.hpp>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backends/rados/rados_hedge.h"
#include "backends/rados/rados_object.h"
#include "backends/rados/rados_options.h"

namespace sluice {
namespace {

constexpr uint64_t kMaxSmallObjectBytes = 256ull << 20;  // records are far smaller
// Objects whose listing entries are stat'ed at once by List().
constexpr size_t kListStatsInFlight = 64;
// Hash-range slices of a pool listed in parallel by List().
constexpr size_t kListSlices = 16;
// How many OSDs are asked for their osd_max_object_size at open.
constexpr int kMaxOsdsAsked = 16;

int64_t UnixMs(const struct timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Every PG of the pool with its acting OSDs, from the mgr's PG map (one
// round trip; the client needs mgr 'allow r', which sluice's recipe gives).
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

// One read of a small object: stat and the first kFirstReadBytes in one
// round trip (ReadSmall reads the rest of a larger one after). Not the whole
// cap at once: librados counts a read's requested length against its
// in-flight byte budget (objecter_inflight_op_bytes, 100 MiB by default),
// and a read asking for 256 MiB would hold every other operation of the
// client, data writes included, until it completes.
constexpr uint64_t kFirstReadBytes = 1ull << 20;
struct SmallRead {
  SmallRead() {
    op.stat2(&size, &mtime, &stat_ret);
    op.read(0, kFirstReadBytes, &bl, &read_ret);
  }
  librados::ObjectReadOperation op;
  uint64_t size = 0;
  struct timespec mtime {};
  int stat_ret = 0;
  int read_ret = 0;
  librados::bufferlist bl;
  int ret = 0;
};

// Tries of one hedged small read (RadosBackend::HedgedSmallRead): the first
// to succeed (or to find no object) answers; the others finish on their own
// and are dropped.
struct SmallReadRace {
  std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<SmallRead> answer;  // GUARDED_BY(mu)
  int failed = 0;                     // GUARDED_BY(mu): tries that failed otherwise
  int last_error = 0;                 // GUARDED_BY(mu)
};
struct SmallReadTry {
  std::shared_ptr<SmallReadRace> race;
  std::shared_ptr<SmallRead> read;
  std::shared_ptr<HedgeState> state;  // counts the operation until it completes
  librados::AioCompletion* completion = nullptr;
};
void OnSmallReadComplete(librados::completion_t, void* arg) {
  std::unique_ptr<SmallReadTry> t(static_cast<SmallReadTry*>(arg));
  const int ret = t->completion->get_return_value();
  t->completion->release();
  t->read->ret = ret;
  {
    std::lock_guard<std::mutex> lock(t->race->mu);
    if (ret >= 0 || ret == -ENOENT) {
      if (!t->race->answer) t->race->answer = t->read;
    } else {
      ++t->race->failed;
      t->race->last_error = ret;
    }
  }
  t->race->cv.notify_all();
  // Last: once no operation is counted, the cluster handle may close.
  std::shared_ptr<HedgeState> state = std::move(t->state);
  t.reset();
  state->OpEnded(/*write=*/false);
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
  state->OpEnded(/*write=*/false);
}

class RadosBackend final : public Backend {
 public:
  RadosBackend(std::string uri, RadosOptions opts, std::shared_ptr<Cluster> cluster,
               uint64_t max_object_bytes)
      : uri_(std::move(uri)), opts_(std::move(opts)), cluster_(std::move(cluster)) {
    caps_.io_alignment = 1;
    caps_.max_object_bytes = max_object_bytes;
    caps_.atomic_publish_if_absent = true;
    caps_.transport_checksum = RadosTransportChecksumExtension();
    caps_.lent_read_buffers = RadosLentReadBuffersExtension();
    // Objects are spread over placement groups by name: a writer keeps as
    // many in flight as it has writes.
    caps_.objects_in_flight = opts_.queue_depth;
    caps_.io_path = "librados aio, pool " + opts_.pool + ", qd " + std::to_string(opts_.queue_depth) +
                    ", max object " + std::to_string(max_object_bytes >> 20) + " MiB";
    if (opts_.hedge) {
      HedgeOptions h;
      h.extra = opts_.hedge_extra;
      h.floor_ms = opts_.hedge_floor_ms;
      // A weak reference: the cluster holds the hedge state (before_shutdown
      // below), and a strong one back would keep both alive for good.
      hedge_ = std::make_shared<HedgeState>(h, [weak = std::weak_ptr<Cluster>(cluster_)]() -> Result<HedgeState::ActingSets> {
        auto cluster = weak.lock();
        if (!cluster) return Status::Unavailable("the store is closed");
        return FetchActingSets(*cluster);
      });
      caps_.hedged_writes = hedge_.get();
      // A name's placement group is computed from the client's OSD map: no I/O.
      hedge_->SetPlacementOf([weak = std::weak_ptr<Cluster>(cluster_),
                              prefix = opts_.prefix.empty() ? "" : opts_.prefix + "/"](
                                 const std::string& name) -> std::optional<uint32_t> {
        auto cluster = weak.lock();
        uint32_t pg = 0;
        if (!cluster || cluster->io.get_object_pg_hash_position2(prefix + name, &pg) < 0) return std::nullopt;
        return pg;
      });
      hedge_->ShareSuspects(SharedSuspectsPath(*cluster_, opts_.pool));
      char extra[32];
      std::snprintf(extra, sizeof(extra), "%.0f%%", opts_.hedge_extra * 100);
      caps_.io_path += ", hedged writes (late past " + std::to_string(static_cast<int>(h.factor)) +
                       "x median, floor " + std::to_string(h.floor_ms) + " ms, at most +" + extra + " bytes)";
      // Operations a hedge left behind finish before the handle closes,
      // each bounded by the op timeout.
      cluster_->before_shutdown = [state = hedge_, timeout = opts_.op_timeout_s] {
        (void)state->WaitIdle(std::chrono::seconds(timeout == 0 ? 60 : timeout));
      };
    }
    object_prefix_ = opts_.prefix.empty() ? "" : opts_.prefix + "/";
    if (hedge_ && opts_.hedge_probe) ProbeOsds();
  }

  const BackendCaps& caps() const override { return caps_; }
  const std::string& uri() const override { return uri_; }

  Result<std::unique_ptr<WritableObject>> Create(const std::string& name, const CreateOptions& options) override {
    RETURN_IF_ERROR(CheckName(name));
    if (options.relocatable && hedge_) {
      return NewHedgedRadosWritable(cluster_, hedge_, object_prefix_, name, opts_.queue_depth, options.size_hint);
    }
    librados::ObjectWriteOperation op;
    op.create(/*exclusive=*/true);
    // The same hint rados bench gives: BlueStore then sizes its blobs and
    // checksum blocks for large sequential writes, which cost the OSDs less
    // CPU (measured: ~5% more write throughput on the CPU-bound dev cluster).
    HintDataObject(&op, options.size_hint > 0 ? options.size_hint : caps_.max_object_bytes);
    int ret = cluster_->io.operate(Oid(name), &op);
    if (ret == -EEXIST) return Status::AlreadyExists("object " + name + " already exists");
    if (ret < 0) return RadosError(ret, "create object " + name);
    return NewRadosWritable(cluster_, Oid(name), name, opts_.queue_depth);
  }

  Result<std::unique_ptr<ReadableObject>> Open(const std::string& name, const OpenOptions& options) override {
    RETURN_IF_ERROR(CheckName(name));
    if (options.known_size) return NewRadosReadable(cluster_, Oid(name), name, opts_.queue_depth, *options.known_size);
    uint64_t size = 0;
    struct timespec mtime {};
    int ret = cluster_->io.stat2(Oid(name), &size, &mtime);
    if (ret < 0) return RadosError(ret, "open object " + name);
    return NewRadosReadable(cluster_, Oid(name), name, opts_.queue_depth, size);
  }

  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    RETURN_IF_ERROR(CheckName(name));
    // One operation, applied atomically by the primary: it fails as a whole
    // with EEXIST if the object exists, and no reader can see the object
    // created but not yet written.
    librados::ObjectWriteOperation op;
    op.create(/*exclusive=*/true);
    librados::bufferlist bl;
    bl.append(bytes.data(), static_cast<unsigned>(bytes.size()));
    op.write_full(bl);
    const auto start = HedgeState::Clock::now();
    int ret = cluster_->io.operate(Oid(name), &op);
    if (ret == -EEXIST) return Status::AlreadyExists("object " + name + " already exists");
    if (ret < 0) return RadosError(ret, "publish " + name);
    NoteRecordWrite(Oid(name), start);
    return Status::OK();
  }

  Result<std::string> ReadSmall(const std::string& name) override {
    RETURN_IF_ERROR(CheckName(name));
    std::shared_ptr<SmallRead> read;
    if (hedge_) {
      ASSIGN_OR_RETURN(read, HedgedSmallRead(Oid(name)));
    } else {
      read = std::make_shared<SmallRead>();
      read->ret = cluster_->io.operate(Oid(name), &read->op, nullptr);
    }
    if (read->ret < 0) return RadosError(read->ret, "read object " + name);
    if (read->stat_ret < 0) return RadosError(read->stat_ret, "stat object " + name);
    if (read->read_ret < 0) return RadosError(read->read_ret, "read object " + name);
    if (read->size > kMaxSmallObjectBytes) {
      return Status::Corruption("object " + name + " is " + std::to_string(read->size) +
                                " bytes, more than any record can be");
    }
    // The rest of a record larger than the first read (a big manifest).
    // Records are never rewritten in place (published whole, or removed and
    // published again), so the two reads see one object unless it was
    // replaced in between, which the size then shows.
    while (read->bl.length() < read->size) {
      librados::bufferlist more;
      const uint64_t at = read->bl.length();
      int ret = cluster_->io.read(Oid(name), more, std::min<uint64_t>(read->size - at, 64ull << 20), at);
      if (ret < 0) return RadosError(ret, "read object " + name);
      if (ret == 0) break;
      read->bl.claim_append(more);
    }
    if (read->bl.length() != read->size) {
      return Status::Unavailable("object " + name + " changed while it was read (" +
                                 std::to_string(read->bl.length()) + " bytes read, " +
                                 std::to_string(read->size) + " when it was opened)");
    }
    std::string out(read->bl.length(), '\0');
    if (!out.empty()) read->bl.begin().copy(read->bl.length(), out.data());
    return out;
  }

  // RADOS has no index by name: this walks every object of the pool (all
  // PGs) and keeps those under the prefix, then stats each match (64 at a
  // time) for its size and mtime. Its cost grows with the whole pool, not
  // the prefix; ls and gc are rare, and an index object would cost every
  // data object a second write and a place where two writers contend.
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    if (!prefix.empty() && prefix.back() != '/') {
      return Status::InvalidArgument("list prefix '" + prefix + "' must end in '/'");
    }
    const std::string want = object_prefix_ + prefix;
    librados::IoCtx& io = cluster_->io;
    // RADOS lists a pool one placement group at a time, a round trip each
    // (64 PGs: ~200 ms under write load, and a commit lists three times).
    // Slices of the hash space are listed in parallel instead.
    const librados::ObjectCursor begin = io.object_list_begin();
    const librados::ObjectCursor end = io.object_list_end();
    std::vector<std::vector<std::string>> found(kListSlices);
    std::vector<int> errors(kListSlices, 0);
    std::vector<std::thread> threads;
    threads.reserve(kListSlices);
    for (size_t i = 0; i < kListSlices; ++i) {
      threads.emplace_back([&, i] {
        librados::ObjectCursor slice_begin, slice_end;
        io.object_list_slice(begin, end, i, kListSlices, &slice_begin, &slice_end);
        // ObjectCursor's copy assignment leaks the cursor it replaces
        // (librados 16); re-constructing it in place does not.
        std::optional<librados::ObjectCursor> cursor(slice_begin);
        while (*cursor < slice_end && !io.object_list_is_end(*cursor)) {
          std::vector<librados::ObjectItem> batch;
          librados::ObjectCursor next;
          int ret = io.object_list(*cursor, slice_end, 1024, {}, &batch, &next);
          if (ret < 0) {
            errors[i] = ret;
            return;
          }
          for (const auto& item : batch) {
            if (item.oid.compare(0, want.size(), want) == 0) found[i].push_back(item.oid);
          }
          if (batch.empty() && next == *cursor) break;  // no progress: the slice is done
          cursor.emplace(next);
        }
      });
    }
    for (auto& t : threads) t.join();
    std::vector<std::string> names;
    for (size_t i = 0; i < kListSlices; ++i) {
      if (errors[i] < 0) return RadosError(errors[i], "list pool " + opts_.pool);
      names.insert(names.end(), found[i].begin(), found[i].end());
    }
    return StatAll(names);
  }

  Result<std::vector<ObjectInfo>> Stat(const std::vector<std::string>& names) override {
    std::vector<std::string> oids;
    oids.reserve(names.size());
    for (const auto& name : names) {
      RETURN_IF_ERROR(CheckName(name));
      oids.push_back(Oid(name));
    }
    return StatAll(oids);
  }

  Status Replace(const std::string& staged, const std::string& target) override {
    RETURN_IF_ERROR(CheckName(staged));
    RETURN_IF_ERROR(CheckName(target));
    // RADOS has no rename. copy_from is one operation on the target's
    // primary: it applies whole or not at all (the OSD copies into a
    // temporary object and swaps it in), so a reader sees the old or the new
    // bytes. Then the staged object goes; if that fails, it is garbage gc
    // removes.
    librados::ObjectWriteOperation op;
    op.copy_from(Oid(staged), cluster_->io, /*src_version=*/0, /*src_fadvise_flags=*/0);
    int ret = cluster_->io.operate(Oid(target), &op);
    if (ret < 0) return RadosError(ret, "replace object " + target + " with " + staged);
    ret = cluster_->io.remove(Oid(staged));
    if (ret < 0 && ret != -ENOENT) return RadosError(ret, "remove staged object " + staged);
    return Status::OK();
  }

  Status Remove(const std::string& name) override {
    RETURN_IF_ERROR(CheckName(name));
    // Acknowledged only once every replica has committed it: durable.
    const auto start = HedgeState::Clock::now();
    int ret = cluster_->io.remove(Oid(name));
    if (ret < 0) return RadosError(ret, "remove object " + name);
    NoteRecordWrite(Oid(name), start);
    return Status::OK();
  }

  // A publish is one exclusive create with its bytes: it leaves nothing
  // beside the object, and a pool has no directories.
  Status ReclaimLeftovers(const std::string&, uint64_t) override { return Status::OK(); }

 private:
  // The file store's rule, so that a name valid on one store is valid on
  // every store: no empty, "." or ".." components, no NUL.
  static Status CheckName(const std::string& name) {
    bool bad = name.empty() || name.front() == '/' || name.back() == '/' ||
               name.find('\0') != std::string::npos;
    size_t start = 0;
    while (!bad && start <= name.size()) {
      size_t slash = name.find('/', start);
      std::string_view comp(name.data() + start,
                            (slash == std::string::npos ? name.size() : slash) - start);
      bad = comp.empty() || comp == "." || comp == "..";
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    if (bad) return Status::InvalidArgument("invalid object name '" + name + "'");
    return Status::OK();
  }
  std::string Oid(const std::string& name) const { return object_prefix_ + name; }

  // A record written (or removed) one at a time, late, tells of a slow OSD
  // as a late data write does (HedgeState::MarkSlow): in particular it keeps
  // a suspect that data writes now avoid from expiring while it is slow.
  void NoteRecordWrite(const std::string& oid, HedgeState::Clock::time_point start) {
    if (!hedge_ || HedgeState::Clock::now() - start <= hedge_->SlowAfter()) return;
    uint32_t pg = 0;
    if (cluster_->io.get_object_pg_hash_position2(oid, &pg) >= 0) hedge_->MarkSlow(pg);
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
  void ProbeOsds() {
    constexpr size_t kProbesPerOsd = 5;
    if (!MgrAvailable()) return;
    auto acting = FetchActingSets(*cluster_);
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
      if (cluster_->io.get_object_pg_hash_position2(oid, &pg) < 0) return;
      if (wanted.count(pg) && !name_of.count(pg)) name_of[pg] = std::move(oid);
    }
    auto probes = std::make_shared<OsdProbes>();
    std::vector<std::pair<int, std::shared_ptr<OsdProbe>>> sent;  // OSD, probe
    for (const auto& [pg, oid] : name_of) {
      auto p = std::make_shared<OsdProbe>();
      p->probes = probes;
      p->state = hedge_;
      p->op.stat(&p->size, &p->mtime, nullptr);
      auto owner = std::make_unique<std::shared_ptr<OsdProbe>>(p);
      p->completion = librados::Rados::aio_create_completion(owner.get(), &OnOsdProbeComplete);
      {
        std::lock_guard<std::mutex> lock(probes->mu);
        ++probes->left;
      }
      hedge_->OpStarted(/*write=*/false);
      if (cluster_->io.aio_operate(oid, p->completion, &p->op, 0, nullptr) < 0) {
        hedge_->OpEnded(/*write=*/false);
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
      probes->cv.wait_for(lock, std::chrono::milliseconds(opts_.hedge_floor_ms), [&] { return probes->left == 0; });
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
      if (!answered) (void)cluster_->io.aio_cancel(p->completion);
    }
    std::vector<int> slow;
    bool some_answered_all = false;
    for (const auto& [osd, t] : tally) {
      if (t.first * 2 > t.second) slow.push_back(osd);
      if (t.first == 0) some_answered_all = true;
    }
    if (!some_answered_all || slow.size() * 2 >= tally.size()) slow.clear();
    hedge_->SuspectProbed(slow, std::move(acting).value());
  }

  // Whether the cluster has an active mgr (`mgr stat`, asked of the mons).
  bool MgrAvailable() {
    librados::bufferlist in, out;
    std::string outs;
    if (cluster_->rados.mon_command(R"({"prefix": "mgr stat", "format": "json"})", in, &out, &outs) < 0) return false;
    const std::string text = out.to_str();
    return text.find("\"available\":true") != std::string::npos ||
           text.find("\"available\": true") != std::string::npos;
  }

  // A small read (a record: commit, manifest, lock) raced against a slow
  // OSD. Records are read one at a time, each waited for, so one read queued
  // behind a slow primary costs the whole operation its wait (seconds under
  // a slow OSD's backlog). Where the object's primary is suspected slow
  // (hedge_state.h), the first try already lets any replica answer; a try
  // not answered within the hedge floor is followed by one that lets any
  // replica answer (random: most likely not the slow one), up to three; a
  // try that fails is followed by the next at once. The first success, or
  // the first to find no object, answers; the error is returned only when
  // every try failed.
  // Replica reads are safe on a replicated pool: a write is acknowledged
  // once every replica holds it, and a replica that cannot be sure it holds
  // the newest version of the object (a write to it not yet known complete
  // everywhere) answers EAGAIN, and the client asks the primary. So a
  // record written shortly before is still read from its primary. (On an
  // erasure-coded pool librados ignores the flag.)
  Result<std::shared_ptr<SmallRead>> HedgedSmallRead(const std::string& oid) {
    constexpr int kTries = 3;
    auto race = std::make_shared<SmallReadRace>();
    uint32_t pg = 0;
    const bool primary_slow = cluster_->io.get_object_pg_hash_position2(oid, &pg) >= 0 && hedge_->PrimarySlow(pg);
    const auto patience = std::chrono::milliseconds(hedge_->options().floor_ms);
    int sent = 0;
    for (int k = 0; k < kTries; ++k) {
      auto t = std::make_unique<SmallReadTry>();
      t->race = race;
      t->read = std::make_shared<SmallRead>();
      t->state = hedge_;
      t->completion = librados::Rados::aio_create_completion(t.get(), &OnSmallReadComplete);
      const int flags = k > 0 || primary_slow ? librados::OPERATION_BALANCE_READS : 0;
      hedge_->OpStarted(/*write=*/false);
      SmallReadTry* raw = t.release();
      // Not under race->mu: a send may wait for the client's in-flight
      // budget, which completions (taking race->mu) give back.
      const int ret = cluster_->io.aio_operate(oid, raw->completion, &raw->read->op, flags, nullptr);
      if (ret < 0) {
        raw->completion->release();
        delete raw;
        hedge_->OpEnded(/*write=*/false);
        if (sent == 0) return RadosError(ret, "read object " + oid.substr(object_prefix_.size()));
        break;  // the tries already sent still answer
      }
      ++sent;
      std::unique_lock<std::mutex> lock(race->mu);
      if (k + 1 == kTries) break;
      if (race->cv.wait_for(lock, patience, [&] { return race->answer != nullptr || race->failed == sent; }) &&
          race->answer != nullptr) {
        return race->answer;
      }
    }
    std::unique_lock<std::mutex> lock(race->mu);
    race->cv.wait(lock, [&] { return race->answer != nullptr || race->failed == sent; });
    if (race->answer != nullptr) return race->answer;
    auto failed = std::make_shared<SmallRead>();
    failed->ret = race->last_error;
    return failed;
  }

  Result<std::vector<ObjectInfo>> StatAll(const std::vector<std::string>& oids) {
    struct Stat {
      librados::AioCompletion* completion = nullptr;
      librados::ObjectReadOperation op;
      uint64_t size = 0;
      struct timespec mtime {};
      int ret = 0;
    };
    std::vector<ObjectInfo> out;
    std::vector<Stat> stats(std::min(oids.size(), kListStatsInFlight));
    Status failed;
    for (size_t base = 0; base < oids.size(); base += stats.size()) {
      size_t n = std::min(stats.size(), oids.size() - base);
      size_t started = 0;
      for (; started < n; ++started) {
        Stat& s = stats[started];
        s.completion = librados::Rados::aio_create_completion();
        // (IoCtx::aio_stat2 is declared but not exported by librados 16.)
        s.op = librados::ObjectReadOperation();
        s.op.stat2(&s.size, &s.mtime, &s.ret);
        // Any replica may answer: the objects asked about are written and
        // acknowledged (so on every replica), and a slow primary then
        // holds up a third of the questions instead of all of them.
        int ret = cluster_->io.aio_operate(oids[base + started], s.completion, &s.op,
                                           librados::OPERATION_BALANCE_READS, nullptr);
        if (ret < 0) {
          s.completion->release();
          failed = RadosError(ret, "stat object " + oids[base + started]);
          break;
        }
      }
      for (size_t i = 0; i < started; ++i) {
        Stat& s = stats[i];
        s.completion->wait_for_complete();
        int ret = s.completion->get_return_value();
        s.completion->release();
        if (ret == -ENOENT) continue;  // removed while listing
        if (ret < 0) {
          if (failed.ok()) failed = RadosError(ret, "stat object " + oids[base + i]);
          continue;
        }
        out.push_back(ObjectInfo{oids[base + i].substr(object_prefix_.size()), s.size, UnixMs(s.mtime)});
      }
      RETURN_IF_ERROR(failed);
    }
    return out;
  }

  std::string uri_;
  RadosOptions opts_;
  std::shared_ptr<Cluster> cluster_;
  std::shared_ptr<HedgeState> hedge_;  // null with hedge=off
  std::string object_prefix_;
  BackendCaps caps_;
};

// The first unsigned integer in a command's output ("134217728\n",
// "[0,1,2]"), from `pos`; advances `pos` past it.
bool NextNumber(const std::string& s, size_t* pos, uint64_t* out) {
  size_t i = s.find_first_of("0123456789", *pos);
  if (i == std::string::npos) return false;
  uint64_t v = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) v = v * 10 + static_cast<uint64_t>(s[i] - '0');
  *pos = i;
  *out = v;
  return true;
}

// osd_max_object_size as the OSDs run it. The value an OSD runs with can
// come from its local ceph.conf, which the monitors' config database does
// not see, so ask the mgr for the running value of (up to kMaxOsdsAsked)
// OSDs and take the smallest: any of them may be a primary. Where no OSD
// answers (no mgr, or a key without mgr caps), the monitors' value for
// "osd" is the best there is.
Result<uint64_t> ReadMaxObjectBytes(librados::Rados& rados, const std::string& what) {
  librados::bufferlist in, out;
  std::string errs;
  int ret = rados.mon_command(R"({"prefix": "osd ls", "format": "json"})", in, &out, &errs);
  if (ret < 0) return RadosError(ret, what + ": list OSDs" + (errs.empty() ? "" : " (" + errs + ")"));
  std::string ids = out.to_str();
  uint64_t smallest = 0;
  int asked = 0;
  size_t pos = 0;
  uint64_t id = 0;
  while (asked < kMaxOsdsAsked && NextNumber(ids, &pos, &id)) {
    ++asked;
    librados::bufferlist reply;
    std::string outs;
    std::string cmd = R"({"prefix": "config show", "who": "osd.)" + std::to_string(id) +
                      R"(", "key": "osd_max_object_size"})";
    ret = rados.mgr_command(cmd, in, &reply, &outs);
    // No mgr, or no mgr caps: asking the other OSDs would only wait again.
    if (ret == -ETIMEDOUT || ret == -EACCES || ret == -EPERM) break;
    if (ret < 0) continue;  // a down OSD has no state
    size_t p = 0;
    uint64_t v = 0;
    if (NextNumber(reply.to_str(), &p, &v) && v > 0 && (smallest == 0 || v < smallest)) smallest = v;
  }
  if (smallest > 0) return smallest;
  librados::bufferlist reply;
  std::string outs;
  ret = rados.mon_command(R"({"prefix": "config get", "who": "osd", "key": "osd_max_object_size"})",
                          in, &reply, &outs);
  if (ret < 0) {
    return RadosError(ret, what + ": read osd_max_object_size from the cluster" +
                               (outs.empty() ? "" : " (" + outs + ")"));
  }
  pos = 0;
  if (!NextNumber(reply.to_str(), &pos, &smallest) || smallest == 0) {
    return Status::IOError(what + ": unreadable osd_max_object_size '" + reply.to_str() + "'");
  }
  return smallest;
}

std::string ConfGet(librados::Rados& rados, const char* option) {
  std::string v;
  if (rados.conf_get(option, v) < 0) return "?";
  return v;
}

}  // namespace

Result<std::unique_ptr<Backend>> OpenRadosBackend(const std::string& uri, const std::string& location,
                                                  const std::string& query, bool create_if_missing) {
  ASSIGN_OR_RETURN(RadosOptions opts, ParseUri(uri, location, query));
  const std::string what = "store " + uri;
  if (opts.conf.empty()) {
    if (const char* env = std::getenv("CEPH_CONF"); env != nullptr && *env != '\0') opts.conf = env;
  }
  if (!opts.conf.empty()) {
    struct stat st;
    if (::stat(opts.conf.c_str(), &st) != 0 || ::access(opts.conf.c_str(), R_OK) != 0) {
      return Status::FromErrno(errno, what + ": read Ceph config " + opts.conf);
    }
    if (!S_ISREG(st.st_mode)) return Status::IOError(what + ": Ceph config " + opts.conf + " is not a file");
  }
  if (!opts.keyring.empty() && ::access(opts.keyring.c_str(), R_OK) != 0) {
    return Status::FromErrno(errno, what + ": read keyring " + opts.keyring);
  }

  auto cluster = std::make_shared<Cluster>();
  librados::Rados& rados = cluster->rados;
  const std::string client = "client." + opts.id;
  int ret = rados.init(opts.id.c_str());
  if (ret < 0) return RadosError(ret, what + ": init librados as " + client);
  // With no conf given, librados searches $CEPH_CONF, /etc/ceph/ceph.conf,
  // ~/.ceph/config and ./ceph.conf.
  ret = rados.conf_read_file(opts.conf.empty() ? nullptr : opts.conf.c_str());
  if (ret < 0) {
    std::string conf = opts.conf.empty() ? "(none given: no conf=, no $CEPH_CONF, no /etc/ceph/ceph.conf)"
                                         : opts.conf;
    // A file that exists but does not parse is a bad file, not a bad URI.
    if (ret == -EINVAL) return Status::IOError(what + ": Ceph config " + conf + " does not parse");
    return RadosError(ret, what + ": read Ceph config " + conf);
  }
  struct Setting {
    const char* option;
    std::string value;
  };
  const std::string connect_s = std::to_string(opts.connect_timeout_s);
  std::vector<Setting> settings = {
      // sluice reports errors as Status, once, at the edge: librados must not
      // print its own lines on the user's terminal.
      {"log_to_stderr", "false"},
      {"err_to_stderr", "false"},
      // Finding and authenticating to a monitor, and waiting for the first
      // maps, are bounded: an unreachable monitor is an error, not a hang.
      {"client_mount_timeout", connect_s},
      {"rados_mon_op_timeout", connect_s},
      {"rados_osd_op_timeout", std::to_string(opts.op_timeout_s)},
  };
  if (!opts.keyring.empty()) settings.push_back({"keyring", opts.keyring});
  // A hedge's loser stays in flight at the slow OSD while the writer goes
  // on: room for those bytes beside a full queue (librados' default, 100
  // MiB, would stall new writes behind them).
  if (opts.hedge) settings.push_back({"objecter_inflight_op_bytes", std::to_string(512ull << 20)});
  for (const auto& s : settings) {
    ret = rados.conf_set(s.option, s.value.c_str());
    if (ret < 0) return RadosError(ret, what + ": set " + s.option + "=" + s.value);
  }
  // Without mon_host librados would fall back to a DNS SRV lookup, which
  // prints to stderr by itself; a conf that names no monitor is an error.
  if (std::string mons = ConfGet(rados, "mon_host"); mons.empty() || mons == "?") {
    return Status::IOError(what + ": Ceph config " + (opts.conf.empty() ? "(default)" : opts.conf) +
                           " names no monitor (mon_host)");
  }
  ret = rados.connect();
  if (ret < 0) {
    std::string mons = ConfGet(rados, "mon_host");
    if (ret == -ETIMEDOUT) {
      return Status::Unavailable(what + ": no answer from the Ceph monitors (" + mons + ") as " + client +
                                 " within " + connect_s + " s (connect_timeout_s)");
    }
    if (ret == -ENOENT) {
      // librados found no key for the client in any keyring it looked at.
      return Status::NotFound(what + ": no key for " + client + " in keyring " +
                              ConfGet(rados, "keyring") + " (give keyring=PATH or id=CLIENT)");
    }
    return RadosError(ret, what + ": connect to the Ceph monitors (" + mons + ") as " + client);
  }
  cluster->connected = true;
  ret = rados.ioctx_create(opts.pool.c_str(), cluster->io);
  if (ret == -ENOENT) return Status::NotFound(what + ": pool '" + opts.pool + "' does not exist");
  if (ret < 0) return RadosError(ret, what + ": open pool '" + opts.pool + "'");
  ASSIGN_OR_RETURN(uint64_t max_object_bytes, ReadMaxObjectBytes(rados, what));
  (void)create_if_missing;  // nothing to create: PREFIX is a name prefix, the pool is the admin's
  return std::unique_ptr<Backend>(
      new RadosBackend(uri, std::move(opts), std::move(cluster), max_object_bytes));
}

}  // namespace sluice
