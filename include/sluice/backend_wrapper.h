// Forwarding bases for backend decorators (fault injection, counting,
// throttling, a store not open yet): every method of Backend,
// WritableObject and ReadableObject forwards to the wrapped one, so a
// decorator overrides only what it changes and a method added to the
// interface later is forwarded here once, never silently skipped by a
// decorator that did not know of it (leveldb's EnvWrapper does the same).
//
// Thread-safety: as the wrapped object's.
#ifndef SLUICE_BACKEND_WRAPPER_H_
#define SLUICE_BACKEND_WRAPPER_H_

#include <memory>
#include <string>
#include <vector>

#include "sluice/backend.h"
#include "sluice/status.h"

namespace sluice {

class WritableObjectWrapper : public WritableObject {
 public:
  explicit WritableObjectWrapper(std::unique_ptr<WritableObject> target) : target_(std::move(target)) {}
  WritableObject& target() { return *target_; }

  Status StartWrite(uint64_t offset, const void* data, size_t len, uint64_t tag) override {
    return target_->StartWrite(offset, data, len, tag);
  }
  Result<IoCompletion> Reap() override { return target_->Reap(); }
  Result<std::optional<IoCompletion>> ReapUntil(std::chrono::steady_clock::time_point deadline) override {
    return target_->ReapUntil(deadline);
  }
  size_t in_flight() const override { return target_->in_flight(); }
  size_t queue_depth() const override { return target_->queue_depth(); }
  Status Finish(uint64_t final_size) override { return target_->Finish(final_size); }
  Status Discard() override { return target_->Discard(); }

 private:
  std::unique_ptr<WritableObject> target_;
};

class ReadableObjectWrapper : public ReadableObject {
 public:
  explicit ReadableObjectWrapper(std::unique_ptr<ReadableObject> target) : target_(std::move(target)) {}
  ReadableObject& target() { return *target_; }

  uint64_t size() const override { return target_->size(); }
  Status StartRead(uint64_t offset, void* buf, size_t len, uint64_t tag) override {
    return target_->StartRead(offset, buf, len, tag);
  }
  Result<IoCompletion> Reap() override { return target_->Reap(); }
  size_t in_flight() const override { return target_->in_flight(); }
  size_t queue_depth() const override { return target_->queue_depth(); }

 private:
  std::unique_ptr<ReadableObject> target_;
};

class BackendWrapper : public Backend {
 public:
  explicit BackendWrapper(std::unique_ptr<Backend> target) : owned_(std::move(target)), target_(owned_.get()) {}
  // Wraps a backend the caller keeps (it must outlive the wrapper): a
  // decorator for one job over a store that stays open.
  explicit BackendWrapper(Backend& borrowed) : target_(&borrowed) {}
  // The backend the calls go to. REQUIRES: there is one (see Target()).
  Backend& target() { return *target_; }

  // Every method forwards to Target(): a decorator that changes one
  // overrides that one, and a method added to Backend must be added here
  // (Backend's methods are all pure, so a wrapper missing one does not
  // compile; backend_wrapper_test checks that each reaches the target).
  const BackendCaps& caps() const override { return target_->caps(); }
  const std::string& uri() const override { return target_->uri(); }
  Result<std::unique_ptr<WritableObject>> Create(const std::string& name, const CreateOptions& options) override {
    ASSIGN_OR_RETURN(Backend * t, Target());
    return t->Create(name, options);
  }
  Result<std::unique_ptr<ReadableObject>> Open(const std::string& name, const OpenOptions& options) override {
    ASSIGN_OR_RETURN(Backend * t, Target());
    return t->Open(name, options);
  }
  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    ASSIGN_OR_RETURN(Backend * t, Target());
    return t->PublishIfAbsent(name, bytes);
  }
  Result<std::string> ReadSmall(const std::string& name) override {
    ASSIGN_OR_RETURN(Backend * t, Target());
    return t->ReadSmall(name);
  }
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    ASSIGN_OR_RETURN(Backend * t, Target());
    return t->List(prefix);
  }
  Result<std::vector<ObjectInfo>> Stat(const std::vector<std::string>& names) override {
    ASSIGN_OR_RETURN(Backend * t, Target());
    return t->Stat(names);
  }
  Status Remove(const std::string& name) override {
    ASSIGN_OR_RETURN(Backend * t, Target());
    return t->Remove(name);
  }
  Status Replace(const std::string& staged, const std::string& target) override {
    ASSIGN_OR_RETURN(Backend * t, Target());
    return t->Replace(staged, target);
  }
  Status ReclaimLeftovers(const std::string& prefix, uint64_t min_age_ms) override {
    ASSIGN_OR_RETURN(Backend * t, Target());
    return t->ReclaimLeftovers(prefix, min_age_ms);
  }

 protected:
  // For a wrapper whose target comes later: it overrides Target(), caps()
  // and uri().
  BackendWrapper() = default;
  // Where calls go: the wrapped backend, or an error a wrapper without
  // one yet (a store not open yet) returns instead.
  virtual Result<Backend*> Target() { return target_; }

 private:
  std::unique_ptr<Backend> owned_;

 protected:
  Backend* target_ = nullptr;
};

}  // namespace sluice

#endif  // SLUICE_BACKEND_WRAPPER_H_
