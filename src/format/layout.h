// Where a checkpoint's objects live in a store's flat object namespace:
//   ckpt/<name>/<step, 20 digits>/COMMIT                         commit claim (a record in older stores)
//   ckpt/<name>/<step>/seal/<writer>-<2 hex digits>             commit record a claim names
//   ckpt/<name>/<step>/manifest/r<rank, 6 digits>-<writer>.man   one per rank
//   ckpt/<name>/<step>/data/r<rank>-<writer>-<seq, 6 digits>.dat data objects
//   ckpt/<name>/<step>/writers/<writer>.lock                    while a writer is active
//   ckpt/<name>/<step>/writers/<writer>.refs                    steps it references, while active
//   ckpt/<name>/<step>/ranks/<rank, 6 digits>.<k, 4 digits>     rank r's k-th manifest pointer
//   ckpt/<name>/<step>/drain/<tier, 16 hex digits>.note         why a drain to a later tier failed
//   ckpt/<name>/<step>/parts/r<rank, 6 digits>.part              a host-local tier's part (parts.h)
//   ckpt/<name>/<step>/parts/peer.commit                         a peer commit (peer_commit.h)
// <writer> is a random 16-hex-digit id per writer, so two writers never share
// an object. Steps are zero-padded so names sort by step.
//
// Thread-safety: pure functions.
#ifndef SLUICE_FORMAT_LAYOUT_H_
#define SLUICE_FORMAT_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

std::string CheckpointsPrefix();                                   // "ckpt/"
std::string NamePrefix(std::string_view name);                     // "ckpt/<name>/"
std::string StepPrefix(std::string_view name, uint64_t step);      // "ckpt/<name>/<step>/"
std::string CommitObject(std::string_view name, uint64_t step);
// Where a commit whose `COMMIT` holds a claim (every commit) publishes its record
// (format/commit_record.h, CommitClaim). `salt` picks among names, so that
// the writer can choose one whose placement is not slow.
std::string SealPrefix(std::string_view name, uint64_t step);  // ".../seal/"
std::string SealObject(std::string_view name, uint64_t step, std::string_view writer, uint32_t salt);
// Whether `object` is a name directly under (name, step)'s seal/ prefix: a
// claim naming anything else is not trusted.
bool IsSealOf(std::string_view object, std::string_view name, uint64_t step);
// The writer id a seal object's name carries (SealObject); "" if `seal` is
// not one.
std::string WriterOfSeal(std::string_view seal);
// "ckpt/<name>/LATEST" (slot 0), "ckpt/<name>/LATEST.<slot>" (1..15): the
// step a save of `name` last committed, in decimal, and optionally its
// commit record (and the seal it was published at) after a newline
// (checkpoint/latest_hint.h). A hint, not a record:
// an incremental save reads it to find its base without listing (a listing
// may walk the whole store) and checks the step's commit record
// before building on it (a hint of the step alone whose record is missing:
// it lists; a stale hinted record: it writes in full). The other slots are
// other names, which a backend with placements may place elsewhere: written
// in place of slot 0 while its placement is slow (checkpoint/latest_hint.h).
// Why 16 slots on RADOS: doc/ceph.md.
constexpr uint32_t kLatestHintSlots = 16;
std::string LatestHintObject(std::string_view name, uint32_t slot = 0);
// The checkpoint name of a listed hint object, or nullopt if `object` is
// not one.
std::optional<std::string> NameOfLatestHint(std::string_view object);
std::string ManifestPrefix(std::string_view name, uint64_t step);  // ".../manifest/"
std::string ManifestObject(std::string_view name, uint64_t step, uint32_t rank,
                           std::string_view writer);
// Where rank `rank` (> 0) names the manifest it published, so that rank 0
// finds it by name instead of by listing (a RADOS listing walks the whole
// pool). The k-th such pointer of that rank: k counts past pointers left by
// earlier writers of the same rank (crashed or concurrent attempts).
std::string RankPointerPrefix(std::string_view name, uint64_t step);  // ".../ranks/"
std::string RankPointerObject(std::string_view name, uint64_t step, uint32_t rank, uint32_t k);
std::string DrainNotePrefix(std::string_view name, uint64_t step);  // ".../drain/"
// Where a store local to one host records that it holds rank `rank`'s part
// of a checkpoint committed on a shared tier (checkpoint/parts.h).
std::string PartPrefix(std::string_view name, uint64_t step);  // ".../parts/"
std::string PartObject(std::string_view name, uint64_t step, uint32_t rank);
// Where a host's tier 0 keeps the peer commit of a step whose parts peers
// replicate (format/peer_commit.h): under parts/, so that what keeps a
// part whole (gc, retention) keeps it too.
std::string PeerCommitObject(std::string_view name, uint64_t step);
// Where a rank of save attempt `attempt` notes that it gave up (AbortNote).
std::string AbortNoteObject(std::string_view name, uint64_t step, std::string_view attempt);
// The note about draining to the tier at `tier_uri` (named by a hash of it).
std::string DrainNoteObject(std::string_view name, uint64_t step, std::string_view tier_uri);
std::string WritersPrefix(std::string_view name, uint64_t step);   // ".../writers/"
std::string WriterLockObject(std::string_view name, uint64_t step, std::string_view writer);
// Where a writer of an incremental save (or a drain of one) lists the other
// steps whose data objects its manifest will name, while it runs
// (checkpoint/references.h).
std::string WriterRefsObject(std::string_view name, uint64_t step, std::string_view writer);
// The writer id in a manifest, data or lock object name ("" if none).
std::string WriterOfObject(std::string_view rest);
// Where a repair of (name, step) by `writer` stages the new copy of
// `object` before swapping it in: under the step's repair/ prefix, also for
// an object of another step the step shares chunks with.
std::string RepairStagingObject(std::string_view name, uint64_t step, std::string_view writer,
                                std::string_view object);
std::string DataObject(std::string_view name, uint64_t step, uint32_t rank,
                       std::string_view writer, uint32_t seq);

// Splits "ckpt/<name>/<step>/<rest>" of a listed object; nullopt if the name
// does not have that shape.
struct ParsedObjectName {
  std::string name;
  uint64_t step = 0;
  std::string rest;  // "COMMIT", "seal/...", "manifest/...", "data/...", "writers/...", "ranks/...", "drain/..."
};
std::optional<ParsedObjectName> ParseObjectName(std::string_view object);

// The rank encoded in a manifest object's file name, if it has the shape.
std::optional<uint32_t> RankOfManifest(std::string_view rest);

std::string NewWriterId();

}  // namespace sluice

#endif  // SLUICE_FORMAT_LAYOUT_H_
