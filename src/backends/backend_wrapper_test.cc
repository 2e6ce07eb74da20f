// BackendWrapper forwards every method of Backend, arguments and all, to
// the backend it wraps. Every method of Backend is pure, so a wrapper that
// misses one does not compile (the static_asserts below instantiate it);
// this test checks that each one it has reaches the target unchanged. A
// method added to Backend must be added to BackendWrapper and here.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "sluice/backend_wrapper.h"

namespace sluice {
namespace {

static_assert(!std::is_abstract_v<BackendWrapper>, "BackendWrapper must forward every method of Backend");
static_assert(!std::is_abstract_v<WritableObjectWrapper>, "it must forward every method of WritableObject");
static_assert(!std::is_abstract_v<ReadableObjectWrapper>, "it must forward every method of ReadableObject");

// Records each call and what it was given, and answers with a value the
// test can tell apart from any default. It stands in for no storage: the
// test is about the forwarding alone.
class Recorder final : public Backend {
 public:
  std::map<std::string, std::string> calls;  // method -> its arguments

  const BackendCaps& caps() const override {
    const_cast<Recorder*>(this)->calls["caps"] = "";
    return caps_;
  }
  const std::string& uri() const override {
    const_cast<Recorder*>(this)->calls["uri"] = "";
    return uri_;
  }
  Result<std::unique_ptr<WritableObject>> Create(const std::string& name, const CreateOptions& o) override {
    calls["Create"] = name + " " + std::to_string(o.size_hint);
    return Status::NoSpace("create");
  }
  Result<std::unique_ptr<ReadableObject>> Open(const std::string& name, const OpenOptions& o) override {
    calls["Open"] = name + " " + (o.known_size ? std::to_string(*o.known_size) : "unknown");
    return Status::Corruption("open");
  }
  Status PublishIfAbsent(const std::string& name, std::string_view bytes) override {
    calls["PublishIfAbsent"] = name + " " + std::string(bytes);
    return Status::AlreadyExists("publish");
  }
  Status Replace(const std::string& staged, const std::string& target) override {
    calls["Replace"] = staged + " " + target;
    return Status::NotFound("replace");
  }
  Result<std::string> ReadSmall(const std::string& name) override {
    calls["ReadSmall"] = name;
    return std::string("small");
  }
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    calls["List"] = prefix;
    return std::vector<ObjectInfo>{{"listed", 1, 2}};
  }
  Result<std::vector<ObjectInfo>> Stat(const std::vector<std::string>& names) override {
    calls["Stat"] = names.empty() ? "" : names[0];
    return std::vector<ObjectInfo>{{"stated", 3, 4}};
  }
  Status Remove(const std::string& name) override {
    calls["Remove"] = name;
    return Status::Unavailable("remove");
  }
  Status ReclaimLeftovers(const std::string& prefix, uint64_t min_age_ms) override {
    calls["ReclaimLeftovers"] = prefix + " " + std::to_string(min_age_ms);
    return Status::NotSupported("reclaim");
  }

 private:
  BackendCaps caps_ = [] {
    BackendCaps c;
    c.io_path = "recorder";
    c.objects_in_flight = 7;
    return c;
  }();
  std::string uri_ = "recorder://x";
};

TEST(BackendWrapperTest, EveryMethodReachesTheTargetWithItsArguments) {
  Recorder target;
  BackendWrapper w(target);
  Backend& b = w;
  EXPECT_EQ(b.caps().io_path, "recorder");
  EXPECT_EQ(b.caps().objects_in_flight, 7u);
  EXPECT_EQ(b.uri(), "recorder://x");
  EXPECT_EQ(b.Create("c/obj.dat", CreateOptions{4096}).status().code(), StatusCode::kNoSpace);
  OpenOptions known;
  known.known_size = 123;
  EXPECT_EQ(b.Open("o/obj.dat", known).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(b.PublishIfAbsent("p/COMMIT", "bytes").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(b.Replace("staged", "final").code(), StatusCode::kNotFound);
  EXPECT_EQ(*b.ReadSmall("r/rec"), "small");
  EXPECT_EQ((*b.List("l/"))[0].name, "listed");
  EXPECT_EQ((*b.Stat({"s/obj"}))[0].name, "stated");
  EXPECT_EQ(b.Remove("gone").code(), StatusCode::kUnavailable);
  EXPECT_EQ(b.ReclaimLeftovers("rl/", 77).code(), StatusCode::kNotSupported);

  const std::map<std::string, std::string> want = {
      {"caps", ""},
      {"uri", ""},
      {"Create", "c/obj.dat 4096"},
      {"Open", "o/obj.dat 123"},
      {"PublishIfAbsent", "p/COMMIT bytes"},
      {"Replace", "staged final"},
      {"ReadSmall", "r/rec"},
      {"List", "l/"},
      {"Stat", "s/obj"},
      {"Remove", "gone"},
      {"ReclaimLeftovers", "rl/ 77"},
  };
  EXPECT_EQ(target.calls, want);
}

// WritableObjectWrapper forwards each call of an object, arguments and
// all, the timed reap the write queue hedges with included.
TEST(BackendWrapperTest, AWritableWrapperForwardsEveryCall) {
  struct Object final : WritableObject {
    std::map<std::string, std::string>* calls;
    explicit Object(std::map<std::string, std::string>* c) : calls(c) {}
    Status StartWrite(uint64_t offset, const void*, size_t len, uint64_t tag) override {
      (*calls)["StartWrite"] = std::to_string(offset) + " " + std::to_string(len) + " " + std::to_string(tag);
      return Status::NoSpace("start");
    }
    Result<IoCompletion> Reap() override {
      (*calls)["Reap"] = "";
      return Status::Corruption("reap");
    }
    Result<std::optional<IoCompletion>> ReapUntil(std::chrono::steady_clock::time_point deadline) override {
      (*calls)["ReapUntil"] = std::to_string(deadline.time_since_epoch().count());
      return std::optional<IoCompletion>();
    }
    size_t in_flight() const override { return 3; }
    size_t queue_depth() const override { return 9; }
    Status Finish(uint64_t size) override {
      (*calls)["Finish"] = std::to_string(size);
      return Status::Unavailable("finish");
    }
    Status Discard() override {
      (*calls)["Discard"] = "";
      return Status::IOError("discard");
    }
  };
  std::map<std::string, std::string> calls;
  WritableObjectWrapper w(std::make_unique<Object>(&calls));
  const auto deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(12345));
  EXPECT_EQ(w.StartWrite(4096, nullptr, 512, 7).code(), StatusCode::kNoSpace);
  EXPECT_EQ(w.Reap().status().code(), StatusCode::kCorruption);
  auto timed = w.ReapUntil(deadline);
  ASSERT_TRUE(timed.ok());
  EXPECT_FALSE(timed->has_value());
  EXPECT_EQ(w.in_flight(), 3u);
  EXPECT_EQ(w.queue_depth(), 9u);
  EXPECT_EQ(w.Finish(99).code(), StatusCode::kUnavailable);
  EXPECT_EQ(w.Discard().code(), StatusCode::kIOError);
  const std::map<std::string, std::string> want = {
      {"StartWrite", "4096 512 7"}, {"Reap", ""}, {"ReapUntil", "12345"}, {"Finish", "99"}, {"Discard", ""}};
  EXPECT_EQ(calls, want);
}

// A wrapper whose target is not there yet answers every call with
// Target()'s error, and forwards once it is.
TEST(BackendWrapperTest, AWrapperWithoutATargetYetAnswersWithTargetsError) {
  struct Late final : BackendWrapper {
    Recorder* ready = nullptr;
    const BackendCaps& caps() const override { return caps_; }
    const std::string& uri() const override { return uri_; }
    Result<Backend*> Target() override {
      if (ready == nullptr) return Status::Unavailable("not yet");
      return static_cast<Backend*>(ready);
    }
    BackendCaps caps_;
    std::string uri_ = "late://";
  };
  Late late;
  EXPECT_EQ(late.Remove("x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(late.List("p/").status().code(), StatusCode::kUnavailable);
  Recorder target;
  late.ready = &target;
  EXPECT_EQ(late.Remove("x").code(), StatusCode::kUnavailable);  // the target's own answer now
  EXPECT_EQ(target.calls["Remove"], "x");
  EXPECT_EQ(*late.ReadSmall("y"), "small");
}

}  // namespace
}  // namespace sluice
