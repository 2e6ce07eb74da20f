// Store: the public entry point, wiring a backend to the pipeline pieces.
#include "sluice/store.h"

#include "format/layout.h"
#include "checkpoint/catalog.h"
#include "checkpoint/garbage_collector.h"
#include "checkpoint/step_removal.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "format/limits.h"

namespace sluice {

Status StoreOptions::Validate() const {
  if (chunk_bytes == 0 || chunk_bytes > limits::kMaxChunkBytes) {
    return Status::InvalidArgument("chunk size (--chunk-size) " + std::to_string(chunk_bytes) +
                                   " is outside 1 byte..256MiB");
  }
  if (io_bytes < limits::kMinIoBytes || io_bytes > limits::kMaxIoBytes || io_bytes % limits::kMinIoBytes != 0) {
    return Status::InvalidArgument("I/O size (--io-size) " + std::to_string(io_bytes) +
                                   " is not a multiple of 4KiB between 4KiB and 256MiB");
  }
  if (object_bytes < limits::kMinObjectBytes) {
    return Status::InvalidArgument("object size (--object-size) " + std::to_string(object_bytes) +
                                   " is under 1MiB");
  }
  return Status::OK();
}

namespace {

class StoreImpl final : public Store {
 public:
  StoreImpl(std::unique_ptr<Backend> backend, const StoreOptions& options)
      : backend_(std::move(backend)), options_(options) {}

  Backend& backend() override { return *backend_; }

  Result<std::unique_ptr<CheckpointWriter>> BeginCheckpoint(const CheckpointId& id, uint32_t rank,
                                                            uint32_t world,
                                                            const SaveOptions& save) override {
    if (!backend_->caps().atomic_publish_if_absent) {
      return Status::NotSupported("store " + backend_->uri() + " cannot publish atomically");
    }
    return NewCheckpointWriter(*backend_, options_, id, rank, world, save);
  }

  Result<std::unique_ptr<CheckpointReader>> OpenCheckpoint(std::string_view name,
                                                           std::optional<uint64_t> step) override {
    ASSIGN_OR_RETURN(LoadedCheckpoint loaded, Load(name, step));
    return NewCheckpointReader(*backend_, options_, std::move(loaded));
  }

  Result<std::vector<CheckpointInfo>> List(std::string_view name, bool include_incomplete) override {
    if (!name.empty()) RETURN_IF_ERROR(ValidateCheckpointName(name));
    return ListCheckpoints(*backend_, name, include_incomplete);
  }

  Result<uint64_t> LatestGoodStep(std::string_view name) override {
    RETURN_IF_ERROR(ValidateCheckpointName(name));
    return sluice::LatestGoodStep(*backend_, name);
  }

  Result<VerifyReport> Verify(std::string_view name, std::optional<uint64_t> step) override {
    ASSIGN_OR_RETURN(LoadedCheckpoint loaded, Load(name, step));
    return VerifyCheckpoint(*backend_, options_, loaded);
  }

  Result<uint64_t> DataBytesWritten(const CheckpointId& id) override {
    ASSIGN_OR_RETURN(auto listed, backend_->List(StepPrefix(id.name, id.step) + "data/"));
    uint64_t bytes = 0;
    for (const auto& o : listed) bytes += o.size;
    return bytes;
  }
  Status Remove(const CheckpointId& id) override { return RemoveCheckpoint(*backend_, id); }
  Result<uint64_t> RemoveAll(std::string_view name) override { return RemoveAllSteps(*backend_, std::string(name)); }

  Result<GcReport> CollectGarbage(uint64_t min_age_ms) override {
    return sluice::CollectGarbage(*backend_, min_age_ms);
  }

 private:
  Result<LoadedCheckpoint> Load(std::string_view name, std::optional<uint64_t> step) {
    RETURN_IF_ERROR(ValidateCheckpointName(name));
    uint64_t s;
    if (step) {
      s = *step;
    } else {
      ASSIGN_OR_RETURN(s, LatestStep(*backend_, name));
    }
    return LoadCheckpoint(*backend_, name, s);
  }

  std::unique_ptr<Backend> backend_;
  StoreOptions options_;
};

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& uri, const StoreOptions& options) {
  ASSIGN_OR_RETURN(auto backend, OpenBackend(uri, options.create_if_missing));
  return Open(std::move(backend), options);
}

std::unique_ptr<Store> Store::Open(std::unique_ptr<Backend> backend, const StoreOptions& options) {
  return std::unique_ptr<Store>(new StoreImpl(std::move(backend), options));
}

}  // namespace sluice
