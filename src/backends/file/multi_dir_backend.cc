#include "backends/file/multi_dir_backend.h"

#include <algorithm>
#include <set>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/hedge_state.h"
#include "sluice/backend_wrapper.h"

namespace sluice {
namespace {

// Where data objects go: the directory with the fewest objects being
// written (ties rotate), not found slow, none of a hedge's earlier copies'.
class MultiDirPlacement final : public HedgeState {
 public:
  MultiDirPlacement(size_t dirs, HedgeOptions options) : HedgeState(options, nullptr), writing_(dirs) {
    SetPlacementOf([dirs](const std::string& name) -> std::optional<uint32_t> {
      return static_cast<uint32_t>(DirectoryOfName(name, dirs));
    });
  }

  // Records, the only objects whose names callers choose, all live in the
  // home directory: no choice of name keeps them off a slow one.
  bool Slow(const std::string&) const override { return false; }

  std::string Place(const std::string& name, const std::vector<std::string>& taken, bool* avoided) override {
    const size_t n = writing_.size();
    std::vector<size_t> taken_dirs;
    for (const auto& t : taken) taken_dirs.push_back(DirectoryOfName(t, n));
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<size_t> best, best_slow;
    for (size_t i = 0; i < n; ++i) {
      const size_t k = (next_ + i) % n;
      if (std::find(taken_dirs.begin(), taken_dirs.end(), k) != taken_dirs.end()) continue;
      auto& pick = IsSlow(static_cast<uint32_t>(k)) ? best_slow : best;
      if (!pick || writing_[k] < writing_[*pick]) pick = k;
    }
    const std::optional<size_t> k = best ? best : best_slow;
    *avoided = best && best_slow && writing_[*best_slow] < writing_[*best];
    if (!k) return "";
    next_ = (*k + 1) % n;
    return NameInDirectory(name, *k);
  }

  // An object is being written to directory `k` until Done(k).
  void Writing(size_t k) {
    std::lock_guard<std::mutex> lock(mu_);
    ++writing_[k];
  }
  void Done(size_t k) {
    std::lock_guard<std::mutex> lock(mu_);
    --writing_[k];
  }

 private:
  std::mutex mu_;
  std::vector<size_t> writing_;  // GUARDED_BY(mu_)
  size_t next_ = 0;              // GUARDED_BY(mu_): where ties start, so that they rotate
};

// A data object of directory `k`, counted as being written there until it
// is gone (its writes waited out).
class CountedWritable final : public WritableObjectWrapper {
 public:
  CountedWritable(std::unique_ptr<WritableObject> target, std::shared_ptr<MultiDirPlacement> placement, size_t k)
      : WritableObjectWrapper(std::move(target)), placement_(std::move(placement)), k_(k) {
    placement_->Writing(k_);
  }
  ~CountedWritable() override { placement_->Done(k_); }

 private:
  std::shared_ptr<MultiDirPlacement> placement_;
  size_t k_;
};

class MultiDirBackend final : public Backend {
 public:
  MultiDirBackend(std::string uri, std::vector<std::unique_ptr<FileDirectory>> dirs, MultiDirOptions options)
      : uri_(std::move(uri)), dirs_(std::move(dirs)), options_(std::move(options)) {
    HedgeOptions h;
    h.enabled = options_.hedge;
    h.extra = options_.hedge_extra;
    h.floor_ms = options_.hedge_floor_ms;
    h.max_held_bytes = kMultiDirMaxObjectBytes;
    placement_ = std::make_shared<MultiDirPlacement>(dirs_.size(), h);
    for (const auto& d : dirs_) caps_.io_alignment = std::max(caps_.io_alignment, d->caps().io_alignment);
    caps_.max_object_bytes = kMultiDirMaxObjectBytes;
    caps_.atomic_publish_if_absent = true;
    caps_.objects_in_flight = std::max<size_t>(3, 2 * dirs_.size());
    caps_.io_path = dirs_[0]->caps().io_path + ", " + std::to_string(dirs_.size()) + " directories";
    caps_.placement = placement_.get();  // spreads objects, hedge=on or off
    caps_.child_listing = &children_;
    if (options_.hedge) {
      char extra[32];
      std::snprintf(extra, sizeof extra, "%.0f%%", options_.hedge_extra * 100);
      caps_.io_path += ", hedged writes (late past 3x the median, at least " +
                       std::to_string(options_.hedge_floor_ms) + " ms; at most " + extra + " extra)";
    }
  }

  const BackendCaps& caps() const override { return caps_; }

  // ChildListing: every directory's, merged.
  class Children final : public ChildListing {
   public:
    explicit Children(const MultiDirBackend& b) : b_(b) {}
    Result<std::vector<std::string>> ListChildren(const std::string& prefix) const override {
      std::set<std::string> merged;
      for (const auto& d : b_.dirs_) {
        const ChildListing* c = d->caps().child_listing;
        if (c == nullptr) return Status::NotSupported("list children in " + b_.uri_);
        ASSIGN_OR_RETURN(auto names, c->ListChildren(prefix));
        merged.insert(names.begin(), names.end());
      }
      return std::vector<std::string>(merged.begin(), merged.end());
    }

   private:
    const MultiDirBackend& b_;
  };
  const std::string& uri() const override { return uri_; }

  Result<std::unique_ptr<WritableObject>> Create(const std::string& name, const CreateOptions& options) override {
    const size_t k = DirectoryOfName(name, dirs_.size());
    ASSIGN_OR_RETURN(auto object, dirs_[k]->Create(name, options));
    return std::unique_ptr<WritableObject>(new CountedWritable(std::move(object), placement_, k));
  }

  Result<std::unique_ptr<ReadableObject>> Open(const std::string& name, const OpenOptions& options) override {
    return Dir(name).Open(name, options);
  }
  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    return Dir(name).PublishIfAbsent(name, bytes);
  }
  Status Replace(const std::string& staged, const std::string& target) override {
    const size_t from = DirectoryOfName(staged, dirs_.size()), to = DirectoryOfName(target, dirs_.size());
    if (from != to) {
      return Status::InvalidArgument("replace " + target + " with " + staged + ": they live in different " +
                                     "directories of " + uri_ + " (" + dirs_[to]->root() + ", " +
                                     dirs_[from]->root() + ")");
    }
    return dirs_[to]->Replace(staged, target);
  }
  Result<std::string> ReadSmall(const std::string& name) override { return Dir(name).ReadSmall(name); }

  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    std::vector<ObjectInfo> out;
    for (size_t k = 0; k < dirs_.size(); ++k) {
      ASSIGN_OR_RETURN(auto listed, dirs_[k]->List(prefix));
      for (auto& o : listed) {
        // Only what this store would find there: a file whose name says
        // another directory was not put there by it.
        if (DirectoryOfName(o.name, dirs_.size()) == k) out.push_back(std::move(o));
      }
    }
    return out;
  }

  Result<std::vector<ObjectInfo>> Stat(const std::vector<std::string>& names) override {
    std::vector<std::vector<std::string>> by_dir(dirs_.size());
    for (const auto& n : names) by_dir[DirectoryOfName(n, dirs_.size())].push_back(n);
    std::vector<ObjectInfo> out;
    for (size_t k = 0; k < dirs_.size(); ++k) {
      if (by_dir[k].empty()) continue;
      ASSIGN_OR_RETURN(auto found, dirs_[k]->Stat(by_dir[k]));
      for (auto& o : found) out.push_back(std::move(o));
    }
    return out;
  }

  Status Remove(const std::string& name) override { return Dir(name).Remove(name); }

  Status ReclaimLeftovers(const std::string& prefix, uint64_t min_age_ms) override {
    for (auto& d : dirs_) RETURN_IF_ERROR(d->ReclaimLeftovers(prefix, min_age_ms));
    return Status::OK();
  }

 private:
  FileDirectory& Dir(const std::string& name) { return *dirs_[DirectoryOfName(name, dirs_.size())]; }

  std::string uri_;
  std::vector<std::unique_ptr<FileDirectory>> dirs_;
  MultiDirOptions options_;
  std::shared_ptr<MultiDirPlacement> placement_;  // shared with the objects being written
  BackendCaps caps_;
  Children children_{*this};
};

}  // namespace

Result<std::unique_ptr<Backend>> OpenMultiDirFileBackend(const std::string& uri, const std::string& home_path,
                                                         const std::string& query, const FileOptions& file_options,
                                                         bool create_if_missing) {
  ASSIGN_OR_RETURN(MultiDirStore store, OpenMultiDirLayout(uri, home_path, query, file_options, create_if_missing));
  return std::unique_ptr<Backend>(
      new MultiDirBackend(uri, std::move(store.dirs), std::move(store.options)));
}

}  // namespace sluice
