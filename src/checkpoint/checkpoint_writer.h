// The CheckpointWriter implementation: streams items through a StreamWriter,
// publishes this rank's manifest, and runs the commit protocol (rank 0
// gathers every rank's manifest and publishes the commit record; the others
// wait for it). See doc/format.md, "Commit protocol".
#ifndef SLUICE_CHECKPOINT_CHECKPOINT_WRITER_H_
#define SLUICE_CHECKPOINT_CHECKPOINT_WRITER_H_

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/references.h"
#include "format/manifest.h"
#include "sluice/store.h"

namespace sluice {

// A CheckpointWriter that can also commit data objects written by someone
// else (the staged pipeline writes tier 0 straight from its staging arena).
class RankWriter : public CheckpointWriter {
 public:
  // The name of this writer's seq-th data object.
  virtual std::string DataObjectName(uint32_t seq) const = 0;
  // Commit() for data already written and durable in `objects` (named by
  // DataObjectName), described by `items` (keys validated by the caller,
  // unique). Not to be mixed with AddItem.
  virtual Result<SaveStats> CommitWritten(std::vector<ManifestItem> items,
                                          std::vector<DataObjectRef> objects) = 0;
  // For an incremental save: the newest other committed step of the name
  // whose manifest of this rank can be referenced, made safe to reference
  // for as long as this writer lives (references.h). nullopt: write in full
  // (also when SaveOptions::incremental is off).
  virtual Result<std::optional<BaseIndex>> ReferenceBase() = 0;
  // Gives the save up because of `why` (its data could not be written):
  // the other ranks of a multi-rank save learn it from an AbortNote and stop
  // waiting. Destroying the writer uncommitted does the same, with a
  // generic reason.
  virtual void Abandon(const Status& why) = 0;

  // A part writer's (NewPartWriter) manifest, once its commit returned OK:
  // the object name and the exact bytes published.
  struct Published {
    std::string object;
    std::string bytes;
  };
  virtual const Published& published() const = 0;
  virtual const std::string& writer_id() const = 0;
  // A relay writer's (NewRelayWriter) commit: publishes `published` (the
  // part writer's manifest, byte for byte) on this writer's store, whose
  // data objects the caller has copied there, then runs the commit
  // protocol as Commit() does.
  virtual Result<SaveStats> CommitPublished(const Published& published) = 0;
};

Result<std::unique_ptr<RankWriter>> NewRankWriter(Backend& backend, const StoreOptions& options,
                                                  const CheckpointId& id, uint32_t rank,
                                                  uint32_t world, const SaveOptions& save);

// Host-local tier 0 (checkpoint/parts.h). A part writer writes rank
// `rank`'s items and manifest to `local` and stops there: no rank pointer,
// no commit, no abort note (no other rank reads `local`). Its writer lock
// stays until the writer is destroyed, so gc leaves the part alone while
// it is copied on and committed elsewhere. Its writer id names the relay's
// records on `shared` too, so it is chosen to keep them away from slow
// placements there (NewWriterIdAwayFromSlow).
Result<std::unique_ptr<RankWriter>> NewPartWriter(Backend& local, Backend& shared, const StoreOptions& options,
                                                  const CheckpointId& id, uint32_t rank,
                                                  uint32_t world, const SaveOptions& save);
// A relay writer registers `writer_id` (the part writer's) on `shared`
// before the caller copies the part's data objects there under their
// names; CommitPublished then commits. Failing or destroyed uncommitted,
// it removes the copied data objects, as any writer removes its own.
Result<std::unique_ptr<RankWriter>> NewRelayWriter(Backend& shared, const StoreOptions& options,
                                                   const CheckpointId& id, uint32_t rank,
                                                   uint32_t world, const SaveOptions& save,
                                                   const std::string& writer_id);

Result<std::unique_ptr<CheckpointWriter>> NewCheckpointWriter(Backend& backend,
                                                              const StoreOptions& options,
                                                              const CheckpointId& id,
                                                              uint32_t rank, uint32_t world,
                                                              const SaveOptions& save);

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_CHECKPOINT_WRITER_H_
