#include "backends/file/multi_dir_backend.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/file/multi_dir_writable.h"
#include "backends/hedge_state.h"

namespace sluice {
namespace {

class MultiDirBackend final : public Backend {
 public:
  MultiDirBackend(std::string uri, std::vector<std::unique_ptr<FileDirectory>> dirs, FileOptions file_options,
                  MultiDirOptions options)
      : uri_(std::move(uri)), dirs_(std::move(dirs)), file_options_(file_options), options_(std::move(options)) {
    HedgeOptions h;
    h.enabled = options_.hedge;
    h.extra = options_.hedge_extra;
    h.floor_ms = options_.hedge_floor_ms;
    h.max_held_bytes = kMultiDirMaxObjectBytes;
    shared_ = std::make_shared<SpreadShared>(dirs_.size(), h);
    for (const auto& d : dirs_) {
      caps_.io_alignment = std::max(caps_.io_alignment, d->caps().io_alignment);
      raw_.push_back(d.get());
    }
    caps_.max_object_bytes = kMultiDirMaxObjectBytes;
    caps_.atomic_publish_if_absent = true;
    caps_.objects_in_flight = std::max<size_t>(3, 2 * dirs_.size());
    caps_.io_path = dirs_[0]->caps().io_path + ", " + std::to_string(dirs_.size()) + " directories";
    if (options_.hedge) {
      char extra[32];
      std::snprintf(extra, sizeof extra, "%.0f%%", options_.hedge_extra * 100);
      caps_.io_path += ", hedged writes (late past 3x the median, at least " +
                       std::to_string(options_.hedge_floor_ms) + " ms; at most " + extra + " extra)";
      // (No placement function: records, the only objects whose names
      // callers choose, all live in the home directory, so no choice of
      // name keeps them off a slow one. PlacementSlow is always false.)
      caps_.hedged_writes = &shared_->hedge;
    }
  }

  const BackendCaps& caps() const override { return caps_; }
  const std::string& uri() const override { return uri_; }

  Result<std::unique_ptr<WritableObject>> Create(const std::string& name, const CreateOptions& options) override {
    if (!options.relocatable) return Dir(name).Create(name, options);
    // As a plain create: a name the home holds is taken (copies elsewhere
    // would not notice it).
    ASSIGN_OR_RETURN(auto held, dirs_[0]->Stat({name}));
    if (!held.empty() || DirectoryOfName(name, dirs_.size()) != 0) {
      if (!held.empty()) return Status::AlreadyExists("object " + name + " already exists");
      return Dir(name).Create(name, options);  // a name that already says where it lives
    }
    // Room for a hedge to send every piece of a full object at once.
    const unsigned depth = file_options_.queue_depth;
    const unsigned engine_depth = options_.hedge ? std::max(depth * 2, 64u) : depth;
    ASSIGN_OR_RETURN(auto engine, MakeIoEngine(file_options_.io, engine_depth));
    return NewSpreadWritable(raw_, shared_, options_.hedge, name,
                             std::min<uint64_t>(options.size_hint, kMultiDirMaxObjectBytes), std::move(engine), depth);
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
  std::vector<FileDirectory*> raw_;
  FileOptions file_options_;
  MultiDirOptions options_;
  std::shared_ptr<SpreadShared> shared_;  // after dirs_: leftovers close before the directories go
  BackendCaps caps_;
};

}  // namespace

Result<std::unique_ptr<Backend>> OpenMultiDirFileBackend(const std::string& uri, const std::string& home_path,
                                                         const std::string& query, const FileOptions& file_options,
                                                         bool create_if_missing) {
  ASSIGN_OR_RETURN(MultiDirStore store, OpenMultiDirLayout(uri, home_path, query, file_options, create_if_missing));
  return std::unique_ptr<Backend>(
      new MultiDirBackend(uri, std::move(store.dirs), file_options, std::move(store.options)));
}

}  // namespace sluice
