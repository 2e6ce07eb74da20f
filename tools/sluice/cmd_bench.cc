// sluice bench: an MLPerf-Storage-style checkpoint workload. R ranks save N
// checkpoints together (each fsynced and committed), caches are dropped,
// then the ranks read the N checkpoints back, verifying every chunk.
// Throughput is total bytes / the slowest rank's duration, as in MLPerf.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bench_ranks.h"
#include "bench_report.h"
#include "item_sources.h"
#include "output.h"
#include "serve_metrics.h"
#include "store_flags.h"
#include "sluice/aligned_buffer.h"

namespace sluice::cli {
namespace {

struct Preset {
  const char* name;
  uint32_t ranks;
  uint64_t total_gib;  // whole checkpoint, all ranks
};

// The MLPerf Storage v2.0 checkpointing workloads (Llama 3 model + optimizer
// state): ranks and approximate total checkpoint size.
constexpr Preset kPresets[] = {
    {"llama3-8b", 8, 105},
    {"llama3-70b", 64, 912},
    {"llama3-405b", 512, 5417},
    {"llama3-1t", 1024, 18432},
};

}  // namespace

CommandSpec BenchSpec() {
  CommandSpec s;
  s.name = "bench";
  s.usage = "bench --store URI [--preset NAME] [--scale F | --size SIZE] [flags]";
  s.summary =
      "MLPerf-Storage-style checkpoint benchmark: RANKS ranks write CHECKPOINTS\n"
      "checkpoints together (checksummed, fsynced, committed), caches are dropped,\n"
      "then every checkpoint is restored into memory (each rank's own, mapped once\n"
      "and faulted in by the first restore, as a trainer's tensors) with every chunk\n"
      "verified. Reports write and read\n"
      "throughput (total bytes / slowest rank's time), per-checkpoint durations and\n"
      "CPU seconds per GiB. bench/run_bench.sh runs fio on the same filesystem in\n"
      "the same run and prints sluice/fio ratios.";
  s.flags = StoreFlagSpecs(true);
  for (auto& f : TierPolicyFlagSpecs()) s.flags.push_back(f);
  s.flags.push_back(MetricsListenFlagSpec());
  s.flags.insert(s.flags.end(), {
      {"preset", "NAME", "llama3-8b (default), llama3-70b, llama3-405b, llama3-1t"},
      {"scale", "F", "fraction of the preset's checkpoint size to write"},
      {"size", "SIZE", "checkpoint size (all ranks together); overrides --scale"},
      {"ranks", "N", "ranks (default: the preset's, at most 8 on this tool)"},
      {"checkpoints", "N", "checkpoints written and read (default 3)"},
      {"items", "K", "items (tensors) per rank (default 16)"},
      {"mode", "threads|processes", "run ranks as threads (default) or forked processes (file stores only)"},
      {"no-drop-caches", "", "do not drop the page cache between writes and reads"},
      {"keep", "", "keep the benchmark's checkpoints instead of removing them"},
      {"json", "", "print the result as one JSON object"},
      {"async", "", "measure the stall instead: snapshot a state held in memory through the\n"
                    "                            staged pipeline (tiers from --store or --tier), next to a bare\n"
                    "                            memcpy of the same bytes; default size 2GiB"},
      {"staging", "SIZE", "with --async: staging memory (default: the checkpoint's size)"},
      {"copy-threads", "N", "with --async: threads copying into staging, and for the memcpy (default 2)"},
      {"lock-staging", "", "with --async: mlock the staging memory"},
      {"report", "DIR", "also write DIR/index.html: SVG plots (gnuplot) of throughput over time per\n"
                        "                            rank (per tier with --async) against fio or rados bench on the\n"
                        "                            same store in the same run, and of the stall against memcpy"},
  });
  s.details =
      "Default size: the preset scaled to what this machine does in about a minute\n"
      "(4 GiB per checkpoint), capped to a fifth of the store's free space.";
  return s;
}

namespace {

// The write/read bench's page: each rank's write throughput over time, and
// every checkpoint's write and read throughput, against the ceiling.
Status WriteBenchReport(const std::string& dir, const ByteSampler& sampler, const Ceiling& ceiling,
                        const std::vector<double>& write_gibps, const std::vector<double>& read_gibps,
                        const std::string& json, const std::string& what) {
  const double G = 1ull << 30;
  const size_t n = sampler.series().size();
  ReportPlot over_time{"write_over_time", "Write throughput over time, per rank", "", "", ""};
  over_time.data = "# seconds";
  for (const auto& name : sampler.series()) over_time.data += " " + name;
  over_time.data += " all\n";
  for (const auto& row : sampler.rows()) {
    double total = 0;
    std::string line = FormatNumber(row[0]);
    for (size_t i = 1; i < row.size(); ++i) {
      line += " " + FormatNumber(row[i] / G);
      total += row[i] / G;
    }
    over_time.data += line + " " + FormatNumber(total) + "\n";
  }
  std::string plot = "set xlabel 'seconds'\nset ylabel 'GiB/s written to tier 0'\nset yrange [0:*]\nplot ";
  for (size_t i = 0; i < n; ++i) {
    plot += "'write_over_time.dat' using 1:" + std::to_string(i + 2) + " with lines title " +
            GnuplotQuote(sampler.series()[i]) + ", ";
  }
  plot += "'write_over_time.dat' using 1:" + std::to_string(n + 2) + " with lines lw 2 title 'all ranks'";
  const bool have = !ceiling.tool.empty();
  if (have) plot += ", " + FormatNumber(ceiling.write_bytes_per_sec / G) + " with lines dt 2 lw 2 title 'ceiling: write'";
  over_time.gnuplot = plot;
  over_time.caption = "Bytes each rank's saves wrote to tier 0, every 0.1 s. " +
                      (have ? "Dashed: " + ceiling.tool + ", same store, same run." : ceiling.note);

  ReportPlot per_ckpt{"per_checkpoint", "Throughput per checkpoint", "", "", ""};
  per_ckpt.data = "# checkpoint write_gibps read_gibps\n";
  for (size_t c = 0; c < write_gibps.size(); ++c) {
    per_ckpt.data += std::to_string(c + 1) + " " + FormatNumber(write_gibps[c]) + " " +
                     (c < read_gibps.size() ? FormatNumber(read_gibps[c]) : std::string("NaN")) + "\n";
  }
  per_ckpt.gnuplot = "set xlabel 'checkpoint'\nset ylabel 'GiB/s'\nset xtics 1\nset yrange [0:*]\n"
                     "set xrange [0.5:" + std::to_string(write_gibps.size()) + ".5]\n"
                     "plot 'per_checkpoint.dat' using 1:2 with linespoints pt 7 title 'sluice write (committed)', "
                     "'' using 1:3 with linespoints pt 5 title 'sluice read (verified)'";
  if (have) {
    per_ckpt.gnuplot += ", " + FormatNumber(ceiling.write_bytes_per_sec / G) + " with lines dt 2 title 'ceiling: write', " +
                        FormatNumber(ceiling.read_bytes_per_sec / G) + " with lines dt 3 title 'ceiling: read'";
  }
  per_ckpt.caption = "Total bytes over the slowest rank's time, per checkpoint (MLPerf Storage's measure).";

  const double mw = Median(write_gibps), mr = Median(read_gibps);
  std::string summary = "<p>" + HtmlEscape(what) + "</p>\n<table><tr><th></th><th>sluice median</th>"
                        "<th>ceiling</th><th>sluice / ceiling</th></tr>\n";
  for (int k = 0; k < 2; ++k) {
    const double m = k == 0 ? mw : mr, c = (k == 0 ? ceiling.write_bytes_per_sec : ceiling.read_bytes_per_sec) / G;
    summary += std::string("<tr><th>") + (k == 0 ? "write" : "read") + "</th><td>" + FormatNumber(m) + " GiB/s</td><td>" +
               (have ? FormatNumber(c) + " GiB/s" : "-") + "</td><td>" + (have && c > 0 ? FormatNumber(m / c) : "-") + "</td></tr>\n";
  }
  summary += "</table>\n<p>Ceiling: " + HtmlEscape(have ? ceiling.tool : ceiling.note) + "</p>";
  return WriteReport(dir, "sluice bench", summary, {over_time, per_ckpt}, json);
}


// What the flags ask of the write/read bench (or the async one).
struct BenchArgs {
  const Preset* preset = nullptr;
  uint32_t ranks = 0;
  uint64_t checkpoints = 0;
  uint64_t items = 0;
  std::string mode;
  uint64_t size = 0;
  bool size_given = false;
};

int ParseBenchFlags(const Flags& flags, BenchArgs* a) {
  if (!flags.Has("async") && !flags.Has("store")) return Fail(Status::InvalidArgument("--store is required"), true);
  std::string preset_name = flags.Get("preset").value_or("llama3-8b");
  for (const auto& p : kPresets) {
    if (preset_name == p.name) a->preset = &p;
  }
  if (a->preset == nullptr) {
    return Fail(Status::InvalidArgument("--preset '" + preset_name +
                                        "' (expected llama3-8b, llama3-70b, llama3-405b or llama3-1t)"), true);
  }
  auto ranks_flag = flags.GetU64("ranks", std::min<uint32_t>(a->preset->ranks, 8));
  auto checkpoints = flags.GetU64("checkpoints", 3);
  auto items = flags.GetU64("items", 16);
  auto size_flag = flags.GetSize("size", 0);
  for (const Status& st : {ranks_flag.status(), checkpoints.status(), items.status(), size_flag.status()}) {
    if (!st.ok()) return Fail(st, true);
  }
  if (*ranks_flag == 0 || *ranks_flag > 1024) return Fail(Status::InvalidArgument("--ranks must be in 1..1024"), true);
  if (*checkpoints == 0 || *checkpoints > 1000) return Fail(Status::InvalidArgument("--checkpoints must be in 1..1000"), true);
  if (*items == 0 || *items > 100000) return Fail(Status::InvalidArgument("--items must be in 1..100000"), true);
  a->ranks = static_cast<uint32_t>(*ranks_flag);
  a->checkpoints = *checkpoints;
  a->items = *items;
  a->mode = flags.Get("mode").value_or("threads");
  if (a->mode != "threads" && a->mode != "processes") {
    return Fail(Status::InvalidArgument("--mode must be threads or processes"), true);
  }
  a->size = 4ull << 30;  // about a minute of work on this kind of machine
  if (flags.Has("scale")) {
    char* end = nullptr;
    std::string s = *flags.Get("scale");
    double f = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(f > 0) || f > 1) {
      return Fail(Status::InvalidArgument("--scale must be a number in (0, 1]"), true);
    }
    a->size = static_cast<uint64_t>(std::llround(f * static_cast<double>(a->preset->total_gib << 30)));
  }
  a->size_given = flags.Has("size");
  if (a->size_given) a->size = *size_flag;
  if (a->size == 0) return Fail(Status::InvalidArgument("checkpoint size is 0"), true);
  if (a->mode == "processes" && flags.Has("metrics-listen")) {
    return Fail(Status::InvalidArgument("--metrics-listen needs --mode threads (forked ranks count in their own "
                                        "processes, which the server cannot see)"), true);
  }
  if (flags.Has("report")) {
    if (flags.Get("report")->empty()) return Fail(Status::InvalidArgument("--report needs a directory"), true);
    if (a->mode == "processes") {
      return Fail(Status::InvalidArgument("--report needs --mode threads (forked ranks' progress is not "
                                          "visible to the sampler)"), true);
    }
    if (Status ready = PrepareReport(*flags.Get("report")); !ready.ok()) return Fail(ready);
  }
  return -1;
}

// Keeps the benchmark from filling the disk: on a file store, the size is
// capped to a fifth of the free space (unless --size was given), and a
// bench that would not fit is refused.
Status FitToFreeSpace(const std::string& uri, BenchArgs* a) {
  std::string path = uri.rfind("file://", 0) == 0 ? uri.substr(7) : uri;
  path = path.substr(0, path.find('?'));
  struct statvfs vfs;
  if (statvfs(path.c_str(), &vfs) != 0) return Status::OK();
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  const uint64_t cap = free_bytes / 5 / a->checkpoints;
  if (a->size > cap && !a->size_given) a->size = cap;
  if (a->size * a->checkpoints > free_bytes) {
    return Status::NoSpace("bench needs " + HumanBytes(a->size * a->checkpoints) + ", the store has " +
                           HumanBytes(free_bytes) + " free");
  }
  return Status::OK();
}

struct Phase {
  std::vector<double> seconds;  // slowest rank per checkpoint
  std::vector<double> gibps;
  double cpu = 0;
  uint64_t bytes = 0;
};

// One pipeline per rank, kept across checkpoints. Staging is what `sluice
// save` gives a synchronous save: the rank's share, at most 256 MiB (larger
// ones stream through it). Forked ranks open theirs in the child (a
// pipeline's threads do not survive fork) and close it before exiting.
class RankPipelines {
 public:
  RankPipelines(const PipelineOptions& options, std::vector<uint64_t> rank_bytes, bool processes)
      : options_(options), rank_bytes_(std::move(rank_bytes)), processes_(processes), pipelines_(rank_bytes_.size()) {}
  // Opens every rank's now (threads); false, with the error printed, if one fails.
  bool OpenAll() {
    for (uint32_t r = 0; r < pipelines_.size(); ++r) {
      if (Of(r) == nullptr) return false;
    }
    return true;
  }
  // fn(pipeline) for rank r; a failed rank where its pipeline would not open.
  template <typename F>
  RankTiming With(uint32_t r, F fn) {
    Pipeline* p = Of(r);
    if (p == nullptr) {
      RankTiming t;
      t.failed = 1;
      return t;
    }
    RankTiming t = fn(*p);
    if (processes_) pipelines_[r].reset();
    return t;
  }
  void Close() { pipelines_.clear(); }

 private:
  Pipeline* Of(uint32_t r) {
    if (!pipelines_[r]) {
      PipelineOptions po = options_;
      const uint64_t slab = AlignUp(po.store.io_bytes, 4096);
      po.staging_bytes = std::max(slab, std::min<uint64_t>(AlignUp(rank_bytes_[r], slab), 256ull << 20));
      auto opened = Pipeline::Open(po);
      if (!opened.ok()) {
        Fail(opened.status().WithContext("bench rank " + std::to_string(r)));
        return nullptr;
      }
      pipelines_[r] = std::move(opened).value();
    }
    return pipelines_[r].get();
  }
  PipelineOptions options_;
  std::vector<uint64_t> rank_bytes_;
  bool processes_;
  std::vector<std::unique_ptr<Pipeline>> pipelines_;
};

// The write and read phases' figures, as JSON (and the --report page) or text.
int ReportBench(const Flags& flags, const BenchArgs& a, const std::string& io_path, const Phase& write,
                const Phase& read, bool dropped, const Ceiling* ceiling, const ByteSampler* sampler) {
  const double wgib = write.bytes / double(1 << 30), rgib = read.bytes / double(1 << 30);
  JsonValue j = {{"preset", a.preset->name}, {"ranks", a.ranks}, {"mode", a.mode}, {"checkpoint_bytes", a.size},
                 {"checkpoints", a.checkpoints}, {"io_path", io_path}, {"caches_dropped", dropped}};
  for (const Phase* p : {&write, &read}) {
    j[p == &write ? "write" : "read"] = {
        {"median_gib_per_second", Median(p->gibps)},
        {"best_gib_per_second", *std::max_element(p->gibps.begin(), p->gibps.end())},
        {"checkpoint_seconds", p->seconds}, {"cpu_seconds_per_gib", p->cpu / (p == &write ? wgib : rgib)}};
  }
  if (ceiling != nullptr) {
    j["ceiling"] = {{"tool", ceiling->tool}, {"note", ceiling->note},
                    {"write_bytes_per_second", ceiling->write_bytes_per_sec},
                    {"read_bytes_per_second", ceiling->read_bytes_per_sec}};
    Status st = WriteBenchReport(*flags.Get("report"), *sampler, *ceiling, write.gibps, read.gibps, JsonText(j),
                                 std::string(a.preset->name) + ", " + HumanBytes(a.size) + " per checkpoint, " +
                                     std::to_string(a.ranks) + " ranks, " + std::to_string(a.checkpoints) +
                                     " checkpoints, " + io_path);
    if (!st.ok()) return Fail(st);
    if (!flags.Has("json")) std::fprintf(stderr, "bench: report in %s/index.html\n", flags.Get("report")->c_str());
  }
  if (flags.Has("json")) {
    PrintJson(j);
    return kExitOk;
  }
  for (const Phase* p : {&write, &read}) {
    std::printf("%-5s  median %.2f GiB/s  best %.2f GiB/s  per checkpoint:", p == &write ? "write" : "read",
                Median(p->gibps), *std::max_element(p->gibps.begin(), p->gibps.end()));
    for (double s : p->seconds) std::printf(" %.2fs", s);
    std::printf("  CPU %.3f s/GiB\n", p->cpu / (p == &write ? wgib : rgib));
  }
  if (!dropped) {
    std::printf("(page cache not dropped: reads %s)\n",
                io_path.find("O_DIRECT") != std::string::npos ? "use O_DIRECT anyway" : "may come from memory");
  }
  return kExitOk;
}

// R ranks save N checkpoints, caches are dropped, the ranks read them back.
int RunWriteReadBench(const Flags& flags, BenchArgs a) {
  const bool processes = a.mode == "processes";
  // A forked rank would inherit the parent's RADOS client, whose threads do
  // not survive fork, and librados is not fork-safe even for a fresh client
  // opened in the child: its operations hang until they time out.
  if (processes && flags.Get("store")->rfind("rados://", 0) == 0) {
    return Fail(Status::InvalidArgument("--mode processes does not work with rados:// stores (librados does not "
                                        "survive fork); use --mode threads, or one `sluice save --rank R "
                                        "--world W` process per rank"), true);
  }
  auto popts = PipelineOptionsFromFlags(flags, true);
  if (!popts.ok()) return Fail(popts.status(), true);
  popts->resume_drains = false;
  auto store = Store::Open(*flags.Get("store"), popts->store);
  if (!store.ok()) return FailStoreOpen(store.status());
  if (Status st = FitToFreeSpace(*flags.Get("store"), &a); !st.ok()) return Fail(st);
  const std::string io_path = (*store)->backend().caps().io_path;
  std::vector<uint64_t> rank_bytes = SplitSizes(a.size, a.ranks);
  const std::string name = "sluice-bench-" + std::to_string(getpid());
  if (!flags.Has("json")) {
    std::fprintf(stderr, "bench: %s scaled to %s per checkpoint (preset %s), %u ranks as %s, %llu checkpoints, %s\n",
                 a.preset->name, HumanBytes(a.size).c_str(), HumanBytes(a.preset->total_gib << 30).c_str(), a.ranks,
                 a.mode.c_str(), static_cast<unsigned long long>(a.checkpoints), io_path.c_str());
  }
  // --report: the store's ceiling first (fio / rados bench, same run), then
  // each rank's tier-0 bytes sampled while the checkpoints are written.
  const bool report = flags.Has("report");
  Ceiling ceiling;
  if (report) {
    ceiling = MeasureCeiling(*flags.Get("store"), std::min<uint64_t>(a.size, 2ull << 30), popts->store.io_bytes);
    if (!flags.Has("json")) {
      std::fprintf(stderr, "bench: ceiling %s\n", ceiling.tool.empty() ? ceiling.note.c_str()
                   : ("write " + HumanRate(ceiling.write_bytes_per_sec) + ", read " +
                      HumanRate(ceiling.read_bytes_per_sec) + " (" + ceiling.tool + ")").c_str());
    }
  }
  Phase write, read;
  bool failed = false;
  std::unique_ptr<RankMeter[]> meters(new RankMeter[a.ranks]);
  std::unique_ptr<ByteSampler> sampler;
  // One phase: every checkpoint in turn, all ranks together; the
  // checkpoint's time is its slowest rank's.
  auto run_phase = [&](Phase* phase, auto rank_fn) {
    const double cpu0 = ProcessCpuSeconds();
    for (uint64_t c = 1; c <= a.checkpoints && !failed; ++c) {
      auto timings = RunRanks(a.ranks, processes, [&](uint32_t r) { return rank_fn(c, r); });
      double slowest = 0;
      for (const auto& t : timings) {
        slowest = std::max(slowest, t.seconds);
        failed |= t.failed != 0;
        phase->bytes += t.bytes;
      }
      phase->seconds.push_back(slowest);
      phase->gibps.push_back(a.size / slowest / (1 << 30));
    }
    phase->cpu = ProcessCpuSeconds() - cpu0;
  };
  RankPipelines pipelines(*popts, rank_bytes, processes);
  if (!processes && !pipelines.OpenAll()) return kExitError;
  std::vector<RestoreTarget> targets(a.ranks);
  if (report) {
    std::vector<std::string> series;
    for (uint32_t r = 0; r < a.ranks; ++r) series.push_back("rank " + std::to_string(r));
    sampler = std::make_unique<ByteSampler>(series, [&] {
      std::vector<uint64_t> v;
      for (uint32_t r = 0; r < a.ranks; ++r) v.push_back(meters[r].Written());
      return v;
    }, std::chrono::milliseconds(100));
  }
  run_phase(&write, [&](uint64_t c, uint32_t r) {
    return pipelines.With(r, [&](Pipeline& p) {
      return SaveRank(p, name, c, r, a.ranks, SplitSizes(rank_bytes[r], a.items), report ? &meters[r] : nullptr);
    });
  });
  if (sampler) sampler->Stop();
  bool dropped = false;
  if (!failed && !flags.Has("no-drop-caches")) dropped = DropCaches();
  run_phase(&read, [&](uint64_t c, uint32_t r) {
    return pipelines.With(r, [&](Pipeline& p) { return ReadRank(p, targets[r], name, c, r); });
  });
  pipelines.Close();
  if (!flags.Has("keep")) {
    for (uint64_t c = 1; c <= a.checkpoints; ++c) (void)(*store)->Remove({name, c});
  }
  if (failed) return kExitError;
  return ReportBench(flags, a, io_path, write, read, dropped, report ? &ceiling : nullptr, sampler.get());
}

}  // namespace

int CmdBench(int argc, char** argv) {
  const CommandSpec spec = BenchSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  BenchArgs a;
  if (int failed = ParseBenchFlags(flags, &a); failed >= 0) return failed;
  auto metrics_server = ServeMetricsIfAsked(flags);
  if (!metrics_server.ok()) return Fail(metrics_server.status(), metrics_server.status().code() == StatusCode::kInvalidArgument);
  if (flags.Has("async")) {
    const uint64_t size = flags.Has("size") || flags.Has("scale") ? a.size : 2ull << 30;
    return RunAsyncBench(flags, size, a.checkpoints, a.items);
  }
  if (flags.Has("tier")) return Fail(Status::InvalidArgument("--tier needs --async (the write/read bench uses one --store)"), true);
  return RunWriteReadBench(flags, a);
}

}  // namespace sluice::cli
