// BackendWrapper forwards every method of Backend, arguments and all, to
// the backend it wraps. Every method of Backend is pure, so a wrapper that
// misses one does not compile (the static_asserts below instantiate it);
// this test checks that each one it has reaches the target unchanged. A
// method added to Backend must be added to BackendWrapper and here.
#include <gtest/gtest.h>

#include <map>
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
    calls["Create"] = name + " " + std::to_string(o.size_hint) + (o.relocatable ? " relocatable" : "");
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
  EXPECT_EQ(b.Create("c/obj.dat", CreateOptions{4096, true}).status().code(), StatusCode::kNoSpace);
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
      {"Create", "c/obj.dat 4096 relocatable"},
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

// A decorator that changes Create sees every object, relocatable ones too
// (there is no second way to create one that could go around it).
TEST(BackendWrapperTest, ADecoratorOfCreateSeesRelocatableObjects) {
  struct Decorator final : BackendWrapper {
    using BackendWrapper::BackendWrapper;
    int creates = 0;
    Result<std::unique_ptr<WritableObject>> Create(const std::string& n, const CreateOptions& o) override {
      ++creates;
      return BackendWrapper::Create(n, o);
    }
  };
  Recorder target;
  Decorator d(target);
  (void)d.Create("a", CreateOptions{0, /*relocatable=*/true});
  (void)d.Create("b", CreateOptions{});
  EXPECT_EQ(d.creates, 2);
  EXPECT_EQ(target.calls["Create"], "b 0");
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
