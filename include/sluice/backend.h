// Backend: the one interface every storage driver implements: file://
// (one directory, or several drives), rados:// (Ceph RADOS) and s3:// (any
// S3 object store), chosen by URI scheme (OpenBackend).
//
// A backend stores named objects: byte strings addressed by a '/'-separated
// name such as "ckpt/llama/00000000000000000100/data/r0-9f3a.dat". It knows
// nothing about checkpoints. Data objects are written once, front to back,
// through asynchronous writes; small metadata objects (manifests, commit
// records) are published whole and atomically with PublishIfAbsent, which is
// the only commit primitive the layers above rely on.
//
// Thread-safety: a Backend may be shared by threads; each WritableObject and
// ReadableObject belongs to one thread at a time.
#ifndef SLUICE_BACKEND_H_
#define SLUICE_BACKEND_H_

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice {

class WritableObject;
class ReadableObject;

// Optional extensions. A backend that has one points to it from its caps
// (null otherwise); callers discover it there instead of every object
// carrying a virtual method that only one backend implements.

// For a backend whose transport checksums every write anyway (RADOS: the
// messenger's crc32c of each message; a peer or NVMe-oF transport with a
// data digest alike): writers checksum their chunks through it, so the
// bytes are hashed once, not twice.
class TransportChecksum {
 public:
  virtual ~TransportChecksum() = default;
  // Returns the CRC32C (Castagnoli, the chunk checksum of doc/format.md)
  // extended from `crc` over `len` bytes at `data`, which the caller is
  // about to write to `object` (one of this backend's; for any other
  // object, e.g. one a decorator wraps, it just computes the CRC). What
  // was checksummed since the object's last StartWrite is matched against
  // its next StartWrite only, so REQUIRES: the bytes stay unchanged until
  // that next write is reaped, if it covers them.
  virtual uint32_t ChecksumForWrite(WritableObject& object, uint32_t crc, const void* data,
                                    size_t len) const = 0;
};

// For a backend that receives read bytes into buffers of its own (RADOS:
// the messenger's): reads may complete with the bytes left there
// (IoCompletion::data, `lent`, and the transport's crc32c) instead of
// copied into the caller's buffer.
class LentReadBuffers {
 public:
  virtual ~LentReadBuffers() = default;
  // Lets later reads on `object` (one of this backend's; others are left
  // as they are) complete with lent buffers.
  virtual void Allow(ReadableObject& object) const = 0;
};

// For a backend that lists one level of its names cheaply, without walking
// what lies below them (a file store's directory entries; S3's listing with
// a delimiter): the catalog finds a name's steps through it in one short
// listing, where a backend without it (RADOS, whose only listing walks the
// whole pool) is walked.
class ChildListing {
 public:
  virtual ~ChildListing() = default;
  // The distinct next components of the names under `prefix` (which ends
  // in '/'): for "ckpt/llama/", "00000000000000000100" when
  // "ckpt/llama/00000000000000000100/COMMIT" exists. Each once, any order;
  // empty when nothing is there. The backend's own temporaries may be
  // among them (callers parse what they look for).
  virtual Result<std::vector<std::string>> ListChildren(const std::string& prefix) const = 0;
};

// For a backend whose names choose where bytes go (RADOS, by hashing:
// src/backends/rados/; a multi-directory file store: the directory a name's
// suffix says): the write queue (src/engine/write_queue.h) places each data
// object away from placements found slow, and hedges a late one by writing
// it again, whole, under another name it asks for here. The backend keeps
// what its queues share: recent write latencies and the deadline derived
// from them, the extra-byte budget, which placements are slow (and, on
// RADOS, which devices: its own business, never seen above it), and the
// figures. Thread-safe; no method does I/O, except that Observe may ask the
// cluster which devices a late placement spans.
struct HedgePolicy {
  bool enabled = true;                   // late writes are hedged (hedge=on|off)
  double extra = 0.25;                   // hedged bytes / bytes written, at most
  unsigned floor_ms = 100;               // no write is late sooner than this
  uint64_t max_held_bytes = 32ull << 20; // larger objects are not held, so not hedged
  unsigned max_copies = 3;               // the first copy and two hedges
};
// What hedging cost, since the backend was opened.
struct HedgeStats {
  uint64_t bytes_submitted = 0;  // bytes written to placed data objects
  uint64_t extra_bytes = 0;      // bytes hedges wrote on top of them
  uint64_t objects_hedged = 0;   // objects written again under another name
  uint64_t hedges_won = 0;       // objects whose hedge finished first
  uint64_t hedges_refused = 0;   // late objects not hedged: over budget, too large, or copies
  uint64_t slow_avoided = 0;     // new objects placed away from a slow placement
  double budget = 0;             // extra_bytes may reach this fraction of bytes_submitted
  uint64_t deadline_ms = 0;      // the current deadline after which a write is late
  std::vector<int> suspect_devices; // devices (the backend's own numbering) most late writes shared, avoided for now
  // Wall time during which writes of placed objects were in flight:
  // bytes_submitted / write_seconds is what the data writes achieved, apart
  // from the records a save writes one at a time.
  double write_seconds = 0;
};
enum class HedgeEvent { kSubmitted, kHedged, kWon, kRefused, kAvoided, kWriteStarted, kWriteEnded };
class Placement {
 public:
  virtual ~Placement() = default;
  virtual const HedgePolicy& policy() const = 0;
  // Whether a write to `name` would go where writes were late lately. A
  // caller free to choose a name (a writer id, which names its lock,
  // manifest and references records) picks one for which this is false.
  virtual bool Slow(const std::string& name) const = 0;
  // The name to store an object meant for `name` under: `name` itself or a
  // name beside it (the same directory, a suffix before the extension),
  // placed away from slow placements and from those of `taken` (the copies
  // written so far), and none of them. Empty where no such name is left.
  // `*avoided`: a slow placement was passed over for it.
  virtual std::string Place(const std::string& name, const std::vector<std::string>& taken,
                            bool* avoided) = 0;
  // How long a write may take before it is late: a multiple of the median
  // of recent write latencies, never under policy().floor_ms.
  virtual std::chrono::nanoseconds Deadline() const = 0;
  // A write to `name` took `latency` (or has taken it so far, and is
  // late): evidence of which placements are slow. `sample`: a write of an
  // object never hedged, which also tells what a healthy write takes (the
  // median the deadline is a multiple of).
  virtual void Observe(const std::string& name, std::chrono::nanoseconds latency, bool sample) = 0;
  // Takes `bytes` of the extra-byte budget if they fit.
  virtual bool Reserve(uint64_t bytes) = 0;
  virtual void Count(HedgeEvent event, uint64_t bytes) = 0;
  virtual HedgeStats Stats() const = 0;
};

// What a backend can do; callers adapt to it instead of checking types.
struct BackendCaps {
  // Buffers, offsets and lengths of asynchronous I/O must be multiples of
  // this (1 when anything goes). Callers always honour it.
  size_t io_alignment = 1;
  // Largest data object the backend accepts; writers roll over to a new
  // object before reaching it.
  uint64_t max_object_bytes = UINT64_MAX;
  // True when PublishIfAbsent is atomic and exclusive (exactly one of two
  // concurrent publishers of a name wins). Checkpoint commit requires it.
  bool atomic_publish_if_absent = false;
  // A short human-readable description of the I/O path in use, e.g.
  // "io_uring, O_DIRECT, qd 16" — shown by the CLI and benchmarks.
  std::string io_path;
  // Extensions (above); null where the backend has none.
  const TransportChecksum* transport_checksum = nullptr;
  const LentReadBuffers* lent_read_buffers = nullptr;
  Placement* placement = nullptr;
  const ChildListing* child_listing = nullptr;
  // How many objects a writer keeps writes in flight to at once (its
  // queue depth is spread over them). A file store's open object holds a
  // descriptor and an I/O ring, so a few; a RADOS object costs nothing open,
  // and objects placed apart are written in parallel.
  size_t objects_in_flight = 3;
  // A write's completion may wait for later writes and then come with
  // theirs, late (S3: a multipart part gathers several writes). A writer
  // throttled by a rate cap then must not block reaping while it waits for
  // tokens: it reaps only what has completed (the write queue does this).
  bool writes_complete_in_bunches = false;
};

// One completed asynchronous operation.
struct IoCompletion {
  uint64_t tag = 0;      // the caller's tag from StartWrite/StartRead
  size_t bytes = 0;      // bytes transferred (a read may stop short at end of object)
  Status status;         // per-operation outcome
  // Reads on an object lent buffers were allowed for (LentReadBuffers): when non-null, the
  // bytes are here, in a buffer of the backend's own (e.g. the one librados
  // received them in), instead of in the caller's buffer; valid while
  // `lent` is held.
  const uint8_t* data = nullptr;
  std::shared_ptr<const void> lent;
  // Reads, where the backend can tell it more cheaply than by reading the
  // bytes again: returns the CRC32C (io/crc32c.h: Crc32c) of all `bytes`
  // bytes read. RADOS: the messenger computed a crc over the bytes as they
  // arrived (to check them against the sender's) and librados remembers it,
  // so a chunk read whole is checked for free. Empty otherwise; where set,
  // callable only while `lent` is held.
  std::function<uint32_t()> crc32c;
};

// An object being written. Writes may complete in any order; the object's
// contents are defined only after Finish() returns OK.
class WritableObject {
 public:
  virtual ~WritableObject() = default;

  // Starts writing `len` bytes from `data` at `offset`. `data` must stay valid
  // and unchanged until the completion with `tag` is reaped. REQUIRES: fewer
  // than queue_depth() operations in flight; data, offset and len aligned to
  // caps().io_alignment (len may be unaligned only for the object's last
  // write).
  virtual Status StartWrite(uint64_t offset, const void* data, size_t len, uint64_t tag) = 0;

  // Returns the next completion, blocking until one exists.
  // REQUIRES: in_flight() > 0.
  virtual Result<IoCompletion> Reap() = 0;
  // As Reap, but gives up at `deadline`: empty then, nothing reaped. For
  // the write queue, which acts on a write that is late.
  virtual Result<std::optional<IoCompletion>> ReapUntil(std::chrono::steady_clock::time_point deadline) = 0;

  virtual size_t in_flight() const = 0;
  virtual size_t queue_depth() const = 0;

  // Waits for nothing (REQUIRES: in_flight() == 0), sets the object's length
  // to `final_size` and makes its contents durable (fdatasync or the backend's
  // equivalent). On error the object's contents are undefined.
  virtual Status Finish(uint64_t final_size) = 0;

  // The object is not wanted (a hedge's loser): removes it, best effort
  // (what is left is garbage collection's). REQUIRES: in_flight() == 0.
  // Through the object, not the backend, so that it can be done after the
  // writer that made it is gone.
  virtual Status Discard() = 0;
};

// An object being read. Reads may complete in any order.
class ReadableObject {
 public:
  virtual ~ReadableObject() = default;

  virtual uint64_t size() const = 0;

  // Starts reading up to `len` bytes at `offset` into `buf`. A read that runs
  // past the end of the object completes with fewer bytes. REQUIRES: as for
  // WritableObject::StartWrite.
  virtual Status StartRead(uint64_t offset, void* buf, size_t len, uint64_t tag) = 0;
  virtual Result<IoCompletion> Reap() = 0;
  virtual size_t in_flight() const = 0;
  virtual size_t queue_depth() const = 0;
};

struct ObjectInfo {
  std::string name;
  uint64_t size = 0;
  int64_t mtime_unix_ms = 0;  // last modification, for age-based garbage collection
};

// How Backend::Create makes an object.
struct CreateOptions {
  // Bytes the object will hold, 0 if unknown: lets the backend preallocate.
  uint64_t size_hint = 0;
};

// How Backend::Open opens an object.
struct OpenOptions {
  // The object's size, where the caller already knows it (from a manifest,
  // checked by a Stat): a backend may skip asking for it (RADOS: a
  // synchronous round trip, which one slow server holds up for seconds). size() is then this, and an object that is
  // missing or shorter shows at its reads (NotFound, or fewer bytes), not
  // at Open.
  std::optional<uint64_t> known_size;
};

// Every method is pure, so that a forwarding wrapper (backend_wrapper.h)
// that misses one does not compile.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual const BackendCaps& caps() const = 0;
  // The URI this backend was opened from.
  virtual const std::string& uri() const = 0;

  // Creates a new object for writing. Fails with AlreadyExists if the name
  // exists.
  virtual Result<std::unique_ptr<WritableObject>> Create(const std::string& name,
                                                         const CreateOptions& options) = 0;

  // Opens an existing object for reading; NotFound if absent (unless
  // options.known_size is set: then at its reads).
  virtual Result<std::unique_ptr<ReadableObject>> Open(const std::string& name, const OpenOptions& options) = 0;

  // Atomically creates `name` holding exactly `bytes`, durable on success.
  // AlreadyExists if it exists (then nothing is changed). A reader never sees
  // a partial object. This is the commit primitive.
  virtual Status PublishIfAbsent(const std::string& name, std::string_view bytes) = 0;

  // Atomically makes `target` hold what `staged` holds and removes `staged`:
  // a reader of `target` sees its old bytes (or nothing, if it did not
  // exist) or the new ones, never a mix, also across a crash. Durable on
  // success. NotFound if `staged` does not exist. The repair primitive: a
  // bad committed object is replaced only by a whole, verified one written
  // beside it first.
  virtual Status Replace(const std::string& staged, const std::string& target) = 0;

  // Reads a whole (small) object: published records, manifests.
  virtual Result<std::string> ReadSmall(const std::string& name) = 0;

  // Objects whose names start with `prefix` (empty, or ending in '/').
  // A backend's own temporaries (an interrupted publish's) are never
  // listed: they are the backend's to reclaim (ReclaimLeftovers).
  virtual Result<std::vector<ObjectInfo>> List(const std::string& prefix) = 0;

  // The named objects that exist, with their sizes (objects absent are left
  // out; any order). For checks of objects whose names are known, where a
  // List of their prefix would cost a RADOS pool walk. Backends with a
  // round trip per object ask concurrently.
  virtual Result<std::vector<ObjectInfo>> Stat(const std::vector<std::string>& names) = 0;

  // Removes an object, durably: once it returns OK the object stays gone
  // across a crash or power loss (removing a commit record must not be
  // undone after the data it named is gone). NotFound if absent.
  virtual Status Remove(const std::string& name) = 0;

  // Reclaims what the backend keeps beside its objects once no object needs
  // it, below `prefix` (which must end in '/'; the prefix's own directory
  // stays): leftovers of interrupted publishes (a file store's temporary
  // files, which List never shows) older than `min_age_ms`, and a file
  // store's directories left empty (a writer killed between making a
  // directory and creating the file in it leaves one that no Remove()
  // would ever prune). Garbage collection calls this after removing
  // objects. Safe against running writers: a publish younger than
  // min_age_ms is left alone, and a writer whose directory goes before its
  // file is created makes it again. A backend with neither returns OK.
  virtual Status ReclaimLeftovers(const std::string& prefix, uint64_t min_age_ms) = 0;
};

// Opens a backend from a store URI:
//   file:///abs/path[?io=auto|uring|threads&direct=auto|on|off&qd=N&dirs=...]
//   /abs/or/relative/path        (same as file://)
//   rados://POOL/PREFIX[?conf=...]   (doc/ceph.md; when built with librados)
//   s3://BUCKET/PREFIX[?endpoint=...] (doc/s3.md; when built with libcurl)
// Each backend parses its own query options. InvalidArgument names the bad
// part of the URI.
// With `create_if_missing` the store's root is created (a file store's
// directory); without it a missing store is NotFound.
Result<std::unique_ptr<Backend>> OpenBackend(const std::string& uri, bool create_if_missing);

}  // namespace sluice

#endif  // SLUICE_BACKEND_H_
