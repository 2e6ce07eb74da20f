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

#include "backends/rados/rados_object.h"
#include "backends/rados/rados_options.h"
#include "backends/rados/rados_placement.h"

namespace sluice {
namespace {

constexpr uint64_t kMaxSmallObjectBytes = 256ull << 20;  // records are far smaller
// Objects whose listing entries are stat'ed at once by List().
constexpr size_t kListStatsInFlight = 64;
// Hash-range slices of a pool listed in parallel by List().
constexpr size_t kListSlices = 16;

int64_t UnixMs(const struct timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
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
  state->OpEnded();
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
    object_prefix_ = opts_.prefix.empty() ? "" : opts_.prefix + "/";
    if (opts_.hedge) {
      HedgeOptions h;
      h.extra = opts_.hedge_extra;
      h.floor_ms = opts_.hedge_floor_ms;
      hedge_ = RadosPlacement::Open(cluster_, opts_.pool, object_prefix_, h);
      caps_.placement = hedge_.get();
      char extra[32];
      std::snprintf(extra, sizeof(extra), "%.0f%%", opts_.hedge_extra * 100);
      caps_.io_path += ", hedged writes (late past " + std::to_string(static_cast<int>(h.factor)) +
                       "x median, floor " + std::to_string(h.floor_ms) + " ms, at most +" + extra + " bytes)";
      // The placement's own operations (probes, raced record reads) finish
      // before the handle closes, each bounded by the op timeout.
      cluster_->before_shutdown = [state = hedge_, timeout = opts_.op_timeout_s] {
        (void)state->WaitIdle(std::chrono::seconds(timeout == 0 ? 60 : timeout));
      };
      if (opts_.hedge_probe) hedge_->Probe();
    }
  }

  const BackendCaps& caps() const override { return caps_; }
  const std::string& uri() const override { return uri_; }

  Result<std::unique_ptr<WritableObject>> Create(const std::string& name, const CreateOptions& options) override {
    RETURN_IF_ERROR(CheckName(name));
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
      hedge_->OpStarted();
      SmallReadTry* raw = t.release();
      // Not under race->mu: a send may wait for the client's in-flight
      // budget, which completions (taking race->mu) give back.
      const int ret = cluster_->io.aio_operate(oid, raw->completion, &raw->read->op, flags, nullptr);
      if (ret < 0) {
        raw->completion->release();
        delete raw;
        hedge_->OpEnded();
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
  std::shared_ptr<RadosPlacement> hedge_;  // null with hedge=off
  std::string object_prefix_;
  BackendCaps caps_;
};

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
