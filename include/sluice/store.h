// Store: checkpoints on one backend. The whole public API for saving,
// restoring, listing, verifying and collecting garbage.
//
// A checkpoint is (name, step). Each of its `world` ranks writes its own items
// through a CheckpointWriter; the checkpoint becomes visible only when its
// commit record is published, which happens once, after every rank's manifest
// is published. Everything not reachable from a commit record is garbage that
// CollectGarbage() reclaims.
//
// Thread-safety: a Store may be shared by threads. A CheckpointWriter or
// CheckpointReader belongs to one thread at a time.
#ifndef SLUICE_STORE_H_
#define SLUICE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/backend.h"
#include "sluice/item_source.h"
#include "sluice/names.h"
#include "sluice/status.h"

namespace sluice {

struct StoreOptions {
  // Items are cut into chunks of at most this many bytes; each chunk has its
  // own crc32c, checked on every read.
  uint64_t chunk_bytes = 4ull << 20;
  // Data objects roll over at this size (clamped to the backend's maximum).
  uint64_t object_bytes = 1ull << 30;
  // Size of one write or read submitted to the backend.
  uint64_t io_bytes = 4ull << 20;
  // How long rank 0 waits for the other ranks' manifests, and how long the
  // other ranks wait for the commit, before giving up.
  uint64_t rank_timeout_ms = 600'000;
  // Create the store (a file store's directory) if it does not exist.
  bool create_if_missing = false;

  // InvalidArgument naming the first field outside its bounds (and the CLI
  // flag that sets it): chunk_bytes 1 byte..256 MiB; io_bytes a multiple of
  // 4 KiB in 4 KiB..256 MiB; object_bytes at least 1 MiB.
  Status Validate() const;
};

struct CheckpointId {
  std::string name;
  uint64_t step = 0;
};

// How one rank takes part in a save.
struct SaveOptions {
  // Identifies one launch of a multi-rank save. Rank 0 commits only
  // manifests carrying the same attempt, so a re-launched job never mixes in
  // ranks of an earlier, crashed launch. Leave empty for single-rank saves;
  // multi-node launchers should pass one id per launch (e.g. the job id and
  // restart count). Without it, rank 0 tells stale manifests apart only by
  // their writer being gone, which it can check only for writers on its own
  // host. At most 128 bytes.
  std::string attempt;
  // The attempt id is used by this one save only (a fresh random id, as the
  // DCP writer makes). Then a rank that gives up tells the others at once
  // (an abort note), and they fail within a poll instead of after the rank
  // timeout. Leave false for ids a relaunch may reuse (a job id, a fixed
  // --attempt): a note left by the failed launch would fail the next one.
  bool attempt_is_unique = false;
  // Incremental save (Pipeline saves; a Store's CheckpointWriter always
  // writes in full): a chunk equal to one of the newest other committed
  // step of the name on tier 0 (same rank, same content hash and CRC32C)
  // is recorded as a reference to that step's copy instead of written
  // again. Shared objects stay until no committed step names them (Remove
  // and gc keep them), and restore, verify, scrub and drains follow the
  // references. false: every chunk is written (`--full`).
  bool incremental = true;
};

struct SaveStats {
  uint64_t bytes = 0;      // item bytes
  uint64_t items = 0;
  uint64_t chunks = 0;
  uint64_t objects = 0;    // data objects written
  bool committed = false;  // true if this writer published the commit record
  // An incremental save: item bytes whose chunks were found unchanged in
  // the base step and referenced there instead of written (`bytes` counts
  // them too), and that base (meaningful when referenced_bytes > 0).
  uint64_t referenced_bytes = 0;
  uint64_t base_step = 0;
};

class CheckpointWriter {
 public:
  virtual ~CheckpointWriter() = default;

  // Tells the writer how many item bytes this rank will add in all, so data
  // objects can be preallocated (and a full disk found before writing).
  // Optional; a wrong figure costs only preallocated space.
  virtual void SetExpectedBytes(uint64_t total_bytes) = 0;

  // Streams one item of `size` bytes from `source` into data objects, cutting
  // it into checksummed chunks. Fails with InvalidArgument on a bad or
  // duplicate key, or if the source delivers a different number of bytes.
  virtual Status AddItem(std::string_view key, std::string_view metadata, uint64_t size,
                         ItemSource& source) = 0;
  // The same from memory, copied before AddItem returns.
  virtual Status AddItem(std::string_view key, std::string_view metadata, const void* data,
                         uint64_t size) = 0;

  // Makes every data object durable and publishes this rank's manifest. Rank
  // 0 then waits for all ranks' manifests and publishes the commit record;
  // other ranks wait until the commit record lists their manifest. Returns
  // AlreadyExists if another writer committed this (name, step) first,
  // Unavailable if a rank did not arrive within rank_timeout_ms.
  virtual Result<SaveStats> Commit() = 0;
};

struct ItemInfo {
  std::string key;
  std::string metadata;
  uint64_t size = 0;
  uint32_t rank = 0;
};

struct CheckpointInfo {
  std::string name;
  uint64_t step = 0;
  bool complete = false;      // false: no valid commit record (shown by --all)
  uint32_t ranks = 0;         // world size (complete) or ranks seen (incomplete)
  uint64_t items = 0;
  uint64_t bytes = 0;         // item bytes
  // Of `bytes`, those in chunks shared with other steps (an incremental
  // save's references into its base); own bytes = bytes - referenced_bytes.
  uint64_t referenced_bytes = 0;
  int64_t created_unix_ms = 0;
  std::string problem;        // for incomplete and damaged ones: why ("no commit record", ...)
  // Incomplete, and a writer (a save, or a drain into this store) of the
  // step is, or may be, still running.
  bool writing = false;
  // A commit record exists but the checkpoint does not verify: the record
  // or a manifest does not decode, or a data object is missing or short.
  // Listed (complete false) whether or not incomplete ones are asked for: a
  // damaged step is never hidden. A chunk with a bad checksum is found only
  // by reading it (Verify, scrub).
  bool damaged = false;
  // Not empty: this store is one host's tier 0 and holds only these ranks'
  // part of a checkpoint committed on a shared tier (PipelineOptions::
  // tier0_per_host); complete is false, items and bytes are the part's.
  // Listed whether or not incomplete ones are asked for.
  std::vector<uint32_t> part_ranks;
  // Not empty: the step is safe (peer replicas, doc/peer.md): these hosts
  // published its peer commit, and this store holds it.
  std::vector<std::string> safe_hosts;
};

// One bad chunk found by Verify.
struct BadChunk {
  std::string item;
  uint32_t rank = 0;
  uint64_t chunk_index = 0;
  std::string object;
  uint64_t object_offset = 0;
  uint64_t length = 0;
  std::string reason;
};

struct VerifyReport {
  uint64_t items = 0;
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  std::vector<BadChunk> bad;
  bool ok() const { return bad.empty(); }
};

struct GcReport {
  uint64_t objects_removed = 0;
  uint64_t bytes_removed = 0;
};

// Receives restored bytes: Write(item, offset_in_item, data, len), in any
// item order but in increasing offset within an item, each chunk verified.
using ItemSink = std::function<Status(const ItemInfo& item, uint64_t offset, const void* data,
                                      size_t len)>;

// Where CheckpointReader::ReadInto puts one item's bytes.
struct ItemDestination {
  std::string key;
  void* address = nullptr;
  uint64_t size = 0;  // must equal the item's size
  // Memory never written since it was mapped (a new tensor, a new buffer):
  // the first write to each of its pages costs a fault and the kernel's
  // zeroing, often more than the copy itself, so ReadInto takes those faults
  // ahead of the reads on other threads. Leave false for memory in use.
  bool fresh = false;
};

struct ReadIntoOptions {
  // Threads faulting fresh destinations in ahead of the reads (0: none).
  uint32_t prefault_threads = 2;
};

class CheckpointReader {
 public:
  virtual ~CheckpointReader() = default;

  virtual const CheckpointInfo& info() const = 0;
  // Every item of every rank.
  virtual const std::vector<ItemInfo>& items() const = 0;

  // Reads `len` bytes of item `key` starting at `offset` into `out`, reading
  // only the chunks that overlap the range and verifying each one.
  // InvalidArgument if the range is outside the item, Corruption naming item,
  // chunk, object and offset if a chunk fails its checksum.
  virtual Status ReadRange(std::string_view key, uint64_t offset, void* out, uint64_t len) = 0;

  // Streams every item (of `rank`, or of all ranks if nullopt) to `sink`,
  // reading each data object once, front to back, with many reads in flight.
  virtual Status ReadAll(std::optional<uint32_t> rank, const ItemSink& sink) = 0;

  // Restores items into memory: ReadAll (of `rank`, or of all ranks) with
  // each listed item's bytes copied to its destination, every chunk verified.
  // Items not listed are read and verified but not kept. Destinations are
  // filled in the order the checkpoint stores them; fresh ones are faulted
  // in ahead of the reads in the order listed. NotFound for a key the
  // checkpoint (or `rank`) lacks, InvalidArgument for a size mismatch, a
  // null address or a key listed twice, all before anything is read.
  Status ReadInto(std::optional<uint32_t> rank, const std::vector<ItemDestination>& destinations,
                  const ReadIntoOptions& options = {});
};

class Store {
 public:
  // Opens the store at `uri` (see OpenBackend). NotFound if it does not
  // exist, unless options.create_if_missing.
  static Result<std::unique_ptr<Store>> Open(const std::string& uri,
                                             const StoreOptions& options = {});
  // The same over a backend the caller built (a driver not in OpenBackend,
  // or a wrapper around one, e.g. for fault injection in tests).
  static std::unique_ptr<Store> Open(std::unique_ptr<Backend> backend,
                                     const StoreOptions& options = {});
  virtual ~Store() = default;

  virtual Backend& backend() = 0;

  // Starts writing rank `rank` of `world` of (name, step). AlreadyExists if
  // that checkpoint is already committed.
  virtual Result<std::unique_ptr<CheckpointWriter>> BeginCheckpoint(
      const CheckpointId& id, uint32_t rank, uint32_t world, const SaveOptions& save = {}) = 0;

  // Opens a committed checkpoint. `step` nullopt means the latest committed
  // step of `name`. NotFound if none; Corruption if its records are bad or
  // its data objects missing, also for the latest step: a damaged newest
  // step is reported, never skipped for an older one (see LatestGoodStep).
  virtual Result<std::unique_ptr<CheckpointReader>> OpenCheckpoint(
      std::string_view name, std::optional<uint64_t> step) = 0;

  // The newest intact committed step of `name`, for a caller that asked to
  // skip a damaged newest one. NotFound if none.
  virtual Result<uint64_t> LatestGoodStep(std::string_view name) = 0;

  // Committed and damaged checkpoints (and, with include_incomplete,
  // uncommitted ones), sorted by name then step. `name` empty means all
  // names. Callers that want only intact ones check `complete`.
  virtual Result<std::vector<CheckpointInfo>> List(std::string_view name,
                                                   bool include_incomplete) = 0;

  // Reads every chunk of a committed checkpoint and reports the bad ones.
  virtual Result<VerifyReport> Verify(std::string_view name, std::optional<uint64_t> step) = 0;

  // Bytes of the data objects written so far for `id`, committed or not
  // (a save or drain under way, perhaps in another process): what a
  // progress display shows. 0 where there are none.
  virtual Result<uint64_t> DataBytesWritten(const CheckpointId& id) = 0;

  // Removes a checkpoint: its commit record first (so it is invisible at
  // once), then everything else under it. NotFound if nothing is there.
  virtual Status Remove(const CheckpointId& id) = 0;

  // Removes every step of `name`, committed or not (each as Remove does,
  // in one pass over the name, not a listing per step); returns how many
  // steps held anything. Steps a writer is in are left: Unavailable names
  // them once the others are gone. NotFound if the name holds nothing.
  virtual Result<uint64_t> RemoveAll(std::string_view name) = 0;

  // Removes every object that no valid commit record reaches: data and
  // manifests of aborted or crashed saves, leftovers of interrupted publishes.
  // Objects younger than `min_age_ms` are spared, so that saves in progress
  // are not disturbed.
  virtual Result<GcReport> CollectGarbage(uint64_t min_age_ms) = 0;
};

}  // namespace sluice

#endif  // SLUICE_STORE_H_
