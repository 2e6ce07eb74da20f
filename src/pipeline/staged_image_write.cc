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

// One WriteAndCommit: the write queue over staging, the incremental base,
// the objects begun so far, and the object changed chunks are packed into.
class StagedImage::Writing {
 public:
  Writing(StagedImage& image, RankWriter& writer, Backend& backend, TokenBucket* bucket,
          std::atomic<uint64_t>* written, Counter* written_total, CopyPool* hash_pool,
          std::optional<BaseIndex> base)
      : img_(image),
        writer_(writer),
        hash_pool_(hash_pool),
        base_(std::move(base)),
        released_(image.slab_count_, false),
        // The changed chunks of a partly unchanged object are packed through
        // the queue's own buffers. Slabs held for a hedge are not free for
        // the snapshot: an image larger than the arena holds a quarter of it
        // at most, so that it still streams. The arena stays mapped until
        // the losers of hedges are done with it (~StagingArena), so they are
        // not waited for.
        queue_(backend, WriteQueueOptions{bucket, written, 0,
                                          [this](uint64_t seq) { Release(seq - img_.first_seq_); },
                                          base_ ? image.arena_.slab_bytes() : 0, nullptr, written_total,
                                          image.slab_count_ <= image.arena_.slab_count() ? 0 : image.arena_.bytes() / 4,
                                          true}) {}

  // Writes every planned object: referencing what the base holds, packing
  // the changed chunks of a partly unchanged object, and writing the rest
  // straight from staging.
  Status WriteAll() {
    const uint64_t S = img_.arena_.slab_bytes();
    size_t next_chunk = 0;  // cursor into order_
    for (uint32_t o = 0; o < img_.objects_.size(); ++o) {
      const ObjectPlan& plan = img_.objects_[o];
      const uint64_t slabs = (plan.size + S - 1) / S;
      size_t end_chunk = next_chunk;
      while (end_chunk < img_.order_.size() && img_.order_[end_chunk].object == o) ++end_chunk;
      bool hashed = false;
      if (base_ && slabs <= img_.arena_.slab_count()) {
        std::vector<const ChunkRef*> match;
        RETURN_IF_ERROR(HashAgainstBase(plan, slabs, next_chunk, end_chunk, &match));
        hashed = true;
        if (std::any_of(match.begin(), match.end(), [](const ChunkRef* m) { return m != nullptr; })) {
          RETURN_IF_ERROR(ReferenceOrPack(next_chunk, end_chunk, match));
          // The object's bytes are referenced or copied: its slabs are free.
          for (uint64_t j = 0; j < slabs; ++j) Release(plan.first_slab + j);
          next_chunk = end_chunk;
          continue;
        }
      }
      RETURN_IF_ERROR(EndPacked());
      RETURN_IF_ERROR(WriteAsPlanned(plan, slabs, hashed, &next_chunk, end_chunk));
    }
    RETURN_IF_ERROR(EndPacked());
    return queue_.Finish();
  }

  // After a failure: stops the copy, and hands back every slab nobody reads.
  Status Fail(const Status& error) {
    img_.Fail(error);
    const bool quiet = queue_.WaitOut();
    // Stop the copy, then hand every slab not yet released back to the arena
    // (the copy threads may still be inside one until CopyIn returns).
    img_.WaitCopyFinished();
    // A writer that cannot reap its own writes leaves those slabs pinned:
    // reusing them would let the kernel write into bytes of the next image.
    if (quiet) {
      for (uint64_t s = 0; s < img_.slab_count_; ++s) Release(s);
    }
    writer_.Abandon(error);  // the other ranks stop waiting for this one
    return error;
  }

  // After WriteAll: the manifest, with referenced objects after this
  // writer's own, and the commit.
  Result<SaveStats> Commit() {
    for (uint64_t s = 0; s < img_.slab_count_; ++s) Release(s);
    img_.WaitCopyFinished();  // every slab was filled: the copy is done too
    std::vector<DataObjectRef> refs = queue_.objects();
    const uint32_t own = static_cast<uint32_t>(refs.size());
    refs.insert(refs.end(), foreign_.begin(), foreign_.end());
    std::vector<ManifestItem> items;
    items.reserve(img_.items_.size());
    for (size_t i = 0; i < img_.items_.size(); ++i) {
      for (ChunkRef& c : img_.chunks_[i]) {
        if (c.object & kForeignBit) c.object = own + (c.object & ~kForeignBit);
      }
      items.push_back(ManifestItem{std::move(img_.items_[i].key), std::move(img_.items_[i].metadata),
                                   img_.items_[i].size, std::move(img_.chunks_[i])});
    }
    ASSIGN_OR_RETURN(SaveStats stats, writer_.CommitWritten(std::move(items), std::move(refs)));
    if (referenced_bytes_ > 0) {
      stats.referenced_bytes = referenced_bytes_;
      stats.base_step = base_->step();
    }
    return stats;
  }

 private:
  void Release(uint64_t slab) {
    if (released_[slab]) return;
    released_[slab] = true;
    img_.arena_.Release(img_.first_seq_ + slab);
  }

  // Waits until `slab` is filled, reaping finished writes meanwhile: a
  // snapshot larger than the arena is waiting for exactly those slabs.
  Status WaitFilled(uint64_t slab) {
    while (img_.unfilled_[slab].load(std::memory_order_acquire) != 0 && queue_.in_flight() > 0) {
      RETURN_IF_ERROR(queue_.ReapOne());
    }
    if (img_.WaitSlabFilled(slab)) return Status::OK();
    std::lock_guard<std::mutex> lock(img_.mu_);
    return img_.copy_status_.ok() ? Status::Unavailable("snapshot did not complete") : img_.copy_status_;
  }

  Status EndPacked() {
    if (!packed_open_) return Status::OK();
    packed_open_ = false;
    return queue_.EndObject(packed_size_);
  }

  // Hashes the whole object (chunks [begin, end) of order_), each chunk on
  // its own: hashed, looked up, and for a hit its CRC compared, so a hash
  // collision is caught here, not after a restore. `match` gets the base's
  // chunk for each, or null.
  Status HashAgainstBase(const ObjectPlan& plan, uint64_t slabs, size_t begin, size_t end,
                         std::vector<const ChunkRef*>* match) {
    for (uint64_t j = 0; j < slabs; ++j) RETURN_IF_ERROR(WaitFilled(plan.first_slab + j));
    match->assign(end - begin, nullptr);
    auto judge = [&](size_t i) {
      const size_t k = begin + i;
      ContentHasher h;
      img_.ForEachPiece(k, [&](const uint8_t* p, size_t n) { h.Update(p, n); });
      ChunkRef& ref = img_.chunks_[img_.order_[k].item][img_.order_[k].chunk];
      ref.hash = h.Digest();
      ref.has_hash = true;
      const ChunkRef* theirs = base_->Find(ref.hash, ref.length);
      if (theirs == nullptr) return;
      uint32_t crc = 0;
      img_.ForEachPiece(k, [&](const uint8_t* p, size_t n) { crc = Crc32cExtend(crc, p, n); });
      if (crc == theirs->crc32c) (*match)[i] = theirs;
    };
    if (hash_pool_ != nullptr) {
      hash_pool_->Run(match->size(), judge);
    } else {
      for (size_t i = 0; i < match->size(); ++i) judge(i);
    }
    return Status::OK();
  }

  // Chunks [begin, end) of an object some of whose chunks the base holds:
  // those are referenced, the others packed into this writer's objects.
  Status ReferenceOrPack(size_t begin, size_t end, const std::vector<const ChunkRef*>& match) {
    for (size_t k = begin; k < end; ++k) {
      ChunkRef& ref = img_.chunks_[img_.order_[k].item][img_.order_[k].chunk];
      if (const ChunkRef* theirs = match[k - begin]) {
        const DataObjectRef& obj = base_->objects()[theirs->object];
        auto [it, fresh] = foreign_of_.emplace(obj.name, static_cast<uint32_t>(foreign_.size()));
        if (fresh) foreign_.push_back(obj);
        ref.object = kForeignBit | it->second;
        ref.offset = theirs->offset;
        ref.crc32c = theirs->crc32c;
        referenced_bytes_ += ref.length;
        continue;
      }
      if (packed_open_ && packed_size_ + ref.length > img_.object_bytes_) RETURN_IF_ERROR(EndPacked());
      if (!packed_open_) {
        RETURN_IF_ERROR(queue_.BeginObject(writer_.DataObjectName(own_objects_), 0, /*placed=*/true));
        packed_open_ = true;
        packed_index_ = own_objects_++;
        packed_size_ = 0;
      }
      uint32_t crc = 0;
      Status error;
      img_.ForEachPiece(k, [&](const uint8_t* p, size_t n) {
        while (n > 0 && error.ok()) {
          auto space = queue_.Space();
          if (!space.ok()) {
            error = space.status();
            return;
          }
          const size_t take = std::min(n, space->second);
          std::memcpy(space->first, p, take);
          crc = queue_.Checksum(crc, space->first, take);
          error = queue_.Fill(take);
          p += take;
          n -= take;
        }
      });
      RETURN_IF_ERROR(error);
      ref.crc32c = crc;
      ref.object = packed_index_;
      ref.offset = packed_size_;
      packed_size_ += ref.length;
    }
    return Status::OK();
  }

  // Writes the object straight from staging, checksumming (and, unless
  // `hashed` already, hashing) the chunks [*next, end) it holds as its slabs
  // go out.
  Status WriteAsPlanned(const ObjectPlan& plan, uint64_t slabs, bool hashed, size_t* next, size_t end) {
    const uint64_t S = img_.arena_.slab_bytes();
    const uint32_t index = own_objects_++;
    RETURN_IF_ERROR(queue_.BeginObject(writer_.DataObjectName(index), AlignUp(plan.size, img_.align_), /*placed=*/true));
    uint32_t chunk_done = 0;  // bytes of order_[*next] already checksummed
    for (uint64_t j = 0; j < slabs; ++j) {
      const uint64_t slab = plan.first_slab + j;
      RETURN_IF_ERROR(WaitFilled(slab));
      uint8_t* p = img_.arena_.SlabOf(img_.first_seq_ + slab);
      const uint64_t logical = std::min(S, plan.size - j * S);
      // Checksum (and hash) the chunks, or the parts of them, this slab holds.
      const uint64_t from = j * S, to = from + logical;
      while (*next < end) {
        ChunkRef& ref = img_.chunks_[img_.order_[*next].item][img_.order_[*next].chunk];
        const uint64_t cpos = img_.order_[*next].offset + chunk_done;
        if (cpos >= to) break;
        if (chunk_done == 0 && !hashed) hasher_.Reset();
        uint64_t n = std::min<uint64_t>(ref.length - chunk_done, to - cpos);
        const uint8_t* at = p + (cpos - from);
        while (n > 0) {
          const size_t piece = static_cast<size_t>(std::min<uint64_t>(n, kHashPieceBytes));
          ref.crc32c = queue_.Checksum(ref.crc32c, at, piece);
          if (!hashed) hasher_.Update(at, piece);
          at += piece;
          n -= piece;
          chunk_done += static_cast<uint32_t>(piece);
        }
        if (chunk_done == ref.length) {
          if (!hashed) {
            ref.hash = hasher_.Digest();
            ref.has_hash = true;
          }
          ref.object = index;
          ++*next;
          chunk_done = 0;
        }
      }
      RETURN_IF_ERROR(queue_.Write(j * S, p, static_cast<size_t>(logical), img_.first_seq_ + slab, j + 1 == slabs));
    }
    return queue_.EndObject(plan.size);
  }

  StagedImage& img_;
  RankWriter& writer_;
  CopyPool* hash_pool_;
  std::optional<BaseIndex> base_;
  std::vector<bool> released_;
  WriteQueue queue_;
  ContentHasher hasher_;  // the direct path's, chunk by chunk as slabs go out
  uint32_t own_objects_ = 0;                    // begun so far, in order
  std::vector<DataObjectRef> foreign_;          // referenced objects of other steps
  std::map<std::string, uint32_t> foreign_of_;  // name -> index in `foreign_`
  uint64_t referenced_bytes_ = 0;
  // The object changed chunks are being packed into, if one is open.
  bool packed_open_ = false;
  uint32_t packed_index_ = 0;
  uint64_t packed_size_ = 0;
};

Result<SaveStats> StagedImage::WriteAndCommit(RankWriter& writer, Backend& backend,
                                              TokenBucket* bucket, std::atomic<uint64_t>* written,
                                              Counter* written_total, CopyPool* hash_pool) {
  // An image that fits the arena is written once the snapshot is complete:
  // starting earlier would only take CPU and memory bandwidth from the copy,
  // i.e. lengthen the stall. A larger one must stream.
  if (slab_count_ <= arena_.slab_count()) WaitCopyFinished();
  // After the snapshot (when it is waited for): the lookup takes nothing
  // from the copy. A base that cannot be looked up (a store error) only
  // means writing in full, which is always safe.
  std::optional<BaseIndex> base;
  if (auto found = writer.ReferenceBase(); found.ok()) base = std::move(found).value();
  Writing writing(*this, writer, backend, bucket, written, written_total, hash_pool, std::move(base));
  Status error = writing.WriteAll();
  // A lazy snapshot commits only once its caller finished it.
  if (error.ok()) error = WaitFinished();
  if (!error.ok()) return writing.Fail(error);
  return writing.Commit();
}

void StagedImage::WaitCopyFinished() {
  std::unique_lock<std::mutex> lock(mu_);
  filled_cv_.wait(lock, [&] { return copy_finished_; });
}

}  // namespace sluice
