#include "checkpoint/replicas.h"

#include <algorithm>
#include <cstring>

#include "checkpoint/store_walk.h"
#include "engine/object_copy.h"
#include "engine/read_stream.h"
#include "engine/write_queue.h"
#include "format/layout.h"
#include "io/crc32c.h"
#include "sluice/names.h"

namespace sluice {
namespace {

CommittedRank DigestOf(const std::string& object, std::string_view bytes, const Manifest& m) {
  return CommittedRank{m.rank, object, bytes.size(), Crc32c(bytes.data(), bytes.size()), m.items.size(),
                       m.TotalBytes()};
}

// The manifest `bytes` at `object`, checked to be a full part of the step
// its name says.
Result<Manifest> DecodePartManifest(const std::string& object, std::string_view bytes) {
  auto parsed = ParseObjectName(object);
  auto rank = parsed ? RankOfManifest(parsed->rest) : std::nullopt;
  if (!parsed || !rank) return Status::InvalidArgument("not a manifest object name: " + object);
  ASSIGN_OR_RETURN(Manifest m, DecodeManifest(bytes, "manifest " + object));
  if (m.name != parsed->name || m.step != parsed->step || m.rank != *rank) {
    return Status::Corruption("manifest " + object + " describes " + CheckpointLabel(m.name, m.step) + " rank " +
                              std::to_string(m.rank));
  }
  const std::string step_prefix = StepPrefix(m.name, m.step);
  for (const auto& o : m.objects) {
    if (o.name.rfind(step_prefix, 0) != 0) {
      return Status::InvalidArgument("manifest " + object + " names " + o.name +
                                     " of another step: only a part written in full has peer replicas");
    }
  }
  return m;
}

// Checks `data` against every chunk `chunks` says object `o` holds.
Status CheckReceivedObject(const DataObjectRef& o, std::string_view data, const std::vector<ChunkRef>& chunks) {
  if (data.size() != o.size) {
    return Status::Corruption("replica of " + o.name + ": " + std::to_string(data.size()) + " bytes received, " +
                              std::to_string(o.size) + " expected");
  }
  for (const ChunkRef& c : chunks) {
    if (c.offset + c.length > data.size() || Crc32c(data.data() + c.offset, c.length) != c.crc32c) {
      return Status::Corruption("replica of " + o.name + ": the chunk at offset " + std::to_string(c.offset) +
                                " fails its checksum");
    }
  }
  return Status::OK();
}

Status WriteObjects(Backend& backend, const Manifest& m, const std::vector<std::string_view>& objects,
                    uint64_t io_bytes) {
  WriteQueueOptions options;
  options.buffer_bytes = std::max<uint64_t>(io_bytes, 4096);
  WriteQueue queue(backend, options);
  for (size_t i = 0; i < m.objects.size(); ++i) {
    const DataObjectRef& o = m.objects[i];
    Status removed = backend.Remove(o.name);  // a left-over of an earlier try
    if (!removed.ok() && !removed.IsNotFound()) return removed;
    RETURN_IF_ERROR(queue.BeginObject(o.name, o.size));
    std::string_view left = objects[i];
    while (!left.empty()) {
      ASSIGN_OR_RETURN(auto space, queue.Space());
      const size_t n = std::min(left.size(), space.second);
      std::memcpy(space.first, left.data(), n);
      left.remove_prefix(n);
      RETURN_IF_ERROR(queue.Fill(n));
    }
    RETURN_IF_ERROR(queue.EndObject(o.size));
  }
  return queue.Finish();
}

}  // namespace

Result<PartForPeers> ReadPartForPeers(Backend& backend, const std::string& manifest_object) {
  PartForPeers part;
  ASSIGN_OR_RETURN(part.manifest_bytes, backend.ReadSmall(manifest_object));
  ASSIGN_OR_RETURN(part.manifest, DecodePartManifest(manifest_object, part.manifest_bytes));
  part.digest = DigestOf(manifest_object, part.manifest_bytes, part.manifest);
  return part;
}

Status ReadPartObject(Backend& backend, const Manifest& m, size_t index, uint64_t io_bytes, char* out, size_t size) {
  if (index >= m.objects.size()) return Status::InvalidArgument("no data object " + std::to_string(index));
  const DataObjectRef& o = m.objects[index];
  if (size != o.size) {
    return Status::InvalidArgument("data object " + o.name + " holds " + std::to_string(o.size) + " bytes, not " +
                                   std::to_string(size));
  }
  const std::vector<ChunkRef> chunks = ChunksPerObject(m)[index];
  std::vector<ChunkTask> tasks;
  for (const auto& c : chunks) tasks.push_back(ChunkTask{&c, 0, true});
  return ReadChunks(backend, o.name, tasks, io_bytes,
                    [&](const ChunkTask& t, const uint8_t* data, const std::string& problem) -> Status {
                      if (data == nullptr) {
                        return Status::Corruption(o.name + " at offset " + std::to_string(t.ref->offset) + ": " +
                                                  problem);
                      }
                      std::memcpy(out + t.ref->offset, data, t.ref->length);
                      return Status::OK();
                    });
}

Result<ReplicaWritten> WriteReplica(Backend& backend, const std::string& manifest_object,
                                    std::string_view manifest_bytes, const std::vector<std::string_view>& objects,
                                    uint64_t io_bytes) {
  ASSIGN_OR_RETURN(Manifest m, DecodePartManifest(manifest_object, manifest_bytes));
  if (objects.size() != m.objects.size()) {
    return Status::Corruption("replica of " + manifest_object + ": " + std::to_string(objects.size()) +
                              " data objects received, " + std::to_string(m.objects.size()) + " expected");
  }
  const auto chunks = ChunksPerObject(m);
  for (size_t i = 0; i < objects.size(); ++i) RETURN_IF_ERROR(CheckReceivedObject(m.objects[i], objects[i], chunks[i]));
  ReplicaWritten out;
  out.digest = DigestOf(manifest_object, manifest_bytes, m);
  auto there = backend.ReadSmall(manifest_object);
  if (there.ok() && *there == manifest_bytes) return out;  // held already (a retry, or a shared store)
  StepCommitOptions options;
  options.rank = m.rank;
  options.world = m.world;
  auto writer = StepCommit::Begin(backend, {m.name, m.step}, m.writer_id, options);
  if (!writer.ok()) return writer.status().WithContext("replica of " + manifest_object);
  Status written = WriteObjects(backend, m, objects, io_bytes);
  if (written.ok()) {
    written = backend.PublishIfAbsent(manifest_object, manifest_bytes);
    if (written.IsAlreadyExists()) {
      written = Status::AlreadyExists("replica of " + manifest_object + ": another manifest is there");
    }
  }
  if (!written.ok()) return written.WithContext("replica of " + manifest_object + " in " + backend.uri());
  out.writer = std::move(writer).value();
  return out;
}

Result<PeerCommitRecord> ReadPeerCommit(Backend& backend, std::string_view name, uint64_t step) {
  const std::string object = PeerCommitObject(name, step);
  ASSIGN_OR_RETURN(std::string bytes, backend.ReadSmall(object));
  ASSIGN_OR_RETURN(PeerCommitRecord r, DecodePeerCommitRecord(bytes, "peer commit " + object));
  if (r.commit.name != name || r.commit.step != step) {
    return Status::Corruption("peer commit " + object + " describes " + CheckpointLabel(r.commit.name, r.commit.step));
  }
  return r;
}

Result<std::optional<uint64_t>> NewestPeerCommittedStep(Backend& backend, std::string_view name) {
  auto steps = StepsOfName(backend, name);
  if (!steps.ok()) return steps.status().IsNotFound() ? std::optional<uint64_t>() : Result<std::optional<uint64_t>>(steps.status());
  if (!*steps) return std::optional<uint64_t>();
  for (uint64_t step : **steps) {  // newest first
    ASSIGN_OR_RETURN(auto found, backend.Stat({PeerCommitObject(name, step)}));
    if (!found.empty()) return std::optional<uint64_t>(step);
  }
  return std::optional<uint64_t>();
}

Result<std::vector<uint32_t>> RanksHeld(Backend& backend, const PeerCommitRecord& record) {
  std::vector<std::string> names;
  for (const auto& r : record.commit.ranks) names.push_back(r.manifest);
  ASSIGN_OR_RETURN(auto found, backend.Stat(names));
  std::vector<uint32_t> held;
  for (const auto& r : record.commit.ranks) {
    for (const auto& o : found) {
      if (o.name == r.manifest && o.size == r.manifest_bytes) {
        held.push_back(r.rank);
        break;
      }
    }
  }
  return held;
}

}  // namespace sluice
