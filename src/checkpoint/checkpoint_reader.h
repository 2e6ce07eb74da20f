// Reading committed checkpoints: loading and cross-checking the commit
// record and manifests, range reads, whole-checkpoint streaming, verify.
#ifndef SLUICE_CHECKPOINT_CHECKPOINT_READER_H_
#define SLUICE_CHECKPOINT_CHECKPOINT_READER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "format/commit_record.h"
#include "format/manifest.h"
#include "sluice/store.h"

namespace sluice {

// A commit record with its manifests, each checked against the size and
// crc32c the commit recorded.
struct LoadedCheckpoint {
  CommitRecord commit;
  std::vector<Manifest> manifests;  // indexed by rank
  std::string seal;  // where the record was read when `COMMIT` holds a claim; else ""
};

// A step's commit record as published: at `COMMIT` itself, or, where
// `COMMIT` holds a claim (format/commit_record.h, CommitClaim), at the seal
// object the claim names. Every reader of commit records goes through here.
struct CommitRecordBytes {
  std::string bytes;
  std::string seal;  // the seal object it was read from; "" when read from `COMMIT`
};
// NotFound when the step is not committed: no `COMMIT`, or a claim whose
// seal does not exist (a save still running, or one that died before its
// commit). Corruption when `COMMIT` holds a claim that does not decode, is
// for another step, or names a seal outside the step's seal/ prefix. The
// record's bytes are not decoded here (DecodeCommitOf does).
Result<CommitRecordBytes> ReadCommitRecord(Backend& backend, std::string_view name, uint64_t step);

// NotFound when (name, step) is not committed, saying why where a claim
// without its seal is found: its save is still running, or it is being
// removed (or its save died), or it was removed while being read.
Result<LoadedCheckpoint> LoadCheckpoint(Backend& backend, std::string_view name, uint64_t step);
// Corruption if a data object the manifests name is missing or shorter than
// its chunks need (one Stat for them all; no chunk is read).
Status CheckDataObjects(Backend& backend, const LoadedCheckpoint& loaded);
// The commit record of (name, step) from `bytes` read from it: Corruption
// if they do not decode or describe another checkpoint.
// `read_from`: the object the bytes were read from, for messages (a seal;
// empty: `COMMIT`).
Result<CommitRecord> DecodeCommitOf(std::string_view name, uint64_t step, std::string_view bytes,
                                    std::string_view read_from = {});
// The claim (name, step)'s `COMMIT` holds, from `bytes` read there:
// Corruption if they do not decode, describe another step, or name anything
// but a seal of that step (layout.h, IsSealOf).
Result<CommitClaim> DecodeClaimOf(std::string_view name, uint64_t step, std::string_view bytes);
// Rank `r`'s manifest as `commit` records it: Corruption if it is
// unreadable, differs in size or crc32c, or describes another rank.
Result<Manifest> LoadCommittedManifest(Backend& backend, const CommitRecord& commit, const CommittedRank& r);
// The same check of manifest `bytes` read elsewhere (sent by a peer host).
Result<Manifest> DecodeCommittedManifest(const CommitRecord& commit, const CommittedRank& r, std::string_view bytes);

// Called for a chunk that is missing or fails its checksum: fills `out`
// with the chunk's `length` bytes (item bytes from `item_offset`) from
// elsewhere, or returns an error. `object` and `problem` say what was wrong.
using BadChunkHandler =
    std::function<Status(const ItemInfo& item, uint64_t chunk_index, uint64_t item_offset,
                         uint64_t length, const std::string& object, const std::string& problem,
                         uint8_t* out)>;

// `on_bad` (optional) lets reads recover bad chunks instead of failing.
Result<std::unique_ptr<CheckpointReader>> NewCheckpointReader(Backend& backend,
                                                              const StoreOptions& options,
                                                              LoadedCheckpoint loaded,
                                                              BadChunkHandler on_bad = nullptr);

// Reads every chunk and returns the bad ones (never stops at the first).
Result<VerifyReport> VerifyCheckpoint(Backend& backend, const StoreOptions& options,
                                      const LoadedCheckpoint& loaded);

CheckpointInfo InfoOf(const CommitRecord& commit);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_CHECKPOINT_READER_H_
