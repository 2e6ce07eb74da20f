#include "bench_ranks.h"

#include <fcntl.h>

#include "item_sources.h"
#include "output.h"

namespace sluice::cli {

// One rank's save of checkpoint `step`, through the path `sluice save`
// runs: its pipeline (opened once per rank, staging faulted at open, as a
// training job keeps one) snapshots the items into staging while the tier-0
// writer streams them out, and the save is timed until it is committed.
RankTiming SaveRank(Pipeline& pipeline, const std::string& name, uint64_t step, uint32_t rank,
                    uint32_t world, const std::vector<uint64_t>& sizes, RankMeter* meter) {
  RankTiming t;
  auto t0 = std::chrono::steady_clock::now();
  auto pending = pipeline.Begin({name, step}, rank, world);
  Status st = pending.status();
  std::vector<std::unique_ptr<SyntheticSource>> sources;
  if (st.ok()) {
    char key[64];
    for (size_t i = 0; i < sizes.size() && st.ok(); ++i) {
      snprintf(key, sizeof key, "rank%u/tensor-%04zu", rank, i);
      sources.push_back(std::make_unique<SyntheticSource>(step * 7919 + rank * 104729 + i, sizes[i]));
      st = (*pending)->AddItem(key, "", sizes[i], *sources.back());
      t.bytes += sizes[i];
    }
  }
  if (st.ok()) {
    auto handle = (*pending)->Snapshot();
    if (handle.ok() && meter != nullptr) meter->Started(*handle);
    st = handle.ok() ? (*handle)->WaitTier(0) : handle.status();
    if (meter != nullptr) meter->Finished();
  }
  t.seconds = SecondsSince(t0);
  if (!st.ok()) {
    Fail(st.WithContext("bench rank " + std::to_string(rank)));
    t.failed = 1;
  }
  return t;
}

// One rank's restore of checkpoint `step` into memory through its pipeline's
// reader, every chunk verified.
RankTiming ReadRank(Pipeline& pipeline, RestoreTarget& target, const std::string& name,
                    uint64_t step, uint32_t rank) {
  RankTiming t;
  auto t0 = std::chrono::steady_clock::now();
  auto r = pipeline.OpenCheckpoint(name, step, nullptr);
  Status st = r.status();
  if (st.ok()) {
    auto dests = target.Place((*r)->items(), rank);
    st = dests.status();
    if (st.ok()) st = (*r)->ReadInto(rank, *dests);
    if (st.ok()) {
      for (const auto& d : *dests) t.bytes += d.size;
    }
  }
  t.seconds = SecondsSince(t0);
  if (!st.ok()) {
    Fail(st.WithContext("bench read rank " + std::to_string(rank)));
    t.failed = 1;
  }
  return t;
}

bool DropCaches() {
  sync();
  int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0) return false;
  bool ok = write(fd, "3", 1) == 1;
  close(fd);
  return ok;
}

}  // namespace sluice::cli
