// sluice scrub: read and check every committed checkpoint on every tier, at
// a capped rate.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "backends/throttled_reads.h"
#include "format/layout.h"
#include "output.h"
#include "store_flags.h"

namespace sluice::cli {
namespace {

CommandSpec ScrubSpec() {
  CommandSpec s;
  s.name = "scrub";
  s.usage = "scrub (--store URI | --tier URI...) [--name NAME] [--rate-limit RATE] [--json]";
  s.summary =
      "Reads every committed checkpoint (of NAME, or all) on every tier given, newest\n"
      "first, and checks its commit record, its manifests and every chunk's crc32c,\n"
      "reading each tier at most RATE bytes/s. Reports each checkpoint's copy on each\n"
      "tier as ok, bad (naming item, chunk, object and offset of each bad chunk) or\n"
      "unreadable (a damaged commit record or manifest). Exit 1 if any copy is not\n"
      "ok. It repairs nothing: `sluice restore` over the tiers reads a good copy and\n"
      "rewrites the bad one as it goes.";
  s.flags = StoreFlagSpecs(false);
  s.flags.insert(s.flags.end(), {
      {"name", "NAME", "scrub only this checkpoint name (default: all)"},
      {"rate-limit", "RATE", "read each tier at most RATE bytes/s, e.g. 200MiB (default: no cap)"},
      {"json", "", "print the report as one JSON object"},
  });
  return s;
}

struct CopyResult {
  std::string name;
  uint64_t step = 0;
  size_t tier = 0;
  std::string state;  // ok, bad, unreadable
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  std::vector<BadChunk> bad;
  std::string reason;  // unreadable: why
};

}  // namespace

int CmdScrub(int argc, char** argv) {
  const CommandSpec spec = ScrubSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  std::string name;
  if (flags.Has("name")) {
    auto n = NameFromFlags(flags);
    if (!n.ok()) return Fail(n.status(), true);
    name = *n;
  }
  auto rate = flags.GetSize("rate-limit", 0);
  if (!rate.ok()) return Fail(Status::InvalidArgument("--rate-limit must be a size per second, e.g. 200MiB"), true);
  auto uris = TierUrisFromFlags(flags);
  if (!uris.ok()) return Fail(uris.status(), true);
  auto store_options = StoreOptionsFromFlags(flags);
  if (!store_options.ok()) return Fail(store_options.status(), true);
  store_options->create_if_missing = false;

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<CopyResult> results;
  bool all_ok = true;
  for (size_t k = 0; k < uris->size(); ++k) {
    auto backend = OpenBackend((*uris)[k], false);
    if (!backend.ok()) return FailStoreOpen(backend.status());
    // The cap holds for the tier as a whole, whatever the reader's depth.
    const uint64_t burst = std::max<uint64_t>(store_options->io_bytes, *rate / 20);
    auto bucket = std::make_shared<TokenBucket>(*rate, burst, 0);
    std::unique_ptr<Store> store =
        Store::Open(*rate > 0 ? NewThrottledReads(std::move(backend).value(), bucket) : std::move(backend).value(),
                    *store_options);
    // Incomplete ones too: a step whose commit record or manifest no longer
    // decodes is listed as incomplete, and is a damaged copy, not a save that
    // never finished.
    auto listed = store->List(name, true);
    if (!listed.ok()) return Fail(listed.status().WithContext("tier " + std::to_string(k)));
    std::vector<CheckpointInfo> copies = std::move(listed).value();
    std::stable_sort(copies.begin(), copies.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
      return a.step > b.step;
    });
    for (const auto& c : copies) {
      if (!c.complete) {
        auto commit = store->backend().Stat({CommitObject(c.name, c.step)});
        if (!commit.ok() || commit->empty()) continue;  // never committed: nothing to scrub
      }
      CopyResult r;
      r.name = c.name;
      r.step = c.step;
      r.tier = k;
      const auto c0 = std::chrono::steady_clock::now();
      auto report = store->Verify(c.name, c.step);
      r.seconds = SecondsSince(c0);
      if (!report.ok()) {
        if (report.status().IsNotFound()) continue;  // removed since the listing
        r.state = "unreadable";
        r.reason = report.status().ToString();
      } else {
        r.chunks = report->chunks;
        r.bytes = report->bytes;
        r.bad = report->bad;
        r.state = report->ok() ? "ok" : "bad";
      }
      all_ok &= r.state == "ok";
      if (!flags.Has("json")) {
        const std::string label = CheckpointLabel(r.name, r.step);
        if (r.state == "unreadable") {
          std::printf("UNREADABLE %s tier %zu: %s\n", label.c_str(), k, r.reason.c_str());
        } else {
          for (const auto& b : r.bad) {
            std::printf("  BAD item '%s' rank %u chunk %llu: object %s offset %llu length %llu: %s\n",
                        b.item.c_str(), b.rank, static_cast<unsigned long long>(b.chunk_index), b.object.c_str(),
                        static_cast<unsigned long long>(b.object_offset),
                        static_cast<unsigned long long>(b.length), b.reason.c_str());
          }
          std::printf("%s %s tier %zu: %llu chunks, %s in %.2f s (%s)%s\n", r.state == "ok" ? "OK" : "BAD",
                      label.c_str(), k, static_cast<unsigned long long>(r.chunks), HumanBytes(r.bytes).c_str(),
                      r.seconds, HumanRate(r.seconds > 0 ? r.bytes / r.seconds : 0).c_str(),
                      r.bad.empty() ? "" : (", " + std::to_string(r.bad.size()) + " bad chunk(s)").c_str());
        }
        std::fflush(stdout);
      }
      results.push_back(std::move(r));
    }
  }
  const double secs = SecondsSince(t0);
  uint64_t bytes = 0;
  size_t bad_copies = 0;
  for (const auto& r : results) {
    bytes += r.bytes;
    bad_copies += r.state != "ok";
  }
  if (flags.Has("json")) {
    Json j;
    j.BeginObject().Key("ok").Bool(all_ok).Key("seconds").Num(secs).Key("bytes").UInt(bytes)
        .Key("rate_limit").UInt(*rate).Key("copies").BeginArray();
    for (const auto& r : results) {
      j.BeginObject()
          .Key("name").Str(r.name).Key("step").UInt(r.step).Key("tier").UInt(r.tier)
          .Key("uri").Str((*uris)[r.tier]).Key("state").Str(r.state)
          .Key("chunks").UInt(r.chunks).Key("bytes").UInt(r.bytes).Key("seconds").Num(r.seconds);
      if (!r.reason.empty()) j.Key("reason").Str(r.reason);
      j.Key("bad_chunks").BeginArray();
      for (const auto& b : r.bad) {
        j.BeginObject()
            .Key("item").Str(b.item).Key("rank").UInt(b.rank).Key("chunk").UInt(b.chunk_index)
            .Key("object").Str(b.object).Key("offset").UInt(b.object_offset)
            .Key("length").UInt(b.length).Key("reason").Str(b.reason)
            .EndObject();
      }
      j.EndArray().EndObject();
    }
    j.EndArray().EndObject();
    std::printf("%s\n", j.str().c_str());
  } else {
    std::printf("scrubbed %zu checkpoint cop%s on %zu tier(s), %s in %.2f s: %s\n", results.size(),
                results.size() == 1 ? "y" : "ies", uris->size(), HumanBytes(bytes).c_str(), secs,
                all_ok ? "all ok" : (std::to_string(bad_copies) + " not ok").c_str());
  }
  if (!all_ok) {
    std::fprintf(stderr, "sluice: %zu checkpoint cop%s not ok\n", bad_copies, bad_copies == 1 ? "y is" : "ies are");
    return kExitError;
  }
  return kExitOk;
}

}  // namespace sluice::cli
