// sluice save: a directory tree or synthetic data -> checkpoint NAME@STEP.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "item_sources.h"
#include "output.h"
#include "store_flags.h"

namespace sluice::cli {
namespace {

CommandSpec SaveSpec() {
  CommandSpec s;
  s.name = "save";
  s.usage = "save --store URI --name NAME --step N (--from DIR | --synthetic SIZE) [flags]";
  s.summary =
      "Saves every regular file under DIR as an item keyed by its relative path (or\n"
      "synthetic data), cut into crc32c-checksummed chunks, made durable, then\n"
      "committed atomically. Symlinks, devices, FIFOs, sockets and unreadable files\n"
      "are refused before anything is written.";
  s.flags = StoreFlagSpecs(true);
  s.flags.insert(s.flags.end(), {
      {"name", "NAME", "checkpoint name: 1-255 bytes, no '/', NUL or control characters"},
      {"step", "N", "checkpoint step, a non-negative integer"},
      {"from", "DIR", "directory tree to save"},
      {"synthetic", "SIZE", "save SIZE bytes of generated data instead (e.g. 2GiB)"},
      {"items", "K", "with --synthetic: number of items (default 8)"},
      {"rank", "R", "this process's rank (default 0)"},
      {"world", "W", "number of ranks saving this checkpoint together (default 1)"},
      {"timeout", "DURATION", "how long ranks wait for each other (default 10m)"},
      {"attempt", "ID", "with --world: id of this launch, the same on every rank (default\n"
                        "                            $SLUICE_ATTEMPT, else none)"},
      {"json", "", "print the result as one JSON object"},
  });
  s.details =
      "With --world W, W processes save the same NAME@STEP, each its own items (keys\n"
      "must differ across ranks). Rank 0 commits once every rank has published its\n"
      "manifest; a rank that never arrives leaves the checkpoint uncommitted and\n"
      "every waiting rank fails after --timeout. Ranks must start within --timeout\n"
      "of each other. A manifest left by a crashed earlier launch is ignored when its\n"
      "writer is known to be gone (same host) or carries another --attempt: launchers\n"
      "spanning several hosts should pass --attempt (e.g. $SLURM_JOB_ID.$SLURM_RESTART_COUNT).";
  return s;
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

}  // namespace

int CmdSave(int argc, char** argv) {
  const CommandSpec spec = SaveSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;

  // Usage checks first: nothing touches the store until these pass.
  auto name = NameFromFlags(flags);
  if (!name.ok()) return Fail(name.status(), true);
  auto step = StepFromFlags(flags, false, true);
  if (!step.ok()) return Fail(step.status(), true);
  auto rank = flags.GetU64("rank", 0);
  auto world = flags.GetU64("world", 1);
  if (!rank.ok()) return Fail(rank.status(), true);
  if (!world.ok()) return Fail(world.status(), true);
  if (*world == 0 || *world > 1'000'000 || *rank >= *world) {
    return Fail(Status::InvalidArgument("--rank must be below --world, and --world in 1..1000000"), true);
  }
  auto timeout = ParseDurationMs(flags.Get("timeout").value_or("10m"));
  if (!timeout.ok()) return Fail(timeout.status().WithContext("--timeout"), true);
  bool from = flags.Has("from"), synthetic = flags.Has("synthetic");
  if (from == synthetic) return Fail(Status::InvalidArgument("give exactly one of --from DIR and --synthetic SIZE"), true);
  auto options = StoreOptionsFromFlags(flags);
  if (!options.ok()) return Fail(options.status(), true);
  if (!flags.Has("store")) return Fail(Status::InvalidArgument("--store is required"), true);

  std::vector<TreeFile> files;
  std::vector<uint64_t> synthetic_sizes;
  uint64_t total = 0;
  if (from) {
    auto scanned = ScanTree(*flags.Get("from"));
    if (!scanned.ok()) return Fail(scanned.status());
    files = std::move(scanned).value();
    for (const auto& f : files) total += f.size;
  } else {
    auto size = flags.GetSize("synthetic", 0);
    auto items = flags.GetU64("items", 8);
    if (!size.ok()) return Fail(size.status(), true);
    if (!items.ok()) return Fail(items.status(), true);
    if (*items == 0 || *items > 10'000'000) return Fail(Status::InvalidArgument("--items must be in 1..10000000"), true);
    synthetic_sizes = SplitSizes(*size, *items);
    total = *size;
  }

  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  StoreOptions opts = *options;
  opts.rank_timeout_ms = *timeout;
  opts.create_if_missing = true;
  auto store = Store::Open(*flags.Get("store"), opts);
  if (!store.ok()) return FailStoreOpen(store.status());
  CheckpointId id{*name, **step};
  SaveOptions save;
  if (auto a = flags.Get("attempt")) {
    save.attempt = *a;
  } else if (const char* env = std::getenv("SLUICE_ATTEMPT")) {
    save.attempt = env;
  }
  auto writer = (*store)->BeginCheckpoint(id, static_cast<uint32_t>(*rank), static_cast<uint32_t>(*world), save);
  if (!writer.ok()) return Fail(writer.status());
  (*writer)->SetExpectedBytes(total);

  Progress progress("save", total);
  if (from) {
    for (const auto& f : files) {
      auto src = FileSource::Open(f);
      if (!src.ok()) return Fail(src.status());
      CountingSource counted(**src, progress);
      Status st = (*writer)->AddItem(f.key, FileMetadata(f.mode), f.size, counted);
      if (st.ok()) st = (*src)->Close();
      if (!st.ok()) return Fail(st);
    }
  } else {
    char key[64];
    for (size_t i = 0; i < synthetic_sizes.size(); ++i) {
      snprintf(key, sizeof key, "synthetic/rank%llu/item-%06zu", static_cast<unsigned long long>(*rank), i);
      SyntheticSource src(*rank * 1'000'003 + i, synthetic_sizes[i]);
      CountingSource counted(src, progress);
      Status st = (*writer)->AddItem(key, "", synthetic_sizes[i], counted);
      if (!st.ok()) return Fail(st);
    }
  }
  auto stats = (*writer)->Commit();
  progress.Done();
  if (!stats.ok()) return Fail(stats.status());
  const double secs = SecondsSince(t0);
  const double cpu = ProcessCpuSeconds() - cpu0;
  if (flags.Has("json")) {
    Json j;
    j.BeginObject()
        .Key("name").Str(id.name).Key("step").UInt(id.step)
        .Key("rank").UInt(*rank).Key("world").UInt(*world)
        .Key("bytes").UInt(stats->bytes).Key("items").UInt(stats->items)
        .Key("chunks").UInt(stats->chunks).Key("objects").UInt(stats->objects)
        .Key("seconds").Num(secs).Key("bytes_per_second").Num(secs > 0 ? stats->bytes / secs : 0)
        .Key("cpu_seconds").Num(cpu).Key("committed").Bool(stats->committed)
        .Key("io_path").Str((*store)->backend().caps().io_path)
        .EndObject();
    std::printf("%s\n", j.str().c_str());
  } else {
    std::printf("saved %s@%llu rank %llu/%llu: %llu items, %s in %.2f s (%s), %s\n", id.name.c_str(),
                static_cast<unsigned long long>(id.step), static_cast<unsigned long long>(*rank),
                static_cast<unsigned long long>(*world), static_cast<unsigned long long>(stats->items),
                HumanBytes(stats->bytes).c_str(), secs, HumanRate(secs > 0 ? stats->bytes / secs : 0).c_str(),
                stats->committed ? "committed" : "manifest published, committed by rank 0");
  }
  return kExitOk;
}

}  // namespace sluice::cli
