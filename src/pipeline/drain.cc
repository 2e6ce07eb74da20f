#include "pipeline/drain.h"

#include <algorithm>
#include <cstring>
#include <deque>

#include "format/layout.h"
#include "io/aligned_buffer.h"
#include "io/crc32c.h"
#include "pipeline/catalog.h"
#include "pipeline/checkpoint_reader.h"
#include "pipeline/writer_registry.h"

namespace sluice {
namespace {

std::string Label(const std::string& name, uint64_t step) {
  return "checkpoint " + name + "@" + std::to_string(step);
}

bool Stopped(const CopyControl& c) { return c.stop != nullptr && c.stop->load(); }

}  // namespace

std::vector<std::vector<ChunkRef>> ChunksPerObject(const Manifest& m) {
  std::vector<std::vector<ChunkRef>> out(m.objects.size());
  for (const auto& it : m.items) {
    for (const auto& c : it.chunks) out[c.object].push_back(c);
  }
  for (auto& v : out) {
    std::sort(v.begin(), v.end(), [](const ChunkRef& a, const ChunkRef& b) { return a.offset < b.offset; });
  }
  return out;
}

Status CopyObject(Backend& src, Backend& dst, const std::string& name, uint64_t size,
                  const std::vector<ChunkRef>& chunks, const CopyControl& control) {
  const std::string what = "copy " + name + " from " + src.uri() + " to " + dst.uri();
  ASSIGN_OR_RETURN(auto in, src.Open(name));
  if (in->size() < size) {
    return Status::Corruption(what + ": source object holds " + std::to_string(in->size()) +
                              " bytes, " + std::to_string(size) + " expected");
  }
  if (size > dst.caps().max_object_bytes) {
    return Status::NotSupported(what + ": the object's " + std::to_string(size) +
                                " bytes exceed the destination's maximum object size of " +
                                std::to_string(dst.caps().max_object_bytes));
  }
  Status removed = dst.Remove(name);
  if (!removed.ok() && !removed.IsNotFound()) return removed.WithContext(what);
  const size_t dst_align = std::max<size_t>(dst.caps().io_alignment, 1);
  const size_t src_align = std::max<size_t>(src.caps().io_alignment, 1);
  const uint64_t io = AlignUp(std::max<uint64_t>(control.io_bytes, 4096),
                              std::max<uint64_t>(std::max(dst_align, src_align), 4096));
  ASSIGN_OR_RETURN(auto out, dst.Create(name, AlignUp(size, dst_align)));

  size_t depth = std::min(in->queue_depth(), out->queue_depth());
  if (control.bucket != nullptr && control.bucket->max_concurrent() > 0) {
    depth = std::min<size_t>(depth, control.bucket->max_concurrent());
  }
  depth = std::max<size_t>(depth, 1);
  const uint64_t extents = (size + io - 1) / io;
  std::vector<AlignedBuffer> bufs;
  for (size_t i = 0; i < std::min<uint64_t>(depth, std::max<uint64_t>(extents, 1)); ++i) {
    ASSIGN_OR_RETURN(AlignedBuffer b, BufferPool::Take(static_cast<size_t>(io)));
    bufs.push_back(std::move(b));
  }
  struct Slot {
    int64_t extent = -1;  // extent held, -1 when free
    bool ready = false;   // read completed
    size_t got = 0;
  };
  std::vector<Slot> slots(bufs.size());
  std::deque<size_t> free_slots;
  for (size_t i = 0; i < slots.size(); ++i) free_slots.push_back(i);
  std::vector<int64_t> slot_of(extents, -1);

  uint64_t next_read = 0, next_write = 0;
  size_t chunk = 0;
  uint32_t chunk_crc = 0;
  uint64_t chunk_done = 0;
  Status error;

  auto reap_read = [&]() {
    auto c = in->Reap();
    if (!c.ok()) { error = c.status(); return; }
    Slot& s = slots[c->tag];
    if (!c->status.ok()) { error = c->status.WithContext(what); return; }
    s.ready = true;
    s.got = c->bytes;
  };
  auto reap_write = [&]() {
    auto c = out->Reap();
    if (!c.ok()) { error = c.status(); return; }
    if (control.bucket != nullptr) control.bucket->Release();
    if (!c->status.ok()) { error = c->status.WithContext(what); return; }
    if (control.written != nullptr) control.written->fetch_add(c->bytes);
    slots[c->tag].extent = -1;
    free_slots.push_back(c->tag);
  };

  while (error.ok() && next_write < extents) {
    if (Stopped(control)) { error = Status::Unavailable(what + ": stopped"); break; }
    // Keep reads in flight ahead of the writes.
    while (next_read < extents && !free_slots.empty() && in->in_flight() < in->queue_depth()) {
      size_t si = free_slots.front();
      free_slots.pop_front();
      slots[si] = Slot{static_cast<int64_t>(next_read), false, 0};
      slot_of[next_read] = static_cast<int64_t>(si);
      Status st = in->StartRead(next_read * io, bufs[si].data(), static_cast<size_t>(io), si);
      if (!st.ok()) { error = st.WithContext(what); break; }
      ++next_read;
    }
    if (!error.ok()) break;
    int64_t si = slot_of[next_write];
    if (si >= 0 && slots[si].ready) {
      Slot& s = slots[si];
      uint8_t* p = bufs[si].data();
      const uint64_t begin = next_write * io;
      const uint64_t logical = std::min(io, size - begin);
      if (s.got < logical) {
        error = Status::Corruption(what + ": source object ends at " + std::to_string(begin + s.got) +
                                   ", " + std::to_string(size) + " expected");
        break;
      }
      // Verify every chunk as its last byte passes: a bad source copy must
      // never become a good-looking copy on the next tier.
      const uint64_t end = begin + logical;
      while (chunk < chunks.size()) {
        const ChunkRef& ref = chunks[chunk];
        uint64_t cpos = ref.offset + chunk_done;
        if (cpos >= end) break;
        if (cpos < begin) {  // a gap or overlap the manifest does not allow
          error = Status::Corruption(what + ": chunk at offset " + std::to_string(ref.offset) +
                                     " out of order");
          break;
        }
        uint64_t n = std::min<uint64_t>(ref.length - chunk_done, end - cpos);
        chunk_crc = out->ChecksumForWrite(chunk_crc, p + (cpos - begin), static_cast<size_t>(n));
        chunk_done += n;
        if (chunk_done == ref.length) {
          if (chunk_crc != ref.crc32c) {
            error = Status::Corruption(what + ": chunk at offset " + std::to_string(ref.offset) +
                                       " length " + std::to_string(ref.length) +
                                       " fails its checksum in the source copy");
            break;
          }
          ++chunk;
          chunk_crc = 0;
          chunk_done = 0;
        }
      }
      if (!error.ok()) break;
      size_t len = static_cast<size_t>(logical);
      if (next_write + 1 == extents) {
        len = static_cast<size_t>(AlignUp(logical, dst_align));
        std::memset(p + logical, 0, len - logical);
      }
      while (out->in_flight() >= std::min(depth, out->queue_depth()) && error.ok()) reap_write();
      if (!error.ok()) break;
      if (control.bucket != nullptr) control.bucket->Acquire(len);
      Status st = out->StartWrite(begin, p, len, static_cast<uint64_t>(si));
      if (!st.ok()) {
        if (control.bucket != nullptr) control.bucket->Release();
        error = st.WithContext(what);
        break;
      }
      s.ready = false;
      ++next_write;
      continue;
    }
    if (in->in_flight() > 0) {
      reap_read();
    } else if (out->in_flight() > 0) {
      reap_write();
    } else {
      error = Status::IOError(what + ": internal: nothing in flight");
    }
  }
  while (in->in_flight() > 0) {
    auto c = in->Reap();
    if (!c.ok()) break;
  }
  while (out->in_flight() > 0) {
    if (error.ok()) {
      reap_write();
      continue;
    }
    auto c = out->Reap();
    if (!c.ok()) break;
    if (control.bucket != nullptr) control.bucket->Release();
  }
  if (error.ok() && chunk != chunks.size()) {
    error = Status::Corruption(what + ": chunks run past the object's end");
  }
  if (error.ok()) error = out->Finish(size).WithContext(what);
  if (in->in_flight() == 0 && out->in_flight() == 0) {
    for (auto& b : bufs) BufferPool::Give(std::move(b));
  }
  return error;
}

Status DrainCheckpoint(Backend& src, Backend& dst, const std::string& name, uint64_t step,
                       const CopyControl& control) {
  const std::string label = Label(name, step) + ": drain from " + src.uri() + " to " + dst.uri();
  if (!dst.caps().atomic_publish_if_absent) {
    return Status::NotSupported(label + ": the destination cannot publish atomically");
  }
  ASSIGN_OR_RETURN(LoadedCheckpoint loaded, LoadCheckpoint(src, name, step));
  const std::string commit = CommitObject(name, step);
  ASSIGN_OR_RETURN(std::string commit_bytes, src.ReadSmall(commit));
  auto already = dst.ReadSmall(commit);
  if (already.ok()) {
    if (*already == commit_bytes) return Status::OK();
    return Status::AlreadyExists(label + ": the destination holds a different commit of this step");
  }
  if (!already.status().IsNotFound()) return already.status().WithContext(label);
  for (const auto& m : loaded.manifests) {
    for (const auto& o : m.objects) {
      if (o.size > dst.caps().max_object_bytes) {
        return Status::NotSupported(label + ": data object " + o.name + " (" +
                                    std::to_string(o.size) +
                                    " bytes) is larger than the destination's maximum object size");
      }
    }
  }
  // Claim the destination step: gc and rm there leave it alone, and another
  // drainer backs off.
  if (AnyLiveWriter(dst, name, step)) {
    return Status::Unavailable(label + ": another save or drain of this step is running there");
  }
  const std::string writer_id = NewWriterId();
  RETURN_IF_ERROR(AcquireWriterLock(dst, name, step, writer_id).WithContext(label));
  struct ReleaseOnReturn {
    Backend& b;
    const std::string& n;
    uint64_t s;
    const std::string& w;
    ~ReleaseOnReturn() { ReleaseWriterLock(b, n, s, w); }
  } release{dst, name, step, writer_id};

  for (const auto& m : loaded.manifests) {
    auto chunks = ChunksPerObject(m);
    for (size_t o = 0; o < m.objects.size(); ++o) {
      if (Stopped(control)) return Status::Unavailable(label + ": stopped");
      RETURN_IF_ERROR(CopyObject(src, dst, m.objects[o].name, m.objects[o].size, chunks[o], control)
                          .WithContext(Label(name, step)));
    }
  }
  for (const auto& r : loaded.commit.ranks) {
    ASSIGN_OR_RETURN(std::string bytes, src.ReadSmall(r.manifest));
    Status st = dst.PublishIfAbsent(r.manifest, bytes);
    if (st.IsAlreadyExists()) {
      auto there = dst.ReadSmall(r.manifest);
      if (!there.ok() || *there != bytes) {
        return Status::Corruption(label + ": manifest " + r.manifest +
                                  " exists there with other contents");
      }
    } else {
      RETURN_IF_ERROR(st.WithContext(label));
    }
  }
  // Every object the commit reaches must be there, whole, before it is.
  // (Stat of the named objects, not a List: on RADOS that walks the pool.)
  std::vector<std::string> named;
  for (const auto& m : loaded.manifests) {
    for (const auto& o : m.objects) named.push_back(o.name);
  }
  ASSIGN_OR_RETURN(auto listed, dst.Stat(named));
  std::map<std::string, uint64_t> present;
  for (const auto& o : listed) present[o.name] = o.size;
  for (const auto& m : loaded.manifests) {
    for (const auto& o : m.objects) {
      auto it = present.find(o.name);
      if (it == present.end() || it->second < o.size) {
        return Status::IOError(label + ": " + o.name + " is missing or short after the copy");
      }
    }
  }
  Status st = dst.PublishIfAbsent(commit, commit_bytes);
  if (st.IsAlreadyExists()) {
    auto there = dst.ReadSmall(commit);
    if (there.ok() && *there == commit_bytes) return Status::OK();
    return Status::AlreadyExists(label + ": another commit of this step won");
  }
  return st.WithContext(label + ": publish commit record");
}

void WriteDrainNote(Backend& src, const std::string& name, uint64_t step, const std::string& dst_uri,
                    const std::string& reason) {
  const std::string obj = DrainNoteObject(name, step, dst_uri);
  std::string body = dst_uri + "\n" + reason;
  if (body.size() > 4096) body.resize(4096);
  (void)src.Remove(obj);
  (void)src.PublishIfAbsent(obj, body);
}

void ClearDrainNote(Backend& src, const std::string& name, uint64_t step, const std::string& dst_uri) {
  (void)src.Remove(DrainNoteObject(name, step, dst_uri));
}

std::string ReadDrainNote(Backend& src, const std::string& name, uint64_t step,
                          const std::string& dst_uri) {
  auto body = src.ReadSmall(DrainNoteObject(name, step, dst_uri));
  if (!body.ok()) return "";
  size_t nl = body->find('\n');
  // The note names its tier: a hash collision or a stale note of another
  // URI is ignored.
  if (nl == std::string::npos || body->substr(0, nl) != dst_uri) return "";
  std::string reason = body->substr(nl + 1);
  return reason.empty() ? "drain failed" : reason;
}

std::vector<TierPlan> PlanTiers(const std::vector<std::set<uint64_t>>& committed,
                                const std::vector<uint32_t>& keep_last) {
  const size_t n = committed.size();
  std::vector<TierPlan> plans(n);
  std::set<uint64_t> seen;  // committed on this tier or an earlier one
  for (size_t k = 0; k < n; ++k) {
    seen.insert(committed[k].begin(), committed[k].end());
    TierPlan& p = plans[k];
    uint32_t keep = k < keep_last.size() ? keep_last[k] : 0;
    for (auto it = seen.rbegin(); it != seen.rend(); ++it) {
      if (keep != 0 && p.keep.size() >= keep) break;
      p.keep.insert(*it);
    }
    for (uint64_t s : p.keep) {
      if (k > 0 && !committed[k].count(s)) p.to_drain.insert(s);
    }
  }
  for (size_t k = 0; k < n; ++k) {
    TierPlan& p = plans[k];
    for (uint64_t s : committed[k]) {
      if (p.keep.count(s)) continue;
      // Never the only copy: a step leaves a tier once a later tier has it,
      // or once no later tier's retention wants it either (the last tier's
      // keep_last is final).
      bool later = true;
      for (size_t j = k + 1; j < n; ++j) {
        if (plans[j].keep.count(s) && !committed[j].count(s)) later = false;
      }
      if (later) p.to_remove.insert(s);
    }
  }
  return plans;
}

}  // namespace sluice
