#include "checkpoint/parts.h"

#include <utility>

#include "checkpoint/copies.h"
#include "format/commit_record.h"
#include "format/layout.h"
#include "sluice/names.h"

namespace sluice {

Status PublishPart(Backend& backend, std::string_view commit_bytes, uint32_t rank) {
  ASSIGN_OR_RETURN(CommitRecord commit, DecodeCommitRecord(commit_bytes, "commit record"));
  const std::string object = PartObject(commit.name, commit.step, rank);
  Status st = backend.PublishIfAbsent(object, commit_bytes);
  if (!st.IsAlreadyExists()) return st;
  ASSIGN_OR_RETURN(std::string there, backend.ReadSmall(object));
  if (there != commit_bytes) {
    return Status::Corruption("part record " + object + " names another commit of " +
                              CheckpointLabel(commit.name, commit.step));
  }
  return Status::OK();
}

Result<LoadedPart> LoadPart(Backend& backend, std::string_view name, uint64_t step) {
  const std::string label = CheckpointLabel(name, step);
  ASSIGN_OR_RETURN(auto listed, backend.List(PartPrefix(name, step)));
  LoadedPart out;
  for (const auto& o : listed) {
    ASSIGN_OR_RETURN(std::string bytes, backend.ReadSmall(o.name));
    if (out.commit_bytes.empty()) {
      ASSIGN_OR_RETURN(out.commit, DecodeCommitRecord(bytes, "part record " + o.name));
      if (out.commit.name != name || out.commit.step != step) {
        return Status::Corruption("part record " + o.name + " describes " +
                                  CheckpointLabel(out.commit.name, out.commit.step));
      }
      out.commit_bytes = std::move(bytes);
    } else if (bytes != out.commit_bytes) {
      return Status::Corruption(label + ": part record " + o.name + " names another commit than " +
                                listed.front().name);
    }
    bool found = false;
    for (const auto& r : out.commit.ranks) {
      if (PartObject(name, step, r.rank) != o.name) continue;
      ASSIGN_OR_RETURN(Manifest m, LoadCommittedManifest(backend, out.commit, r));
      out.manifests.emplace(r.rank, std::move(m));
      found = true;
    }
    if (!found) return Status::Corruption("part record " + o.name + " is for a rank its commit does not list");
  }
  if (out.commit_bytes.empty()) return Status::NotFound(label + " has no part here");
  return out;
}

Result<LoadedCheckpoint> CombinePart(const LoadedPart& part, const LoadedCheckpoint& whole) {
  if (!SameSave(part.commit, whole.commit)) {
    return Status::Corruption(CheckpointLabel(part.commit.name, part.commit.step) +
                              ": the part held here belongs to another commit than the shared tier's");
  }
  LoadedCheckpoint out;
  out.commit = part.commit;
  out.manifests = whole.manifests;
  for (const auto& [rank, m] : part.manifests) {
    if (rank < out.manifests.size()) out.manifests[rank] = m;
  }
  return out;
}

}  // namespace sluice
