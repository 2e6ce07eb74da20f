// StagedImage's writer side: tier-0 writes from staging, checksums and
// content hashes, and the incremental path (staged_image.h).
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "engine/write_queue.h"
#include "io/content_hash.h"
#include "io/crc32c.h"
#include "pipeline/staged_image.h"

namespace sluice {
namespace {

// Checksum and hash in pieces small enough to stay in cache between the
// two passes over them.
constexpr size_t kHashPieceBytes = 256 << 10;

// Foreign (referenced) objects are numbered apart from this writer's own
// objects until the end, when they are appended after them.
constexpr uint32_t kForeignBit = 1u << 31;

}  // namespace

template <typename F>
void StagedImage::ForEachPiece(size_t k, F f) {
  const uint64_t S = arena_.slab_bytes();
  const ChunkPlan& cp = order_[k];
  const uint64_t length = chunks_[cp.item][cp.chunk].length;
  uint64_t pos = objects_[cp.object].first_slab * S + cp.offset;
  uint64_t left = length;
  while (left > 0) {
    const uint64_t slab = pos / S, in = pos % S, n = std::min(left, S - in);
    f(arena_.SlabOf(first_seq_ + slab) + in, static_cast<size_t>(n));
    pos += n;
    left -= n;
  }
}

Result<SaveStats> StagedImage::WriteAndCommit(RankWriter& writer, Backend& backend,
                                              TokenBucket* bucket, std::atomic<uint64_t>* written,
                                              Counter* written_total, CopyPool* hash_pool) {
  const uint64_t S = arena_.slab_bytes();
  std::vector<bool> released(slab_count_, false);
  auto release = [&](uint64_t slab) {
    if (released[slab]) return;
    released[slab] = true;
    arena_.Release(first_seq_ + slab);
  };
  // An image that fits the arena is written once the snapshot is complete:
  // starting earlier would only take CPU and memory bandwidth from the copy,
  // i.e. lengthen the stall. A larger one must stream.
  if (slab_count_ <= arena_.slab_count()) {
    std::unique_lock<std::mutex> lock(mu_);
    filled_cv_.wait(lock, [&] { return copy_finished_; });
  }
  // After the snapshot (when it is waited for): the lookup takes nothing
  // from the copy.
  Status error;
  std::optional<BaseIndex> base;
  // A base that cannot be looked up (a store error) only means writing in
  // full, which is always safe.
  if (auto found = writer.ReferenceBase(); found.ok()) base = std::move(found).value();
  // The changed chunks of a partly unchanged object are packed through the
  // queue's own buffers. Slabs held for a hedge are not free for the
  // snapshot: an image larger than the arena holds a quarter of it at most,
  // so that it still streams. The arena stays mapped until the losers of
  // hedges are done with it (~StagingArena), so they are not waited for.
  WriteQueue queue(backend, WriteQueueOptions{bucket, written, 0, [&](uint64_t seq) { release(seq - first_seq_); },
                                              base ? S : 0, nullptr, written_total,
                                              slab_count_ <= arena_.slab_count() ? 0 : arena_.bytes() / 4, true});

  // Waits until `slab` is filled, reaping finished writes meanwhile: a
  // snapshot larger than the arena is waiting for exactly those slabs.
  auto wait_filled = [&](uint64_t slab) -> Status {
    while (unfilled_[slab].load(std::memory_order_acquire) != 0 && queue.in_flight() > 0) {
      RETURN_IF_ERROR(queue.ReapOne());
    }
    if (WaitSlabFilled(slab)) return Status::OK();
    std::lock_guard<std::mutex> lock(mu_);
    return copy_status_.ok() ? Status::Unavailable("snapshot did not complete") : copy_status_;
  };

  ContentHasher hasher;  // the direct path's, chunk by chunk as slabs go out
  uint32_t own_objects = 0;                    // begun so far, in order
  std::vector<DataObjectRef> foreign;          // referenced objects of other steps
  std::map<std::string, uint32_t> foreign_of;  // name -> index in `foreign`
  uint64_t referenced_bytes = 0;
  // The object changed chunks are being packed into, if one is open.
  bool packed_open = false;
  uint32_t packed_index = 0;
  uint64_t packed_size = 0;
  auto end_packed = [&]() -> Status {
    if (!packed_open) return Status::OK();
    packed_open = false;
    return queue.EndObject(packed_size);
  };

  size_t next_chunk = 0;  // cursor into order_
  for (uint32_t o = 0; o < objects_.size() && error.ok(); ++o) {
    const ObjectPlan& plan = objects_[o];
    const uint64_t slabs = (plan.size + S - 1) / S;
    size_t end_chunk = next_chunk;
    while (end_chunk < order_.size() && order_[end_chunk].object == o) ++end_chunk;
    bool hashed = false;
    if (base && slabs <= arena_.slab_count()) {
      // Hash the whole object first, then decide how to write it.
      for (uint64_t j = 0; j < slabs && error.ok(); ++j) error = wait_filled(plan.first_slab + j);
      if (!error.ok()) break;
      std::vector<const ChunkRef*> match(end_chunk - next_chunk, nullptr);
      // Each chunk on its own: hashed, looked up, and for a hit its CRC
      // compared, so a hash collision is caught here, not after a restore.
      auto judge = [&](size_t i) {
        const size_t k = next_chunk + i;
        ContentHasher h;
        ForEachPiece(k, [&](const uint8_t* p, size_t n) { h.Update(p, n); });
        ChunkRef& ref = chunks_[order_[k].item][order_[k].chunk];
        ref.hash = h.Digest();
        ref.has_hash = true;
        const ChunkRef* theirs = base->Find(ref.hash, ref.length);
        if (theirs == nullptr) return;
        uint32_t crc = 0;
        ForEachPiece(k, [&](const uint8_t* p, size_t n) { crc = Crc32cExtend(crc, p, n); });
        if (crc == theirs->crc32c) match[i] = theirs;
      };
      if (hash_pool != nullptr) {
        hash_pool->Run(match.size(), judge);
      } else {
        for (size_t i = 0; i < match.size(); ++i) judge(i);
      }
      const bool any = std::any_of(match.begin(), match.end(), [](const ChunkRef* m) { return m != nullptr; });
      hashed = true;
      if (any) {
        for (size_t k = next_chunk; k < end_chunk && error.ok(); ++k) {
          ChunkRef& ref = chunks_[order_[k].item][order_[k].chunk];
          if (const ChunkRef* theirs = match[k - next_chunk]) {
            const DataObjectRef& obj = base->objects()[theirs->object];
            auto [it, fresh] = foreign_of.emplace(obj.name, static_cast<uint32_t>(foreign.size()));
            if (fresh) foreign.push_back(obj);
            ref.object = kForeignBit | it->second;
            ref.offset = theirs->offset;
            ref.crc32c = theirs->crc32c;
            referenced_bytes += ref.length;
            continue;
          }
          if (packed_open && packed_size + ref.length > object_bytes_) error = end_packed();
          if (error.ok() && !packed_open) {
            error = queue.BeginObject(writer.DataObjectName(own_objects), 0, /*placed=*/true);
            packed_open = true;
            packed_index = own_objects++;
            packed_size = 0;
          }
          uint32_t crc = 0;
          ForEachPiece(k, [&](const uint8_t* p, size_t n) {
            while (n > 0 && error.ok()) {
              auto space = queue.Space();
              if (!space.ok()) {
                error = space.status();
                return;
              }
              const size_t take = std::min(n, space->second);
              std::memcpy(space->first, p, take);
              crc = queue.Checksum(crc, space->first, take);
              error = queue.Fill(take);
              p += take;
              n -= take;
            }
          });
          ref.crc32c = crc;
          ref.object = packed_index;
          ref.offset = packed_size;
          packed_size += ref.length;
        }
        // The object's bytes are referenced or copied: its slabs are free.
        for (uint64_t j = 0; j < slabs; ++j) release(plan.first_slab + j);
        next_chunk = end_chunk;
        continue;
      }
    }
    // Written as planned, straight from staging.
    if (error.ok()) error = end_packed();
    if (!error.ok()) break;
    const uint32_t index = own_objects++;
    error = queue.BeginObject(writer.DataObjectName(index), AlignUp(plan.size, align_), /*placed=*/true);
    uint32_t chunk_done = 0;  // bytes of order_[next_chunk] already checksummed
    for (uint64_t j = 0; j < slabs && error.ok(); ++j) {
      const uint64_t slab = plan.first_slab + j;
      error = wait_filled(slab);
      if (!error.ok()) break;
      uint8_t* p = arena_.SlabOf(first_seq_ + slab);
      const uint64_t logical = std::min(S, plan.size - j * S);
      // Checksum (and hash) the chunks, or the parts of them, this slab holds.
      const uint64_t begin = j * S, end = begin + logical;
      while (next_chunk < end_chunk) {
        ChunkRef& ref = chunks_[order_[next_chunk].item][order_[next_chunk].chunk];
        const uint64_t cpos = order_[next_chunk].offset + chunk_done;
        if (cpos >= end) break;
        if (chunk_done == 0 && !hashed) hasher.Reset();
        uint64_t n = std::min<uint64_t>(ref.length - chunk_done, end - cpos);
        const uint8_t* at = p + (cpos - begin);
        while (n > 0) {
          const size_t piece = static_cast<size_t>(std::min<uint64_t>(n, kHashPieceBytes));
          ref.crc32c = queue.Checksum(ref.crc32c, at, piece);
          if (!hashed) hasher.Update(at, piece);
          at += piece;
          n -= piece;
          chunk_done += static_cast<uint32_t>(piece);
        }
        if (chunk_done == ref.length) {
          if (!hashed) {
            ref.hash = hasher.Digest();
            ref.has_hash = true;
          }
          ref.object = index;
          ++next_chunk;
          chunk_done = 0;
        }
      }
      error = queue.Write(j * S, p, static_cast<size_t>(logical), first_seq_ + slab, j + 1 == slabs);
    }
    if (error.ok()) error = queue.EndObject(plan.size);
  }
  if (error.ok()) error = end_packed();
  if (error.ok()) error = queue.Finish();

  if (!error.ok()) {
    Fail(error);
    const bool quiet = queue.WaitOut();
    // Stop the copy, then hand every slab not yet released back to the arena
    // (the copy threads may still be inside one until CopyIn returns).
    std::unique_lock<std::mutex> lock(mu_);
    filled_cv_.wait(lock, [&] { return copy_finished_; });
    lock.unlock();
    // A writer that cannot reap its own writes leaves those slabs pinned:
    // reusing them would let the kernel write into bytes of the next image.
    if (quiet) {
      for (uint64_t s = 0; s < slab_count_; ++s) release(s);
    }
    writer.Abandon(error);  // the other ranks stop waiting for this one
    return error;
  }
  for (uint64_t s = 0; s < slab_count_; ++s) release(s);
  // The copy must have finished too (every slab was filled).
  {
    std::unique_lock<std::mutex> lock(mu_);
    filled_cv_.wait(lock, [&] { return copy_finished_; });
  }
  std::vector<DataObjectRef> refs = queue.objects();
  const uint32_t own = static_cast<uint32_t>(refs.size());
  refs.insert(refs.end(), foreign.begin(), foreign.end());
  std::vector<ManifestItem> items;
  items.reserve(items_.size());
  for (size_t i = 0; i < items_.size(); ++i) {
    for (ChunkRef& c : chunks_[i]) {
      if (c.object & kForeignBit) c.object = own + (c.object & ~kForeignBit);
    }
    items.push_back(ManifestItem{std::move(items_[i].key), std::move(items_[i].metadata),
                                 items_[i].size, std::move(chunks_[i])});
  }
  ASSIGN_OR_RETURN(SaveStats stats, writer.CommitWritten(std::move(items), std::move(refs)));
  if (referenced_bytes > 0) {
    stats.referenced_bytes = referenced_bytes;
    stats.base_step = base->step();
  }
  return stats;
}

}  // namespace sluice
