// sluice save: a directory tree or synthetic data -> checkpoint NAME@STEP.
#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>

#include "sluice/aligned_buffer.h"
#include "item_sources.h"
#include "output.h"
#include "serve_metrics.h"
#include "store_flags.h"

namespace sluice::cli {
CommandSpec SaveSpec() {
  CommandSpec s;
  s.name = "save";
  s.usage = "save (--store URI | --tier URI...) --name NAME --step N (--from DIR | --synthetic SIZE) [flags]";
  s.summary =
      "Saves every regular file under DIR as an item keyed by its relative path (or\n"
      "synthetic data), cut into crc32c-checksummed chunks, made durable, then\n"
      "committed atomically. Symlinks, devices, FIFOs, sockets and unreadable files\n"
      "are refused before anything is written.";
  s.flags = StoreFlagSpecs(true);
  for (auto& f : TierPolicyFlagSpecs()) s.flags.push_back(f);
  s.flags.push_back(MetricsListenFlagSpec());
  s.flags.insert(s.flags.end(), {
      {"async", "", "print the stall as soon as the data is in staging, then write on"},
      {"detach", "", "with --async: exit once tier 0 has committed, leaving later tiers\n"
                     "                            to `sluice drain`"},
      {"staging", "SIZE", "staging memory (default: the checkpoint's size with --async, up\n"
                          "                            to 8GiB; else up to 256MiB); larger checkpoints stream"},
      {"copy-threads", "N", "threads copying into staging (default 2)"},
      {"lock-staging", "", "mlock the staging memory"},
      {"name", "NAME", "checkpoint name: 1-255 bytes of UTF-8, no '/' or control characters"},
      {"step", "N", "checkpoint step, a non-negative integer"},
      {"from", "DIR", "directory tree to save"},
      {"synthetic", "SIZE", "save SIZE bytes of generated data instead (e.g. 2GiB)"},
      {"items", "K", "with --synthetic: number of items (default 8)"},
      {"change", "FRACTION", "with --synthetic: the fraction of items (0..1) whose bytes differ\n"
                             "                            from step N-1 (default 0: every step the same), for\n"
                             "                            benchmarking incremental saves"},
      {"full", "", "write every chunk, even those unchanged since the newest step\n"
                   "                            (default: incremental, see below)"},
      {"rank", "R", "this process's rank (default 0)"},
      {"world", "W", "number of ranks saving this checkpoint together (default 1)"},
      {"timeout", "DURATION", "how long ranks wait for each other (default 10m)"},
      {"attempt", "ID", "with --world: id of this launch, the same on every rank (default\n"
                        "                            $SLUICE_ATTEMPT, else none)"},
      {"tier0-per-host", "", "with --world and several --tier: tier 0 is this host's own (other\n"
                             "                            hosts' ranks have theirs); the checkpoint commits on tier 1\n"
                             "                            (see below)"},
      {"max-backlog", "N", "before saving, check each later tier's backlog of NAME (steps\n"
                           "                            committed on an earlier tier and due there, as `ls --backlog`\n"
                           "                            counts them): at N or more, fail or wait (--when-backlogged)"},
      {"max-backlog-bytes", "SIZE", "the same for the backlog's bytes"},
      {"when-backlogged", "fail|wait", "past --max-backlog(-bytes): exit 1 naming the tier (default), or\n"
                                       "                            wait, checking every second, until a drain brings it under"},
      {"json", "", "print the result as one JSON object"},
  });
  s.details =
      "With --world W, W processes save the same NAME@STEP, each its own items (keys\n"
      "must differ across ranks). Rank 0 commits once every rank has published its\n"
      "manifest; a rank that never arrives leaves the checkpoint uncommitted and\n"
      "every waiting rank fails after --timeout. Ranks must start within --timeout\n"
      "of each other. A manifest left by a crashed earlier launch is ignored when its\n"
      "writer is known to be gone (same host) or carries another --attempt: launchers\n"
      "spanning several hosts should pass --attempt (e.g. $SLURM_JOB_ID.$SLURM_RESTART_COUNT).\n"
      "\n"
      "With several --tier, save waits until every tier has committed (unless\n"
      "--detach); a tier that fails is retried with backoff (up to a minute apart),\n"
      "each failure said on stderr. Interrupting it then loses nothing: tier 0 holds\n"
      "the committed checkpoint and `sluice drain` (or the next save of NAME)\n"
      "finishes the later tiers.\n"
      "\n"
      "--tier0-per-host, for a job whose ranks run on several hosts, each with its\n"
      "own tier 0 (e.g. local NVMe) and all sharing tier 1 (e.g. rados://): each rank\n"
      "writes its items to its host's tier 0 (the stall is still one copy into\n"
      "staging), copies them straight on to tier 1 (under tier 1's --rate-limit),\n"
      "and rank 0 commits the checkpoint on tier 1. Each tier 0 then records the\n"
      "part it holds (`ls` shows it as part); `restore --rank R --tier LOCAL --tier\n"
      "SHARED` reads rank R from the local part when it is there, else from tier 1\n"
      "(a replaced host). The save waits for the commit on tier 1 even with\n"
      "--detach; its steps are written in full (not incremental), and tier 1's\n"
      "backlog policy is drain-every. With --world 1 it changes nothing.\n"
      "\n"
      "Saves are incremental: a chunk whose content hash (XXH3-128) and CRC32C equal\n"
      "a chunk of the newest committed step of NAME on tier 0 (same rank) is not\n"
      "written again but referenced there. Removing that step keeps what later steps\n"
      "reference; restore, verify, scrub and drains follow the references. --full\n"
      "writes everything.\n"
      "\n"
      "A later tier slower than the checkpoint rate falls behind. --backlog-policy\n"
      "coalesce (the default) then drains only the newest step waiting for it, and\n"
      "older waiting steps are superseded there: they stay on earlier tiers only as\n"
      "those tiers' --keep-last allows. drain-every copies every step, oldest first,\n"
      "and earlier tiers keep each until it has been copied. `sluice ls --backlog`\n"
      "shows each tier's backlog; --max-backlog stops a save from adding to it.";
  return s;
}

namespace {

// The first later tier whose backlog of `name` is at or over a limit, as a
// sentence; empty if none is.
Result<std::string> BacklogOverLimit(Pipeline& pipeline, const std::string& name, uint64_t max_steps,
                                     uint64_t max_bytes) {
  ASSIGN_OR_RETURN(auto listed, pipeline.List(name));
  std::vector<std::string> uris;
  for (size_t k = 0; k < pipeline.tier_count(); ++k) uris.push_back(pipeline.tier(k).backend().uri());
  const auto backlog = BacklogOf(listed, uris);
  for (size_t k = 1; k < backlog.size(); ++k) {
    const bool steps = max_steps != 0 && backlog[k].steps >= max_steps;
    const bool bytes = max_bytes != 0 && backlog[k].bytes >= max_bytes;
    if (!steps && !bytes) continue;
    return "tier " + std::to_string(k) + " (" + backlog[k].uri + ") has a backlog of " +
           std::to_string(backlog[k].steps) + " step(s) of " + name + ", " + HumanBytes(backlog[k].bytes) +
           ", not yet drained there (" +
           (steps ? "--max-backlog " + std::to_string(max_steps) : "--max-backlog-bytes " + HumanBytes(max_bytes)) +
           ")";
  }
  return std::string();
}

// Counts bytes into the progress line as the writer pulls them, so that one
// big file shows progress too.
class CountingSource final : public ItemSource {
 public:
  CountingSource(ItemSource& inner, Progress& progress) : inner_(inner), progress_(progress) {}
  Result<size_t> Read(void* buf, size_t len) override {
    ASSIGN_OR_RETURN(size_t n, inner_.Read(buf, len));
    progress_.Add(n);
    return n;
  }

 private:
  ItemSource& inner_;
  Progress& progress_;
};

// What the command line asks of one save, checked before the store is
// touched.
struct SaveArgs {
  std::string name;
  uint64_t step = 0;
  uint64_t rank = 0, world = 1;
  uint64_t timeout_ms = 0;
  bool from = false, synthetic = false, async = false, detach = false;
  PipelineOptions pipeline;
  uint64_t max_backlog = 0, max_backlog_bytes = 0;
  std::string when_backlogged;
  std::vector<TreeFile> files;
  std::vector<uint64_t> synthetic_sizes;
  uint64_t total = 0;
  double change = 0;
  uint64_t staging_bytes = 0;
  uint64_t copy_threads = 2;
  bool backlog_limited() const { return max_backlog > 0 || max_backlog_bytes > 0; }
};

// The flags' usage checks (exit 2 on a bad one).
int ParseSaveFlags(const Flags& flags, SaveArgs* a) {
  auto name = NameFromFlags(flags);
  if (!name.ok()) return Fail(name.status(), true);
  a->name = *name;
  auto step = StepFromFlags(flags, false, true);
  if (!step.ok()) return Fail(step.status(), true);
  a->step = **step;
  auto rank = flags.GetU64("rank", 0);
  auto world = flags.GetU64("world", 1);
  if (!rank.ok()) return Fail(rank.status(), true);
  if (!world.ok()) return Fail(world.status(), true);
  if (*world == 0 || *world > 1'000'000 || *rank >= *world) {
    return Fail(Status::InvalidArgument("--rank must be below --world, and --world in 1..1000000"), true);
  }
  a->rank = *rank;
  a->world = *world;
  auto timeout = ParseDurationMs(flags.Get("timeout").value_or("10m"));
  if (!timeout.ok()) return Fail(timeout.status().WithContext("--timeout"), true);
  a->timeout_ms = *timeout;
  a->from = flags.Has("from");
  a->synthetic = flags.Has("synthetic");
  if (a->from == a->synthetic) {
    return Fail(Status::InvalidArgument("give exactly one of --from DIR and --synthetic SIZE"), true);
  }
  auto popts = PipelineOptionsFromFlags(flags, true);
  if (!popts.ok()) return Fail(popts.status(), true);
  a->pipeline = *popts;
  a->async = flags.Has("async");
  a->detach = flags.Has("detach");
  if (flags.Has("tier0-per-host")) {
    if (a->pipeline.tiers.size() < 2) {
      return Fail(Status::InvalidArgument("--tier0-per-host needs a second --tier that every host shares"), true);
    }
    a->pipeline.tier0_per_host = true;
    // Every rank copies its part of every step to tier 1.
    if (flags.GetAll("backlog-policy").empty()) a->pipeline.tiers[1].backlog = BacklogPolicy::kDrainEvery;
    if (Status st = a->pipeline.Validate(); !st.ok()) return Fail(st, true);
  }
  if (a->detach && !a->async) return Fail(Status::InvalidArgument("--detach needs --async"), true);
  auto max_backlog = flags.GetU64("max-backlog", 0);
  if (!max_backlog.ok()) return Fail(max_backlog.status().WithContext("--max-backlog"), true);
  auto max_backlog_bytes = flags.GetSize("max-backlog-bytes", 0);
  if (!max_backlog_bytes.ok()) return Fail(max_backlog_bytes.status().WithContext("--max-backlog-bytes"), true);
  a->max_backlog = *max_backlog;
  a->max_backlog_bytes = *max_backlog_bytes;
  a->when_backlogged = flags.Get("when-backlogged").value_or("fail");
  if (a->when_backlogged != "fail" && a->when_backlogged != "wait") {
    return Fail(Status::InvalidArgument("--when-backlogged must be fail or wait, not '" + a->when_backlogged + "'"),
                true);
  }
  if (flags.Has("when-backlogged") && !a->backlog_limited()) {
    return Fail(Status::InvalidArgument("--when-backlogged needs --max-backlog or --max-backlog-bytes"), true);
  }
  if (a->backlog_limited() && a->pipeline.tiers.size() < 2) {
    return Fail(Status::InvalidArgument("--max-backlog needs several --tier (a backlog is what later tiers lack)"),
                true);
  }
  return -1;
}

// What is saved (--from's tree or --synthetic's items) and the staging it
// takes.
int ParseSaveSource(const Flags& flags, SaveArgs* a) {
  if (a->from) {
    auto scanned = ScanTree(*flags.Get("from"));
    if (!scanned.ok()) return Fail(scanned.status());
    a->files = std::move(scanned).value();
    for (const auto& f : a->files) a->total += f.size;
  } else {
    auto size = flags.GetSize("synthetic", 0);
    auto items = flags.GetU64("items", 8);
    if (!size.ok()) return Fail(size.status(), true);
    if (!items.ok()) return Fail(items.status(), true);
    if (*items == 0 || *items > 10'000'000) return Fail(Status::InvalidArgument("--items must be in 1..10000000"), true);
    a->synthetic_sizes = SplitSizes(*size, *items);
    a->total = *size;
  }
  if (flags.Has("change")) {
    if (!a->synthetic) return Fail(Status::InvalidArgument("--change needs --synthetic"), true);
    char* end = nullptr;
    const std::string text = *flags.Get("change");
    a->change = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(a->change >= 0 && a->change <= 1)) {
      return Fail(Status::InvalidArgument("--change must be a fraction in 0..1, not '" + text + "'"), true);
    }
  }
  // Staging: by default big enough to take the whole checkpoint (--async,
  // so the command can report its stall and the sources are free), or a
  // modest streaming window for a synchronous save.
  const uint64_t slab = AlignUp(a->pipeline.store.io_bytes, 4096);
  // Each data object starts on a slab of its own: the image is up to one
  // slab per object larger than the bytes.
  const uint64_t image =
      AlignUp(a->total, slab) + slab * (a->total / std::max<uint64_t>(a->pipeline.store.object_bytes, 1) + 1);
  const uint64_t staging = std::max(slab, std::min<uint64_t>(image, a->async ? (8ull << 30) : (256ull << 20)));
  auto staging_flag = flags.GetSize("staging", staging);
  if (!staging_flag.ok()) return Fail(staging_flag.status(), true);
  a->staging_bytes = *staging_flag;
  auto copy_threads = flags.GetU64("copy-threads", 2);
  if (!copy_threads.ok() || *copy_threads == 0 || *copy_threads > 64) {
    return Fail(Status::InvalidArgument("--copy-threads must be in 1..64"), true);
  }
  a->copy_threads = *copy_threads;
  return -1;
}

// Waits (or fails, per --when-backlogged) while a later tier's backlog of
// the name is over --max-backlog.
int WaitForBacklog(Pipeline& pipeline, const SaveArgs& a) {
  for (bool told = false; a.backlog_limited();) {
    auto over = BacklogOverLimit(pipeline, a.name, a.max_backlog, a.max_backlog_bytes);
    if (!over.ok()) return Fail(over.status().WithContext("--max-backlog"));
    if (over->empty()) break;
    if (a.when_backlogged == "fail") return Fail(Status::Unavailable(*over));
    if (!told) std::fprintf(stderr, "sluice: %s: waiting for drains (`sluice drain`) to bring it under\n", over->c_str());
    told = true;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  return -1;
}

// The items' sources, alive until the snapshot is taken.
struct SaveSources {
  std::vector<std::unique_ptr<FileSource>> files;
  std::vector<std::unique_ptr<SyntheticSource>> synthetic;
  std::vector<std::unique_ptr<CountingSource>> counted;
};

Status AddSaveItems(PendingCheckpoint& pending, const SaveArgs& a, Progress& progress, SaveSources* sources) {
  if (a.from) {
    for (const auto& f : a.files) {
      ASSIGN_OR_RETURN(auto src, FileSource::Open(f));
      sources->files.push_back(std::move(src));
      sources->counted.push_back(std::make_unique<CountingSource>(*sources->files.back(), progress));
      RETURN_IF_ERROR(pending.AddItem(f.key, FileMetadata(f.mode), f.size, *sources->counted.back()));
    }
    return Status::OK();
  }
  char key[64];
  for (size_t i = 0; i < a.synthetic_sizes.size(); ++i) {
    snprintf(key, sizeof key, "synthetic/rank%llu/item-%06zu", static_cast<unsigned long long>(a.rank), i);
    const uint64_t changed_at = SyntheticChangeStep(i, a.synthetic_sizes.size(), a.change, a.step);
    sources->synthetic.push_back(std::make_unique<SyntheticSource>(
        a.rank * 1'000'003 + i + changed_at * 0x2545F4914F6CDD1Dull, a.synthetic_sizes[i]));
    sources->counted.push_back(std::make_unique<CountingSource>(*sources->synthetic.back(), progress));
    RETURN_IF_ERROR(pending.AddItem(key, "", a.synthetic_sizes[i], *sources->counted.back()));
  }
  return Status::OK();
}

// Waits for the first `tiers` tiers, telling the user about each failed
// attempt (the pipeline retries them with backoff), and, at a later tier's
// first, that `label` is committed on tier 0 already.
Status WaitForTiers(SaveHandle& handle, size_t tiers, const std::string& label) {
  Status waited;
  for (size_t k = 0; k < tiers && waited.ok(); ++k) {
    std::string last_error;
    for (;;) {
      auto pr = handle.progress();
      if (pr[k].state == TierState::kCommitted || pr[k].state == TierState::kSkipped) break;
      if (handle.done()) {
        waited = handle.WaitTier(k);
        break;
      }
      if (!pr[k].error.ok() && pr[k].error.message() != last_error) {
        if (k > 0 && last_error.empty() && pr[0].state == TierState::kCommitted) {
          std::fprintf(stderr, "sluice: %s is committed on tier 0 (%s); tier %zu is retried with backoff "
                               "(Ctrl-C leaves it to `sluice drain`)\n",
                       label.c_str(), pr[0].uri.c_str(), k);
        }
        last_error = pr[k].error.message();
        std::fprintf(stderr, "sluice: tier %zu (%s): %s\n", k, pr[k].uri.c_str(), last_error.c_str());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return waited;
}

struct SaveOutcome {
  SaveStats stats;
  std::vector<TierProgress> tiers;
  double seconds = 0, cpu_seconds = 0, stall_seconds = 0;
  uint64_t resumed = 0;  // earlier checkpoints drained
};

void PrintSaveJson(Pipeline& pipeline, const SaveArgs& a, const SaveOutcome& o) {
  JsonValue tiers = JsonValue::array();
  for (size_t k = 0; k < o.tiers.size(); ++k) {
    const auto& t = o.tiers[k];
    // What is not committed when the command exits is left to `sluice drain`.
    const bool settled = t.state == TierState::kCommitted || t.state == TierState::kSkipped;
    JsonValue tier = {{"uri", t.uri}, {"state", settled ? TierStateName(t.state) : "pending"},
                      {"durable_seconds", t.state == TierState::kCommitted ? JsonValue(t.durable_seconds) : JsonValue()}};
    if (!settled && !t.error.ok()) tier["error"] = t.error.message();
    if (const Placement* p = pipeline.tier(k).backend().caps().placement; p != nullptr && p->policy().enabled) {
      tier["hedging"] = HedgeJson(p->Stats());
    }
    tiers.push_back(std::move(tier));
  }
  const SaveStats& stats = o.stats;
  PrintJson({{"name", a.name}, {"step", a.step}, {"rank", a.rank}, {"world", a.world}, {"bytes", stats.bytes},
             {"referenced_bytes", stats.referenced_bytes},
             {"base_step", stats.referenced_bytes > 0 ? JsonValue(stats.base_step) : JsonValue()},
             {"items", stats.items}, {"chunks", stats.chunks}, {"seconds", o.seconds},
             {"bytes_per_second", o.seconds > 0 ? stats.bytes / o.seconds : 0}, {"cpu_seconds", o.cpu_seconds},
             {"committed", true}, {"stall_seconds", o.stall_seconds}, {"earlier_checkpoints_drained", o.resumed},
             {"io_path", pipeline.tier(0).backend().caps().io_path}, {"tiers", tiers}});
}

void PrintSaveText(const SaveArgs& a, const SaveOutcome& o) {
  const SaveStats& stats = o.stats;
  std::printf("saved %s@%llu rank %llu/%llu: %llu items, %s in %.2f s (%s), stall %.3f s\n", a.name.c_str(),
              static_cast<unsigned long long>(a.step), static_cast<unsigned long long>(a.rank),
              static_cast<unsigned long long>(a.world), static_cast<unsigned long long>(stats.items),
              HumanBytes(stats.bytes).c_str(), o.seconds, HumanRate(o.seconds > 0 ? stats.bytes / o.seconds : 0).c_str(),
              o.stall_seconds);
  if (stats.referenced_bytes > 0) {
    std::printf("  incremental: %s unchanged since step %llu referenced there, %s written\n",
                HumanBytes(stats.referenced_bytes).c_str(), static_cast<unsigned long long>(stats.base_step),
                HumanBytes(stats.bytes - stats.referenced_bytes).c_str());
  }
  if (o.resumed > 0) {
    std::printf("  also drained %llu earlier checkpoint(s) of %s that were not on every tier\n",
                static_cast<unsigned long long>(o.resumed), a.name.c_str());
  }
  for (size_t k = 0; k < o.tiers.size(); ++k) {
    const auto& t = o.tiers[k];
    if (t.state == TierState::kCommitted) {
      // With a tier 0 per host, tier 0 holds this rank's part of a
      // checkpoint committed on tier 1.
      const bool part = k == 0 && a.pipeline.tier0_per_host && a.world > 1;
      std::printf("  tier %zu %s: %s, durable after %.2f s\n", k, t.uri.c_str(),
                  part ? "part recorded (the checkpoint is committed on tier 1)" : "committed", t.durable_seconds);
    } else if (t.state == TierState::kSkipped) {
      std::printf("  tier %zu %s: drained by rank 0\n", k, t.uri.c_str());
    } else if (!t.error.ok()) {
      std::printf("  tier %zu %s: left to `sluice drain`; not reached yet: %s\n", k, t.uri.c_str(),
                  t.error.message().c_str());
    } else {
      std::printf("  tier %zu %s: left to `sluice drain`\n", k, t.uri.c_str());
    }
  }
}

}  // namespace

int CmdSave(int argc, char** argv) {
  const CommandSpec spec = SaveSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  // Usage checks first: nothing touches the store until these pass.
  SaveArgs a;
  if (int failed = ParseSaveFlags(flags, &a); failed >= 0) return failed;
  if (int failed = ParseSaveSource(flags, &a); failed >= 0) return failed;

  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  PipelineOptions po = a.pipeline;
  po.store.rank_timeout_ms = a.timeout_ms;
  po.staging_bytes = a.staging_bytes;
  po.copy_threads = static_cast<uint32_t>(a.copy_threads);
  po.lock_staging = flags.Has("lock-staging");
  po.resume_drains = false;  // finishing earlier drains is `sluice drain`'s job
  auto metrics_server = ServeMetricsIfAsked(flags);
  if (!metrics_server.ok()) return Fail(metrics_server.status(), metrics_server.status().code() == StatusCode::kInvalidArgument);
  auto pipeline = Pipeline::Open(po);
  if (!pipeline.ok()) return FailStoreOpen(pipeline.status());
  if (int failed = WaitForBacklog(**pipeline, a); failed >= 0) return failed;
  CheckpointId id{a.name, a.step};
  SaveOptions save;
  save.incremental = !flags.Has("full");
  if (auto attempt = flags.Get("attempt")) {
    save.attempt = *attempt;
  } else if (const char* env = std::getenv("SLUICE_ATTEMPT")) {
    save.attempt = env;
  }
  auto pending = (*pipeline)->Begin(id, static_cast<uint32_t>(a.rank), static_cast<uint32_t>(a.world), save);
  if (!pending.ok()) return Fail(pending.status());

  Progress progress("save", a.total);
  SaveSources sources;
  if (Status st = AddSaveItems(**pending, a, progress, &sources); !st.ok()) return Fail(st);
  auto handle = (*pending)->Snapshot();
  if (!handle.ok()) {
    progress.Done();
    return Fail(handle.status());
  }
  for (auto& f : sources.files) {
    if (Status st = f->Close(); !st.ok()) return Fail(st);
  }
  sources.files.clear();
  if (a.async && !flags.Has("json")) {
    std::printf("snapshot of %s@%llu in staging: stall %.3f s; writing on in the background\n",
                id.name.c_str(), static_cast<unsigned long long>(id.step), (*handle)->stall_seconds());
    std::fflush(stdout);
  }
  const size_t tiers = (*pipeline)->tier_count();
  Status waited = WaitForTiers(**handle, a.detach ? 1 : tiers, CheckpointLabel(id.name, id.step));
  progress.Done();
  if (!waited.ok()) return Fail(waited);
  SaveOutcome outcome;
  outcome.tiers = (*handle)->progress();
  // Finish what earlier saves of this name left undrained (a killed save, a
  // --detach): the next save resumes it, as `sluice drain --name` would.
  if (!a.detach && tiers > 1 && a.rank == 0) {
    auto report = (*pipeline)->Drain(id.name);
    if (report.ok()) {
      outcome.resumed = report->checkpoints_drained;
      for (const auto& f : report->failures) std::fprintf(stderr, "sluice: earlier checkpoint not drained: %s\n", f.c_str());
    }
  }
  outcome.stats = (*handle)->stats();
  outcome.seconds = SecondsSince(t0);
  outcome.cpu_seconds = ProcessCpuSeconds() - cpu0;
  outcome.stall_seconds = (*handle)->stall_seconds();
  if (flags.Has("json")) {
    PrintSaveJson(**pipeline, a, outcome);
  } else {
    PrintSaveText(a, outcome);
  }
  return kExitOk;
}

}  // namespace sluice::cli
