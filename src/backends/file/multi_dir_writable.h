// The writable of a multi-directory file store's data objects
// (multi_dir_backend.h): each is placed in the directory with the fewest
// objects being written, away from directories found slow, and, with
// hedging on, written again into another directory when its writes are
// late; the first copy that holds every byte is the one the caller records
// (WritableObject::StoredName), the others are removed.
//
// Internal to src/backends/file.
#ifndef SLUICE_BACKENDS_FILE_MULTI_DIR_WRITABLE_H_
#define SLUICE_BACKENDS_FILE_MULTI_DIR_WRITABLE_H_

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/file/file_directory.h"
#include "backends/hedge_state.h"
#include "io/aligned_buffer.h"
#include "io/io_engine.h"
#include "sluice/backend.h"

namespace sluice {

// Objects are at most this large, so that each is held in memory whole
// (a hedge writes it again) and no hedge rewrites more.
inline constexpr uint64_t kMultiDirMaxObjectBytes = 64ull << 20;

// Closes what a finished or abandoned object leaves with I/O still in
// flight (a hedge's loser on a slow device), off the writer's thread: the
// engine first (its destructor waits for the I/O), then the files and the
// memory the I/O used, then `on_closed`.
struct Leftover {
  std::unique_ptr<IoEngine> engine;
  std::vector<int> fds;
  std::vector<std::shared_ptr<AlignedBuffer>> memory;
  std::function<void()> on_closed;
  ~Leftover() {
    engine.reset();
    for (int fd : fds) ::close(fd);
    memory.clear();
    if (on_closed) on_closed();
  }
};

// One thread per leftover, so that one hung device's does not hold up the
// others'; the destructor waits for them all.
class LeftoverCloser {
 public:
  ~LeftoverCloser() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : closing_) c.thread.join();
  }
  void Add(std::unique_ptr<Leftover> l) {
    std::lock_guard<std::mutex> lock(mu_);
    // Threads that are done are joined here, so that they do not pile up.
    for (auto it = closing_.begin(); it != closing_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = closing_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::shared_ptr<Leftover> owned(std::move(l));
    closing_.push_back(Closing{std::thread([owned, done]() mutable {
                                 owned.reset();
                                 done->store(true);
                               }),
                               done});
  }

 private:
  struct Closing {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mu_;
  std::list<Closing> closing_;
};

// What the objects of one store share: where objects are being written
// (placement), the hedge state, and the closer of leftovers.
struct SpreadShared {
  explicit SpreadShared(size_t dirs, HedgeOptions h) : writing(dirs), hedge(h, nullptr) {}
  std::mutex mu;
  std::vector<size_t> writing;  // GUARDED_BY(mu): copies being written, per directory
  size_t next = 0;              // GUARDED_BY(mu): where ties start, so that they rotate
  HedgeState hedge;
  // Bytes held by leftovers whose writes are still in flight: past
  // kMaxLeftoverBytes no more hedges (a hung directory would otherwise
  // gather a loser per object).
  std::atomic<uint64_t> leftover_bytes{0};
  static constexpr uint64_t kMaxLeftoverBytes = 256ull << 20;
  LeftoverCloser closer;  // last: its threads finish before the rest goes

  // The directory for a new copy: the fewest copies being written, not
  // slow, none of `taken`; a slow one only when nothing else is left.
  // Sets *avoided when a directory with fewer was passed over as slow.
  std::optional<size_t> Place(const std::vector<size_t>& taken, bool avoid_slow, bool* avoided) {
    std::lock_guard<std::mutex> lock(mu);
    const size_t n = writing.size();
    std::optional<size_t> best, best_slow;
    for (size_t i = 0; i < n; ++i) {
      const size_t k = (next + i) % n;
      if (std::find(taken.begin(), taken.end(), k) != taken.end()) continue;
      const bool slow = avoid_slow && hedge.IsSlow(static_cast<uint32_t>(k));
      auto& pick = slow ? best_slow : best;
      if (!pick || writing[k] < writing[*pick]) pick = k;
    }
    std::optional<size_t> k = best ? best : best_slow;
    *avoided = best && best_slow && writing[*best_slow] < writing[*best];
    if (k) {
      ++writing[*k];
      next = (*k + 1) % n;
    }
    return k;
  }
  void Done(size_t k) {
    std::lock_guard<std::mutex> lock(mu);
    --writing[k];
  }
};

// A data object of `name` (a name without a directory suffix) over `dirs`
// (the store's, home first), sharing `shared` with the store's other
// objects; hedged where `hedge`. Its first copy's file is created here.
Result<std::unique_ptr<WritableObject>> NewSpreadWritable(std::vector<FileDirectory*> dirs,
                                                          std::shared_ptr<SpreadShared> shared, bool hedge,
                                                          std::string name, uint64_t size_hint,
                                                          std::unique_ptr<IoEngine> engine, size_t depth);

}  // namespace sluice

#endif  // SLUICE_BACKENDS_FILE_MULTI_DIR_WRITABLE_H_
