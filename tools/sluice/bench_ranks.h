// The ranks of `sluice bench`'s write/read workload: each rank's save and
// read through its own pipeline, run together as threads or processes.
#ifndef SLUICE_TOOLS_SLUICE_BENCH_RANKS_H_
#define SLUICE_TOOLS_SLUICE_BENCH_RANKS_H_

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "output.h"
#include "sluice/pipeline.h"

namespace sluice::cli {

struct RankTiming {
  double seconds = 0;
  uint64_t bytes = 0;
  int failed = 0;  // 0 ok; else an error message was printed
};

// A rank's bytes written to tier 0 so far, for --report's sampler: earlier
// saves' totals plus the running save's live count.
struct RankMeter {
  std::mutex mu;
  std::shared_ptr<SaveHandle> current;
  uint64_t done = 0;
  uint64_t Written() {
    std::lock_guard<std::mutex> lock(mu);
    uint64_t b = done;
    if (current) {
      auto progress = current->progress();
      if (!progress.empty()) b += progress[0].bytes_written;
    }
    return b;
  }
  void Started(std::shared_ptr<SaveHandle> h) {
    std::lock_guard<std::mutex> lock(mu);
    current = std::move(h);
  }
  void Finished() {
    std::lock_guard<std::mutex> lock(mu);
    if (current) {
      auto progress = current->progress();
      if (!progress.empty()) done += progress[0].bytes_written;
    }
    current.reset();
  }
};

// The memory a rank restores its state into, as a trainer's tensors are:
// mapped once, untouched until the first restore (which ReadInto faults in
// ahead of the reads), overwritten in place by later ones. At most 1 GiB
// (or the largest item) per rank: items past that share it, which costs the
// same copies and keeps a large --size within memory.
class RestoreTarget {
 public:
  ~RestoreTarget() {
    if (base_ != nullptr) ::munmap(base_, len_);
  }
  Result<std::vector<ItemDestination>> Place(const std::vector<ItemInfo>& items, uint32_t rank) {
    uint64_t total = 0, largest = 0;
    for (const auto& it : items) {
      if (it.rank != rank) continue;
      total += it.size;
      largest = std::max(largest, it.size);
    }
    const uint64_t want = std::max(largest, std::min<uint64_t>(total, 1ull << 30));
    if (want > len_) {
      if (base_ != nullptr) ::munmap(base_, len_);
      base_ = nullptr;
      len_ = 0;
      void* p = ::mmap(nullptr, std::max<uint64_t>(want, 1), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return Status::FromErrno(errno, "map " + HumanBytes(want) + " to restore into");
      base_ = static_cast<uint8_t*>(p);
      len_ = std::max<uint64_t>(want, 1);
      fresh_ = true;
    }
    std::vector<ItemDestination> dests;
    uint64_t pos = 0;
    for (const auto& it : items) {
      if (it.rank != rank) continue;
      if (pos + it.size > len_) pos = 0;
      dests.push_back({it.key, base_ + pos, it.size, fresh_});
      pos += it.size;
    }
    fresh_ = false;
    return dests;
  }

 private:
  uint8_t* base_ = nullptr;
  uint64_t len_ = 0;
  bool fresh_ = true;
};

// Runs fn(rank) for every rank concurrently, as threads or as processes, and
// collects each rank's timing.
template <typename F>
std::vector<RankTiming> RunRanks(uint32_t ranks, bool processes, F fn) {
  std::vector<RankTiming> out(ranks);
  if (!processes) {
    std::barrier start(static_cast<std::ptrdiff_t>(ranks));
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        start.arrive_and_wait();
        out[r] = fn(r);
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }
  // Processes: each child reports its RankTiming through a pipe. A second
  // pipe is the start barrier: children block reading it until the parent
  // closes it.
  int go[2];
  if (pipe(go) != 0) {
    for (auto& t : out) t.failed = 1;
    return out;
  }
  std::vector<std::pair<pid_t, int>> kids;
  std::fflush(nullptr);
  for (uint32_t r = 0; r < ranks; ++r) {
    int res[2];
    if (pipe(res) != 0) break;
    pid_t pid = fork();
    if (pid == 0) {
      close(go[1]);
      close(res[0]);
      char c;
      (void)!read(go[0], &c, 1);  // returns 0 when the parent closes it
      RankTiming t = fn(r);
      (void)!write(res[1], &t, sizeof t);
      _exit(t.failed ? 1 : 0);
    }
    close(res[1]);
    kids.push_back({pid, res[0]});
  }
  close(go[0]);
  close(go[1]);
  for (size_t r = 0; r < kids.size(); ++r) {
    RankTiming t;
    t.failed = 1;
    if (read(kids[r].second, &t, sizeof t) != static_cast<ssize_t>(sizeof t)) t.failed = 1;
    close(kids[r].second);
    int status = 0;
    waitpid(kids[r].first, &status, 0);
    out[r] = t;
  }
  for (size_t r = kids.size(); r < ranks; ++r) out[r].failed = 1;
  return out;
}

// One rank's save of checkpoint `step`, through the path `sluice save`
// runs: its pipeline (opened once per rank, staging faulted at open, as a
// training job keeps one) snapshots the items into staging while the tier-0
// writer streams them out, and the save is timed until it is committed.
RankTiming SaveRank(Pipeline& pipeline, const std::string& name, uint64_t step, uint32_t rank,
                    uint32_t world, const std::vector<uint64_t>& sizes, RankMeter* meter);

// One rank's restore of checkpoint `step` into memory through its pipeline's
// reader, every chunk verified.
RankTiming ReadRank(Pipeline& pipeline, RestoreTarget& target, const std::string& name,
                    uint64_t step, uint32_t rank);

// Drops the page cache (after a sync); false where it may not.
bool DropCaches();

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_BENCH_RANKS_H_
