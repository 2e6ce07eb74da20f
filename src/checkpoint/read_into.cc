// CheckpointReader::ReadInto: a restore into memory, with the destinations'
// page faults taken off the read path.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "sluice/store.h"

namespace sluice {
namespace {

// Touches every page of the fresh destinations, thread `t` of `threads`
// taking every threads-th 2 MiB, in the order listed (the order the caller
// expects the reads in), until `stop`. The touch is an atomic or-with-zero:
// it writes nothing visible, even to a byte the reader has already copied.
void FaultIn(const std::vector<ItemDestination>& dests, unsigned t, unsigned threads,
             const std::atomic<bool>& stop) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (const ItemDestination& d : dests) {
    if (!d.fresh) continue;
    const uintptr_t first = reinterpret_cast<uintptr_t>(d.address);
    const uintptr_t end = first + d.size;
    for (uintptr_t p = first; p < end; p = (p | (page - 1)) + 1) {
      if (((p >> 21) % threads) != t) continue;
      if (stop.load(std::memory_order_relaxed)) return;
      __atomic_fetch_or(reinterpret_cast<uint8_t*>(p), uint8_t{0}, __ATOMIC_RELAXED);
    }
  }
}

}  // namespace

Status CheckpointReader::ReadInto(std::optional<uint32_t> rank,
                                  const std::vector<ItemDestination>& destinations,
                                  const ReadIntoOptions& options) {
  const std::string label = CheckpointLabel(info().name, info().step);
  std::unordered_map<std::string_view, const ItemInfo*> items;
  for (const ItemInfo& item : this->items()) {
    if (!rank || item.rank == *rank) items.emplace(item.key, &item);
  }
  std::unordered_map<std::string_view, uint8_t*> address_of;
  bool any_fresh = false;
  for (const ItemDestination& d : destinations) {
    auto found = items.find(d.key);
    if (found == items.end()) {
      return Status::NotFound(label + ": no item '" + d.key + "'" +
                              (rank ? " of rank " + std::to_string(*rank) : ""));
    }
    if (found->second->size != d.size) {
      return Status::InvalidArgument(label + ": item '" + d.key + "' has " +
                                     std::to_string(found->second->size) +
                                     " bytes, its destination " + std::to_string(d.size));
    }
    if (d.address == nullptr && d.size != 0) {
      return Status::InvalidArgument(label + ": item '" + d.key + "' has no destination address");
    }
    if (!address_of.emplace(d.key, static_cast<uint8_t*>(d.address)).second) {
      return Status::InvalidArgument(label + ": item '" + d.key + "' is listed twice");
    }
    any_fresh |= d.fresh && d.size != 0;
  }

  // Measured (2.25 GiB into new tensors, 2 cores): 4.5 s with no faulting
  // ahead, 2.1 s with two threads doing it.
  const unsigned faulters = any_fresh ? options.prefault_threads : 0;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < faulters; ++t) {
    threads.emplace_back([&, t] { FaultIn(destinations, t, faulters, stop); });
  }
  Status st = ReadAll(rank, [&](const ItemInfo& item, uint64_t offset, const void* data,
                                size_t len) -> Status {
    auto d = address_of.find(item.key);
    if (d != address_of.end() && len != 0) std::memcpy(d->second + offset, data, len);
    return Status::OK();
  });
  stop.store(true);
  for (auto& th : threads) th.join();
  return st;
}

}  // namespace sluice
