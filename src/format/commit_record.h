// CommitRecord: the object whose existence makes a checkpoint visible. Lists
// every rank's manifest with its size and crc32c, so a reader can tell a
// swapped or damaged manifest from the one that was committed.
//
// Thread-safety: values and pure functions.
#ifndef SLUICE_FORMAT_COMMIT_RECORD_H_
#define SLUICE_FORMAT_COMMIT_RECORD_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice {

// The record's magic: the first 8 bytes of its envelope (record_frame.h).
constexpr std::string_view kCommitMagic = "SLUICECR";

struct CommittedRank {
  uint32_t rank = 0;
  std::string manifest;       // object name
  uint64_t manifest_bytes = 0;
  uint32_t manifest_crc32c = 0;
  uint64_t items = 0;
  uint64_t bytes = 0;
};

struct CommitRecord {
  std::string name;
  uint64_t step = 0;
  uint32_t world = 1;
  int64_t created_unix_ms = 0;
  std::vector<CommittedRank> ranks;  // exactly one per rank, ordered by rank

  uint64_t TotalBytes() const;
  uint64_t TotalItems() const;
};

std::string EncodeCommitRecord(const CommitRecord& c);
Result<CommitRecord> DecodeCommitRecord(std::string_view bytes, const std::string& what);

// A commit claim: what `COMMIT` holds, naming the seal object its commit
// record is published at (layout.h, SealObject). The step is committed
// exactly when the claim and its seal both exist: the seal's exclusive
// publish is the commit point. Every commit claims `COMMIT` when its work
// begins and seals when it commits, so that where `COMMIT`'s placement is
// slow (Backend::caps().placement; on RADOS, doc/ceph.md) the wait for it overlaps the
// data writes; the seal's name is chosen where placement is not slow.
// (Stores written before every commit was claimed may hold a record at
// `COMMIT` itself; readers take both.)
constexpr std::string_view kCommitClaimMagic = "SLUICECL";

struct CommitClaim {
  std::string name;
  uint64_t step = 0;
  std::string seal;  // the seal object's full name
  int64_t created_unix_ms = 0;
};

std::string EncodeCommitClaim(const CommitClaim& c);
Result<CommitClaim> DecodeCommitClaim(std::string_view bytes, const std::string& what);
// Whether `bytes` (read from `COMMIT`) are framed as a claim rather than a
// record. Decoding says whether they are a good one.
bool IsCommitClaim(std::string_view bytes);

// What gc publishes at an unsealed claim's seal before it removes the claim:
// a claim left by a writer that died is sealed by the next writer of the
// step, so a claim gc listed as garbage may become a commit before gc
// removes it. Publishing this first, exclusively, settles it: if the seal
// was there, the step is committed and stays; if not, nobody can seal that
// claim any more. A seal holding it is no commit.
constexpr std::string_view kFencedSeal = "SLUICE-FENCED-SEAL\n";

}  // namespace sluice

#endif  // SLUICE_FORMAT_COMMIT_RECORD_H_
