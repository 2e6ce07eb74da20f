#include "pipeline/scrub.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "checkpoint/catalog.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/parts.h"
#include "checkpoint/copies.h"
#include "checkpoint/references.h"
#include "checkpoint/step_commit.h"
#include "checkpoint/writer_registry.h"
#include "engine/object_copy.h"
#include "engine/throttled_reads.h"
#include "format/layout.h"
#include "io/token_bucket.h"
#include "pipeline/pipeline_metrics.h"
#include "io/wall_clock.h"

namespace sluice {
namespace {

using Key = std::pair<std::string, uint64_t>;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Publishes a small record whole: written beside it, then swapped in.
Status PutRecord(Backend& backend, const std::string& object, const std::string& bytes,
                 const std::string& writer) {
  const std::string staged = ScrubStagingObject(object, writer);
  (void)backend.Remove(staged);
  RETURN_IF_ERROR(backend.PublishIfAbsent(staged, bytes));
  return backend.Replace(staged, object);
}

// One tier as the scrub uses it: reads paced by the tier's bucket, repair
// writes by the same bucket.
struct Tier {
  Backend* raw = nullptr;
  std::shared_ptr<TokenBucket> bucket;
  std::unique_ptr<Backend> paced;  // reads through the bucket
  bool locked = false;
  bool failed = false;
  ScrubRecord status;
  std::set<Key> holds;  // committed (intact or damaged) at the listing
};

// What one copy turned out to be before any repair.
struct Check {
  size_t tier = 0;
  bool loaded = false;
  LoadedCheckpoint ck;
  VerifyReport report;
  std::string problem;  // records that do not load, or the data objects' damage
  bool tier_failed = false;
  double seconds = 0;
  bool ok() const { return loaded && problem.empty() && report.ok(); }
  bool Holds(const std::string& object) const {
    for (const auto& b : report.bad) {
      if (b.object == object) return false;
    }
    return true;
  }
};

class Scrubber {
 public:
  Scrubber(const std::vector<Backend*>& tiers, const ScrubOptions& options)
      : options_(options), holder_(NewWriterId()) {
    const uint64_t rate = options.rate_bytes_per_sec;
    for (Backend* b : tiers) {
      Tier t;
      t.raw = b;
      // The cap holds for the tier as a whole, whatever the depth; a burst
      // of 1/20 s keeps every 10 s window within a few percent of it.
      t.bucket = std::make_shared<TokenBucket>(rate, std::max<uint64_t>(options.store.io_bytes, rate / 20), 0);
      t.paced = NewThrottledReads(*b, t.bucket, options.stop);
      tiers_.push_back(std::move(t));
    }
  }

  ~Scrubber() {
    for (auto& t : tiers_) {
      if (t.locked) ReleaseObjectLock(*t.raw, ScrubLockObject(), holder_);
    }
  }

  Result<ScrubReport> Run() {
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(LockAll());
    std::set<Key> keys = ListAll();
    LoadProgress();
    // Newest first: the step a job would restore is the one checked first.
    std::vector<Key> order(keys.begin(), keys.end());
    std::stable_sort(order.begin(), order.end(), [](const Key& a, const Key& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    Gauge& pass_total = DefaultMetrics().GetGauge("sluice_scrub_pass_checkpoints",
                                                  "Checkpoints in the scrub pass under way (0: none running)");
    Gauge& pass_done = DefaultMetrics().GetGauge("sluice_scrub_pass_done_checkpoints",
                                                 "Checkpoints the scrub pass under way has finished or skipped");
    pass_total.Set(static_cast<double>(order.size()));
    pass_done.Set(0);
    struct PassEnds {
      Gauge& total;
      Gauge& done;
      ~PassEnds() {
        total.Set(0);
        done.Set(0);
      }
    } pass_ends{pass_total, pass_done};
    for (const Key& key : order) {
      pass_done.Add(1);
      if (Stopped()) {
        report_.stopped = true;
        break;
      }
      if (done_.count(key)) {
        ++report_.skipped;
        continue;
      }
      if (options_.yield) options_.yield();
      ScrubOne(key);
      if (report_.stopped) break;
    }
    if (!report_.stopped && home_ != nullptr) {
      // The pass is over: the next scrub starts a new one.
      Status st = home_->raw->Remove(ScrubProgressObject());
      if (!st.ok() && !st.IsNotFound()) report_.tier_errors.push_back("could not end the pass: " + st.ToString());
    }
    report_.seconds = SecondsSince(t0);
    return std::move(report_);
  }

 private:
  Backend& Reader(Tier& t) { return *t.paced; }
  bool Stopped() const { return options_.stop != nullptr && options_.stop->load(); }

  std::string TierName(size_t k) const { return "tier " + std::to_string(k) + " (" + tiers_[k].raw->uri() + ")"; }

  void TierFailed(size_t k, const Status& st) {
    if (tiers_[k].failed) return;
    tiers_[k].failed = true;
    report_.tier_errors.push_back(TierName(k) + ": " + st.ToString());
  }

  Status LockAll() {
    for (size_t k = 0; k < tiers_.size(); ++k) {
      Status st = AcquireObjectLock(*tiers_[k].raw, ScrubLockObject(), holder_);
      if (st.IsAlreadyExists()) {
        return Status::Unavailable("another scrub is running on " + TierName(k) + ": " + st.message());
      }
      if (!st.ok()) {
        TierFailed(k, st);
        continue;
      }
      tiers_[k].locked = true;
      if (home_ == nullptr) home_ = &tiers_[k];
      // Records a killed scrub was writing when it died (the lock is ours now).
      auto listed = tiers_[k].raw->List("scrub/");
      if (listed.ok()) {
        for (const auto& o : *listed) {
          if (o.name.size() > 4 && o.name.compare(o.name.size() - 4, 4, ".new") == 0) (void)tiers_[k].raw->Remove(o.name);
        }
      }
    }
    return Status::OK();
  }

  std::set<Key> ListAll() {
    std::set<Key> keys;
    for (size_t k = 0; k < tiers_.size(); ++k) {
      Tier& t = tiers_[k];
      if (t.failed) continue;
      auto listed = ListCheckpoints(*t.raw, options_.name, false);
      if (!listed.ok()) {
        TierFailed(k, listed.status());
        continue;
      }
      for (const auto& c : *listed) {
        // A host's part (checkpoint/parts.h) is not a checkpoint to verify
        // on its own: its ranks are read, and repaired, by restores. But a
        // safe step this tier holds whole (its own ranks and the replicas
        // it took, doc/peer.md) is verified as a checkpoint is.
        if (!c.part_ranks.empty() && (c.safe_hosts.empty() || c.part_ranks.size() != c.ranks)) continue;
        t.holds.insert({c.name, c.step});
        keys.insert({c.name, c.step});
      }
      // What this tier no longer holds is dropped from its status.
      t.status = ReadScrubStatus(*t.raw);
      std::vector<ScrubEntry> kept;
      for (auto& e : t.status.entries) {
        if (t.holds.count({e.name, e.step}) || (!options_.name.empty() && e.name != options_.name)) {
          kept.push_back(std::move(e));
        }
      }
      t.status.entries = std::move(kept);
    }
    return keys;
  }

  std::string Scope() const {
    std::string scope = "name=" + options_.name + ";tiers=";
    for (const auto& t : tiers_) scope += t.raw->uri() + "|";
    return scope;
  }

  void LoadProgress() {
    progress_.pass = NewWriterId();
    progress_.scope = Scope();
    progress_.started_unix_ms = NowUnixMs();
    if (home_ == nullptr) return;
    auto bytes = home_->raw->ReadSmall(ScrubProgressObject());
    if (!bytes.ok()) return;
    auto record = DecodeScrubRecord(*bytes, ScrubProgressObject());
    // A pass over other tiers or names is not this one's to finish; one
    // that does not decode costs a full pass, never a skipped check.
    if (!record.ok() || record->scope != progress_.scope) return;
    progress_ = std::move(record).value();
    report_.resumed = true;
    for (const auto& e : progress_.entries) done_.insert({e.name, e.step});
  }

  Check CheckCopy(size_t k, const Key& key) {
    Check c;
    c.tier = k;
    const auto t0 = std::chrono::steady_clock::now();
    Tier& t = tiers_[k];
    auto loaded = LoadCommittedOrSafe(Reader(t), key.first, key.second);
    if (!loaded.ok()) {
      if (loaded.status().code() == StatusCode::kCorruption || loaded.status().code() == StatusCode::kNotSupported) {
        c.problem = loaded.status().message();
      } else {
        c.tier_failed = true;
        c.problem = loaded.status().ToString();
      }
    } else {
      c.loaded = true;
      c.ck = std::move(loaded).value();
      auto report = VerifyCheckpoint(Reader(t), options_.store, c.ck);
      if (!report.ok()) {
        c.tier_failed = true;
        c.problem = report.status().ToString();
      } else {
        c.report = std::move(report).value();
        if (!c.report.ok()) {
          c.problem = std::to_string(c.report.bad.size()) + " bad chunk(s), the first: item '" +
                      c.report.bad[0].item + "' chunk " + std::to_string(c.report.bad[0].chunk_index) + " in " +
                      c.report.bad[0].object + ": " + c.report.bad[0].reason;
        }
      }
    }
    c.seconds = SecondsSince(t0);
    return c;
  }

  // Rewrites what is bad on `bad.tier` from the other copies of the same
  // save (checkpoint/copies.h: each copy may name its objects its own way),
  // each bad object from a copy on which it verified: two copies bad in
  // different objects heal each other. Where the bad copy's own records do
  // not load, the reference copy's records and every object they name are
  // written there, under the reference's names. `rewritten` gets the
  // objects rewritten, also when not all could be (the error says which
  // not).
  Status Repair(const Key& key, const std::vector<Check>& checks, const Check& bad, size_t* source,
                std::vector<std::string>* rewritten) {
    // The records to repair from: a copy that verified in full if there is
    // one, else one whose records did.
    const Check* reference = nullptr;
    for (const auto& c : checks) {
      if (c.tier == bad.tier || !c.loaded) continue;
      if (reference == nullptr || (c.ok() && !reference->ok())) reference = &c;
    }
    if (reference == nullptr) return Status::NotFound("no other tier holds a copy whose records verify");
    *source = reference->tier;
    Backend& dst = *tiers_[bad.tier].raw;
    if (bad.loaded && !SameSave(bad.ck, reference->ck)) {
      return Status::Corruption("the copies on " + TierName(bad.tier) + " and " + TierName(reference->tier) +
                                " are different saves of this step (their commit records differ); "
                                "neither is replaced");
    }
    // The bad objects, under the names the repaired copy gives them: as
    // found, or, where the bad copy's own records did not load, by reading
    // its objects through the reference's manifests.
    const LoadedCheckpoint& repaired = bad.loaded ? bad.ck : reference->ck;
    std::set<std::string> objects;
    if (bad.loaded) {
      for (const auto& b : bad.report.bad) objects.insert(b.object);
    } else {
      ASSIGN_OR_RETURN(VerifyReport against, VerifyCheckpoint(Reader(tiers_[bad.tier]), options_.store, reference->ck));
      for (const auto& b : against.bad) objects.insert(b.object);
    }
    // Registered as a writer of the step: gc leaves the staged objects alone
    // while this runs (and removes them if it dies), rm waits.
    ASSIGN_OR_RETURN(auto repairer, StepCommit::Begin(dst, CheckpointId{key.first, key.second}, "", StepCommitOptions{}));
    const std::string& writer = repairer->writer_id();
    std::vector<std::string> nowhere;
    for (const auto& name : objects) {
      bool found = false;
      RETURN_IF_ERROR(RepairObject(key, checks, bad, *reference, repaired, name, writer, &found));
      if (found) {
        rewritten->push_back(name);
      } else {
        nowhere.push_back(name);
      }
    }
    if (!bad.loaded) RETURN_IF_ERROR(RewriteRecords(key, *reference, dst, writer, rewritten));
    if (!nowhere.empty()) {
      std::string list;
      for (const auto& n : nowhere) list += (list.empty() ? "" : ", ") + n;
      return Status::NotFound("no tier holds a good copy of " + list +
                              (rewritten->empty() ? "" : " (" + std::to_string(rewritten->size()) +
                                                             " other object(s) were rewritten)"));
    }
    // The repaired copy must now load and hold every object in full.
    auto reloaded = LoadCommittedOrSafe(dst, key.first, key.second);
    if (!reloaded.ok()) return reloaded.status().WithContext("after the repair");
    return CheckDataObjects(dst, *reloaded).WithContext("after the repair");
  }

  // Rewrites object `name` of the copy `repaired` names on `bad.tier` from
  // the first other copy of the same save on which it verified; `*found`
  // false when there is none.
  Status RepairObject(const Key& key, const std::vector<Check>& checks, const Check& bad, const Check& reference,
                      const LoadedCheckpoint& repaired, const std::string& name, const std::string& writer,
                      bool* found) {
    *found = false;
    for (const auto& c : checks) {
      if (c.tier == bad.tier || !c.loaded || !SameSave(c.ck, reference.ck)) continue;
      const auto names = ObjectNamesAcross(repaired, c.ck);
      auto there = names.find(name);
      if (there == names.end() || !c.Holds(there->second)) continue;
      std::vector<ObjectToCopy> one;
      for (const auto& m : c.ck.manifests) {
        for (auto& o : ObjectsToCopy(m)) {
          if (o.name == there->second && one.empty()) one.push_back(std::move(o));
        }
      }
      if (one.empty()) continue;
      // A shared object holds other steps' chunks too: all that any
      // committed step there names are checked, not only this step's.
      RETURN_IF_ERROR(AddKnownChunks(Reader(tiers_[c.tier]), key.first, &one));
      // Written beside the bad object, then swapped in whole. Every chunk
      // is checked against its crc as it is copied: a source that went bad
      // since it was verified fails the copy, and the staged object is
      // never swapped in.
      // (The staged copy is placed and hedged like any data object.)
      Backend& dst = *tiers_[bad.tier].raw;
      one[0].dst_name = RepairStagingObject(key.first, key.second, writer, name);
      one[0].placed = true;
      CopyControl control;
      control.bucket = options_.rate_bytes_per_sec > 0 ? tiers_[bad.tier].bucket.get() : nullptr;
      control.io_bytes = options_.store.io_bytes;
      control.written_total = &TierWrittenBytes(bad.tier, "repair");
      control.stop = options_.stop;
      std::vector<std::string> stored;
      Status st = CopyObjects(Reader(tiers_[c.tier]), dst, one, control, &stored);
      if (st.ok()) st = dst.Replace(stored[0], name);
      if (!st.ok()) {
        // Else gc's, once the step's writer lock is gone.
        (void)dst.Remove(stored.empty() ? one[0].dst_name : stored[0]);
        return st;
      }
      *found = true;
      return Status::OK();
    }
    return Status::OK();
  }

  // Writes the reference copy's records where the bad copy's did not load:
  // manifests, then the commit record, the one that makes the copy whole
  // again, last (at a claim's seal before the claim). Byte-identical ones
  // are left alone.
  Status RewriteRecords(const Key& key, const Check& reference, Backend& dst, const std::string& writer,
                        std::vector<std::string>* rewritten) {
    std::vector<std::string> records;
    for (const auto& r : reference.ck.commit.ranks) records.push_back(r.manifest);
    if (!reference.ck.seal.empty()) records.push_back(reference.ck.seal);
    records.push_back(CommitObject(key.first, key.second));
    for (const auto& record : records) {
      ASSIGN_OR_RETURN(std::string want, tiers_[reference.tier].raw->ReadSmall(record));
      auto have = dst.ReadSmall(record);
      if (have.ok() && *have == want) continue;
      const std::string staged = RepairStagingObject(key.first, key.second, writer, record);
      (void)dst.Remove(staged);
      RETURN_IF_ERROR(dst.PublishIfAbsent(staged, want));
      RETURN_IF_ERROR(dst.Replace(staged, record));
      rewritten->push_back(record);
    }
    return Status::OK();
  }

  void ScrubOne(const Key& key) {
    std::vector<Check> checks;
    for (size_t k = 0; k < tiers_.size(); ++k) {
      if (tiers_[k].failed || !tiers_[k].holds.count(key)) continue;
      checks.push_back(CheckCopy(k, key));
      // Reads that failed because the scrub was told to stop judge nothing.
      if (Stopped()) {
        report_.stopped = true;
        return;
      }
      Check& c = checks.back();
      if (c.tier_failed) TierFailed(k, Status::IOError(c.problem));
    }
    std::string summary = "ok";
    for (const auto& c : checks) {
      ScrubCopyResult r;
      r.name = key.first;
      r.step = key.second;
      r.tier = c.tier;
      r.chunks = c.report.chunks;
      r.bytes = c.report.bytes;
      r.seconds = c.seconds;
      r.bad = c.report.bad;
      report_.bytes += c.report.bytes;
      if (c.ok()) {
        r.state = "ok";
      } else if (c.tier_failed) {
        r.state = "failed";
        r.reason = c.problem;
      } else if (!options_.repair) {
        r.state = "bad";
        r.reason = c.problem;
      } else {
        size_t source = 0;
        Status repaired = Repair(key, checks, c, &source, &r.rewritten);
        if (!repaired.ok() && Stopped()) {
          report_.stopped = true;  // not a verdict: the next pass repairs it
          return;
        }
        if (repaired.ok()) {
          r.state = "repaired";
          r.reason = c.problem;
          r.source = source;
        } else {
          r.state = "unrepairable";
          r.reason = c.problem + "; " + (repaired.IsNotFound() ? repaired.message()
                                                               : "repair failed: " + repaired.ToString()) +
                     (r.rewritten.empty() ? " (left as it is)" : "");
        }
      }
      if (r.state != "ok" && summary != "unrepairable") summary = r.state;
      ScrubbedBytes(c.tier).Add(static_cast<double>(c.report.bytes));
      ScrubVerdicts(c.tier, r.state).Add();
      Record(c.tier, r);
      if (options_.on_copy) options_.on_copy(r);
      report_.copies.push_back(std::move(r));
    }
    if (home_ != nullptr && !home_->failed) {
      progress_.entries.push_back(ScrubEntry{key.first, key.second, summary, NowUnixMs(), ""});
      Status st = PutRecord(*home_->raw, ScrubProgressObject(), EncodeScrubRecord(progress_), holder_);
      if (!st.ok()) report_.tier_errors.push_back("could not record progress: " + st.ToString());
    }
  }

  // The copy's result goes into its tier's status record at once, so that
  // `ls` shows it even if the scrub is killed before the pass ends.
  void Record(size_t k, const ScrubCopyResult& r) {
    Tier& t = tiers_[k];
    if (t.failed) return;
    ScrubEntry e{r.name, r.step, r.state, NowUnixMs(), r.reason};
    auto it = std::find_if(t.status.entries.begin(), t.status.entries.end(),
                           [&](const ScrubEntry& x) { return x.name == r.name && x.step == r.step; });
    if (it != t.status.entries.end()) {
      *it = std::move(e);
    } else {
      t.status.entries.push_back(std::move(e));
    }
    t.status.pass = progress_.pass;
    Status st = PutRecord(*t.raw, ScrubStatusObject(), EncodeScrubRecord(t.status), holder_);
    if (!st.ok()) TierFailed(k, st.WithContext("record the scrub's result"));
  }

  const ScrubOptions& options_;
  const std::string holder_;
  std::vector<Tier> tiers_;
  Tier* home_ = nullptr;
  ScrubRecord progress_;
  std::set<Key> done_;
  ScrubReport report_;
};

}  // namespace

bool ScrubReport::ok() const {
  if (!tier_errors.empty()) return false;
  for (const auto& c : copies) {
    if (c.state != "ok" && c.state != "repaired") return false;
  }
  return true;
}

Result<ScrubReport> Scrub(const std::vector<Backend*>& tiers, const ScrubOptions& options) {
  if (!options.name.empty()) RETURN_IF_ERROR(ValidateCheckpointName(options.name));
  Scrubber scrubber(tiers, options);
  return scrubber.Run();
}

ScrubRecord ReadScrubStatus(Backend& backend) {
  auto bytes = backend.ReadSmall(ScrubStatusObject());
  if (!bytes.ok()) return {};
  auto record = DecodeScrubRecord(*bytes, ScrubStatusObject());
  return record.ok() ? std::move(record).value() : ScrubRecord{};
}

}  // namespace sluice
