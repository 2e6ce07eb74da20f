// The fixture of the checkpoint layer's tests (store_test.cc,
// commit_test.cc): a Store on a fresh directory of the real filesystem,
// and a backend decorator counting what the layers above ask of it.
#ifndef SLUICE_CHECKPOINT_STORE_TEST_FIXTURE_H_
#define SLUICE_CHECKPOINT_STORE_TEST_FIXTURE_H_

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sluice/backend_wrapper.h"
#include "sluice/store.h"

namespace sluice {

inline std::string Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-store-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Reopen(StoreOptions{});
  }
  void TearDown() override {
    store_.reset();
    std::string cmd = "rm -rf " + dir_;
    (void)std::system(cmd.c_str());
  }
  void Reopen(StoreOptions o, const std::string& query = "") {
    o.create_if_missing = true;
    auto s = Store::Open(dir_ + (query.empty() ? "" : "?" + query), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  // Saves `items` as name@step (rank 0 of 1).
  void Save(const std::string& name, uint64_t step, const std::map<std::string, std::string>& items) {
    auto w = store_->BeginCheckpoint({name, step}, 0, 1);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (const auto& [k, v] : items) {
      Status st = (*w)->AddItem(k, "meta:" + k, v.data(), v.size());
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    auto stats = (*w)->Commit();
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_TRUE(stats->committed);
  }

  std::map<std::string, std::string> Load(const std::string& name, std::optional<uint64_t> step) {
    std::map<std::string, std::string> out;
    auto r = store_->OpenCheckpoint(name, step);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return out;
    for (const auto& it : (*r)->items()) out[it.key].resize(it.size);
    Status st = (*r)->ReadAll(std::nullopt, [&](const ItemInfo& item, uint64_t off, const void* d, size_t n) {
      EXPECT_EQ(item.metadata, "meta:" + item.key);
      if (n > 0) std::memcpy(out[item.key].data() + off, d, n);
      return Status::OK();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return out;
  }

  // Two writers of one step, both begun: each gets item "x" (its own
  // bytes) and both commit at once, from two threads. Exactly one commits,
  // the other is told AlreadyExists, and the step holds the winner's bytes.
  void ExactlyOneOfTwoCommits(CheckpointWriter& w1, CheckpointWriter& w2, const std::string& name, uint64_t step,
                              size_t bytes) {
    std::string a = Bytes(bytes, 1), b = Bytes(bytes, 2);
    ASSERT_TRUE(w1.AddItem("x", "meta:x", a.data(), a.size()).ok());
    ASSERT_TRUE(w2.AddItem("x", "meta:x", b.data(), b.size()).ok());
    Status s1, s2;
    std::thread t1([&] { s1 = w1.Commit().status(); });
    std::thread t2([&] { s2 = w2.Commit().status(); });
    t1.join();
    t2.join();
    ASSERT_EQ(s1.ok() + s2.ok(), 1) << s1.ToString() << " / " << s2.ToString();
    const Status& loser = s1.ok() ? s2 : s1;
    EXPECT_TRUE(loser.IsAlreadyExists()) << loser.ToString();
    std::string got = Load(name, step)["x"];
    EXPECT_TRUE(got == (s1.ok() ? a : b));
  }

  std::vector<std::string> DataFiles() {
    std::vector<std::string> out;
    auto listed = store_->backend().List("");
    for (const auto& o : *listed) {
      if (o.name.find("/data/") != std::string::npos) out.push_back(o.name);
    }
    return out;
  }

  std::string dir_;
  std::unique_ptr<Store> store_;
};

// Forwards to a real backend and counts what the layers above ask of it:
// listings, and writes started and not yet reaped (across all objects).
class CountingBackend final : public BackendWrapper {
 public:
  struct Counts {
    std::atomic<int> lists{0};
    std::atomic<int> writes_in_flight{0};
  };
  CountingBackend(std::unique_ptr<Backend> inner, Counts* counts)
      : BackendWrapper(std::move(inner)), counts_(counts) {}
  Result<std::unique_ptr<WritableObject>> Create(const std::string& n, const CreateOptions& o) override {
    ASSIGN_OR_RETURN(auto w, BackendWrapper::Create(n, o));
    return std::unique_ptr<WritableObject>(new Counting(std::move(w), &counts_->writes_in_flight));
  }
  Result<std::vector<ObjectInfo>> List(const std::string& p) override {
    ++counts_->lists;
    return BackendWrapper::List(p);
  }

 private:
  class Counting final : public WritableObjectWrapper {
   public:
    Counting(std::unique_ptr<WritableObject> inner, std::atomic<int>* n)
        : WritableObjectWrapper(std::move(inner)), n_(n) {}
    Status StartWrite(uint64_t off, const void* d, size_t len, uint64_t tag) override {
      Status st = WritableObjectWrapper::StartWrite(off, d, len, tag);
      if (st.ok()) ++*n_;
      return st;
    }
    Result<IoCompletion> Reap() override {
      auto c = WritableObjectWrapper::Reap();
      if (c.ok()) --*n_;
      return c;
    }

   private:
    std::atomic<int>* n_;
  };
  Counts* counts_;
};

}  // namespace sluice

#endif  // SLUICE_CHECKPOINT_STORE_TEST_FIXTURE_H_
