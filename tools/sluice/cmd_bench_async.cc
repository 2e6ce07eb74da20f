// sluice bench --async: the checkpoint stall. A state of SIZE bytes sits in
// memory (pre-faulted, as a trainer's tensors are); each checkpoint mutates
// it, measures a bare parallel memcpy of the same bytes into a pre-faulted
// buffer (the floor for any snapshot), then snapshots it through the
// pipeline and waits for every tier. Reported per checkpoint: the stall next
// to that memcpy, time to durable on each tier, and the CPU spent moving the
// staged bytes to a committed tier-0 copy.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_report.h"
#include "sluice/aligned_buffer.h"
#include "item_sources.h"
#include "sluice/metrics.h"
#include "output.h"
#include "store_flags.h"

namespace sluice::cli {
namespace {

// memcpy of every item into `dst`, split over `threads` threads by bytes.
double ParallelMemcpy(const std::vector<AlignedBuffer>& src, const std::vector<uint64_t>& sizes,
                      uint8_t* dst, uint32_t threads) {
  struct Piece { const uint8_t* from; uint8_t* to; uint64_t len; };
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  std::vector<std::vector<Piece>> work(threads);
  uint64_t per = (total + threads - 1) / threads, pos = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    uint64_t off = 0;
    while (off < sizes[i]) {
      size_t t = std::min<size_t>(pos / per, threads - 1);
      uint64_t room = (t + 1) * per - pos;
      uint64_t n = std::min(sizes[i] - off, t + 1 == threads ? sizes[i] - off : room);
      work[t].push_back(Piece{src[i].data() + off, dst + pos, n});
      off += n;
      pos += n;
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (uint32_t t = 1; t < threads; ++t) {
    ts.emplace_back([&, t] { for (const auto& p : work[t]) std::memcpy(p.to, p.from, p.len); });
  }
  for (const auto& p : work[0]) std::memcpy(p.to, p.from, p.len);
  for (auto& t : ts) t.join();
  return SecondsSince(t0);
}

// The memcpy baseline's destination: like staging, a private anonymous
// mapping asking for transparent huge pages when staging got them, faulted
// in before it is timed. A baseline into 4 KiB pages would be slower than
// the staging copy for the TLB alone, and flatter the stall.
class BaselineBuffer {
 public:
  static Result<std::unique_ptr<BaselineBuffer>> Create(uint64_t bytes, bool huge) {
    size_t len = static_cast<size_t>(AlignUp(std::max<uint64_t>(bytes, 1), 2u << 20));
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Status::FromErrno(errno, "map the memcpy baseline's buffer");
    std::unique_ptr<BaselineBuffer> b(new BaselineBuffer(static_cast<uint8_t*>(p), len));
    if (huge) b->huge_ = madvise(p, len, MADV_HUGEPAGE) == 0;
    std::memset(p, 0, len);
    return b;
  }
  ~BaselineBuffer() { munmap(p_, len_); }
  uint8_t* data() { return p_; }
  bool huge() const { return huge_; }

 private:
  BaselineBuffer(uint8_t* p, size_t len) : p_(p), len_(len) {}
  uint8_t* p_;
  size_t len_;
  bool huge_ = false;
};

// Bytes written into each tier so far, every flow (saves, drains), from the
// process's metrics.
std::vector<uint64_t> TierWrittenBytes(size_t tiers) {
  std::vector<uint64_t> out(tiers, 0);
  for (const auto& family : DefaultMetrics().Collect()) {
    if (family.name != "sluice_tier_written_bytes_total") continue;
    for (const auto& sample : family.samples) {
      for (const auto& [k, v] : sample.labels) {
        if (k != "tier") continue;
        size_t t = std::strtoul(v.c_str(), nullptr, 10);
        if (t < tiers) out[t] += static_cast<uint64_t>(sample.value);
      }
    }
  }
  return out;
}

struct AsyncReportInput {
  std::vector<double> stall, memcpy_s;
  std::vector<std::string> uris;
  std::vector<uint64_t> caps;  // bytes/s per tier, 0: none
  Ceiling ceiling;             // of tier 0
  std::string what;
};

// The --async bench's page: the stall per checkpoint against a bare memcpy,
// and each tier's write rate over time against its cap (and tier 0's against
// fio's).
Status WriteAsyncReport(const std::string& dir, const ByteSampler& sampler, const AsyncReportInput& in,
                        const std::string& json) {
  const double M = 1 << 20;
  ReportPlot stall{"stall", "Stall per checkpoint against a bare memcpy of the same bytes", "", "", ""};
  stall.data = "# checkpoint stall_seconds memcpy_seconds\n";
  for (size_t c = 0; c < in.stall.size(); ++c) {
    stall.data += std::to_string(c + 1) + " " + FormatNumber(in.stall[c]) + " " + FormatNumber(in.memcpy_s[c]) + "\n";
  }
  stall.gnuplot = "set xlabel 'checkpoint'\nset ylabel 'seconds'\nset xtics 1\nset yrange [0:*]\n"
                  "set xrange [0.5:" + std::to_string(in.stall.size()) + ".5]\n"
                  "plot 'stall.dat' using 1:2 with linespoints pt 7 title 'sluice stall (snapshot into staging)', "
                  "'' using 1:3 with linespoints pt 5 dt 2 title 'bare memcpy (the ceiling)'";
  stall.caption = "How long each save blocked the caller, next to a parallel memcpy of the same bytes "
                  "into pre-faulted memory, measured just before it.";

  ReportPlot tiers{"tiers_over_time", "Write rate into each tier over time", "", "", ""};
  tiers.data = "# seconds";
  for (size_t k = 0; k < in.uris.size(); ++k) tiers.data += " tier" + std::to_string(k) + "_mib_per_s";
  tiers.data += "\n";
  for (const auto& row : sampler.rows()) {
    std::string line = FormatNumber(row[0]);
    for (size_t i = 1; i < row.size(); ++i) line += " " + FormatNumber(row[i] / M);
    tiers.data += line + "\n";
  }
  std::string plot = "set xlabel 'seconds'\nset ylabel 'MiB/s written'\nset yrange [0:*]\nplot ";
  std::string caption = "Bytes written into each tier (saves into tier 0, drains into the others), every 0.1 s.";
  for (size_t k = 0; k < in.uris.size(); ++k) {
    if (k > 0) plot += ", ";
    plot += "'tiers_over_time.dat' using 1:" + std::to_string(k + 2) + " with lines lw 2 lc " +
            std::to_string(k + 1) + " title " + GnuplotQuote("tier " + std::to_string(k) + ": " + in.uris[k]);
    if (in.caps[k] > 0) {
      plot += ", " + FormatNumber(in.caps[k] / M) + " with lines dt 2 lc " + std::to_string(k + 1) + " title " +
              GnuplotQuote("cap of tier " + std::to_string(k));
    }
  }
  if (!in.ceiling.tool.empty()) {
    plot += ", " + FormatNumber(in.ceiling.write_bytes_per_sec / M) + " with lines dt 3 lc rgb 'black' title 'ceiling of tier 0: write'";
    caption += " Dotted: " + in.ceiling.tool + " on tier 0, same run.";
  } else {
    caption += " Tier 0: " + in.ceiling.note + ".";
  }
  tiers.gnuplot = plot;
  tiers.caption = caption + " Dashed: a tier's --rate-limit cap.";

  const double ms = Median(in.stall), mm = Median(in.memcpy_s);
  std::string summary = "<p>" + HtmlEscape(in.what) + "</p>\n<table><tr><th>median stall</th><th>median memcpy</th>"
                        "<th>stall / memcpy</th></tr><tr><td>" + FormatNumber(ms) + " s</td><td>" + FormatNumber(mm) + " s</td><td>" +
                        (mm > 0 ? FormatNumber(ms / mm) : "-") + "</td></tr></table>";
  return WriteReport(dir, "sluice bench --async", summary, {stall, tiers}, json);
}

}  // namespace

namespace {

// A trainer's state: `sizes` buffers of distinct, incompressible-looking
// contents.
Result<std::vector<AlignedBuffer>> MakeState(const std::vector<uint64_t>& sizes) {
  std::vector<AlignedBuffer> state;
  for (uint64_t s : sizes) {
    ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::Allocate(std::max<uint64_t>(s, 1)));
    auto* w = reinterpret_cast<uint64_t*>(b.data());
    uint64_t x = 0x9e3779b97f4a7c15ull ^ state.size();
    for (size_t i = 0; i < s / 8; ++i) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      w[i] = x;
    }
    state.push_back(std::move(b));
  }
  return state;
}

struct AsyncRow {
  double memcpy_s = 0, stall_s = 0, cpu_tier0 = 0;
  std::vector<double> durable;
};

// Checkpoint `step`: the bare memcpy baseline into `dst`, then the save,
// waited for on every tier.
Result<AsyncRow> SaveOneAsync(Pipeline& pipeline, const std::string& name, uint64_t step,
                              std::vector<AlignedBuffer>& state, const std::vector<uint64_t>& sizes, uint8_t* dst,
                              uint32_t copy_threads) {
  // The trainer changes its state between checkpoints.
  for (auto& b : state) {
    for (size_t off = 0; off < b.size(); off += 1 << 20) b.data()[off] ^= static_cast<uint8_t>(step);
  }
  AsyncRow row;
  row.memcpy_s = ParallelMemcpy(state, sizes, dst, copy_threads);
  ASSIGN_OR_RETURN(auto pending, pipeline.Begin({name, step}, 0, 1));
  char key[48];
  for (size_t i = 0; i < state.size(); ++i) {
    snprintf(key, sizeof key, "state/tensor-%06zu", i);
    RETURN_IF_ERROR(pending->AddItem(key, "", state[i].data(), sizes[i]));
  }
  ASSIGN_OR_RETURN(auto handle, pending->Snapshot());
  const double cpu0 = ProcessCpuSeconds();
  RETURN_IF_ERROR(handle->WaitTier(0));
  row.cpu_tier0 = ProcessCpuSeconds() - cpu0;
  RETURN_IF_ERROR(handle->Wait());
  row.stall_s = handle->stall_seconds();
  for (const auto& t : handle->progress()) row.durable.push_back(t.durable_seconds);
  return row;
}

struct AsyncRun {
  uint64_t size = 0, items = 0, checkpoints = 0;
  double open_seconds = 0;
  std::vector<AsyncRow> rows;
};

int ReportAsyncBench(const Flags& flags, Pipeline& pipeline, const PipelineOptions& po, const AsyncRun& run,
                     const Ceiling* ceiling, const ByteSampler* sampler) {
  const size_t tiers = pipeline.tier_count();
  const double gib = static_cast<double>(run.size) / (1ull << 30);
  std::vector<double> stall, memcpy_s, ratio, cpu;
  std::vector<std::vector<double>> durable(tiers);
  for (const auto& r : run.rows) {
    stall.push_back(r.stall_s);
    memcpy_s.push_back(r.memcpy_s);
    ratio.push_back(r.memcpy_s > 0 ? r.stall_s / r.memcpy_s : 0);
    cpu.push_back(r.cpu_tier0 / gib);
    for (size_t k = 0; k < tiers; ++k) durable[k].push_back(r.durable[k]);
  }
  JsonValue rows_json = JsonValue::array(), tiers_json = JsonValue::array();
  for (const auto& r : run.rows) {
    rows_json.push_back({{"stall_seconds", r.stall_s}, {"memcpy_seconds", r.memcpy_s},
                         {"tier0_cpu_seconds", r.cpu_tier0}, {"durable_seconds", r.durable}});
  }
  for (size_t k = 0; k < tiers; ++k) {
    tiers_json.push_back({{"uri", pipeline.tier(k).backend().uri()}, {"median_durable_seconds", Median(durable[k])}});
  }
  JsonValue j = {{"mode", "async"}, {"bytes", run.size}, {"items", run.items}, {"staging_bytes", po.staging_bytes},
                 {"copy_threads", po.copy_threads}, {"staging_open_seconds", run.open_seconds},
                 {"median_stall_seconds", Median(stall)}, {"median_memcpy_seconds", Median(memcpy_s)},
                 {"median_stall_over_memcpy", Median(ratio)}, {"median_tier0_cpu_seconds_per_gib", Median(cpu)},
                 {"checkpoints", rows_json}, {"tiers", tiers_json}};
  if (ceiling != nullptr) {
    AsyncReportInput in;
    in.stall = stall;
    in.memcpy_s = memcpy_s;
    for (size_t k = 0; k < tiers; ++k) {
      in.uris.push_back(pipeline.tier(k).backend().uri());
      in.caps.push_back(po.tiers[k].rate_bytes_per_sec);
    }
    in.ceiling = *ceiling;
    in.what = HumanBytes(run.size) + " per checkpoint in " + std::to_string(run.items) + " items, " +
              std::to_string(run.checkpoints) + " checkpoints, staging " + HumanBytes(po.staging_bytes) + ", " +
              std::to_string(po.copy_threads) + " copy threads";
    Status st = WriteAsyncReport(*flags.Get("report"), *sampler, in, JsonText(j));
    if (!st.ok()) return Fail(st);
    if (!flags.Has("json")) std::fprintf(stderr, "bench: report in %s/index.html\n", flags.Get("report")->c_str());
  }
  if (flags.Has("json")) {
    PrintJson(j);
    return kExitOk;
  }
  std::printf("stall: median %.3f s vs bare %u-thread memcpy %.3f s = %.2fx (%s/s into staging)\n", Median(stall),
              po.copy_threads, Median(memcpy_s), Median(ratio),
              HumanBytes(static_cast<uint64_t>(run.size / std::max(Median(stall), 1e-9))).c_str());
  for (size_t k = 0; k < tiers; ++k) {
    std::printf("tier %zu %s: durable after median %.2f s\n", k, pipeline.tier(k).backend().uri().c_str(),
                Median(durable[k]));
  }
  std::printf("CPU staging -> committed tier 0: median %.3f s per GiB\n", Median(cpu));
  return kExitOk;
}

}  // namespace

int RunAsyncBench(const Flags& flags, uint64_t size, uint64_t checkpoints, uint64_t items) {
  auto popts = PipelineOptionsFromFlags(flags, true);
  if (!popts.ok()) return Fail(popts.status(), true);
  auto copy_threads = flags.GetU64("copy-threads", 2);
  if (!copy_threads.ok() || *copy_threads == 0 || *copy_threads > 64) {
    return Fail(Status::InvalidArgument("--copy-threads must be in 1..64"), true);
  }
  const uint64_t slab = AlignUp(popts->store.io_bytes, 4096);
  auto staging = flags.GetSize("staging", AlignUp(size, slab) + slab);
  if (!staging.ok()) return Fail(staging.status(), true);
  PipelineOptions po = *popts;
  po.staging_bytes = *staging;
  po.copy_threads = static_cast<uint32_t>(*copy_threads);
  po.lock_staging = flags.Has("lock-staging");

  std::vector<uint64_t> sizes = SplitSizes(size, items);
  auto state = MakeState(sizes);
  if (!state.ok()) return Fail(state.status());
  // Pages of the size staging gets.
  auto dst = BaselineBuffer::Create(size, StagingHugePages(po));
  if (!dst.ok()) return Fail(dst.status());

  AsyncRun run;
  run.size = size;
  run.items = items;
  run.checkpoints = checkpoints;
  const auto open0 = std::chrono::steady_clock::now();
  auto pipeline = Pipeline::Open(po);
  if (!pipeline.ok()) return FailStoreOpen(pipeline.status());
  run.open_seconds = SecondsSince(open0);
  const size_t tiers = (*pipeline)->tier_count();
  const std::string name = "sluice-bench-async-" + std::to_string(getpid());
  if (!flags.Has("json")) {
    std::fprintf(stderr, "bench --async: %s per checkpoint in %llu items, %llu checkpoints, %zu tier(s), "
                 "staging %s (allocated and faulted once in %.2f s), %u copy threads; memcpy baseline into "
                 "a pre-faulted buffer of %s pages\n",
                 HumanBytes(size).c_str(), static_cast<unsigned long long>(items),
                 static_cast<unsigned long long>(checkpoints), tiers, HumanBytes(po.staging_bytes).c_str(),
                 run.open_seconds, po.copy_threads, (*dst)->huge() ? "transparent huge (2 MiB)" : "4 KiB");
  }
  const bool report = flags.Has("report");
  Ceiling ceiling;
  std::unique_ptr<ByteSampler> sampler;
  if (report) {
    ceiling = MeasureCeiling(po.tiers[0].uri, std::min<uint64_t>(size, 2ull << 30), po.store.io_bytes);
    if (!flags.Has("json")) {
      std::fprintf(stderr, "bench --async: tier 0 ceiling %s\n", ceiling.tool.empty() ? ceiling.note.c_str()
                   : ("write " + HumanRate(ceiling.write_bytes_per_sec) + " (" + ceiling.tool + ")").c_str());
    }
    std::vector<std::string> series;
    for (size_t k = 0; k < tiers; ++k) series.push_back("tier " + std::to_string(k));
    sampler = std::make_unique<ByteSampler>(series, [tiers] { return TierWrittenBytes(tiers); },
                                            std::chrono::milliseconds(100));
  }
  Status failed;
  for (uint64_t c = 1; c <= checkpoints; ++c) {
    auto row = SaveOneAsync(**pipeline, name, c, *state, sizes, (*dst)->data(), po.copy_threads);
    if (!row.ok()) {
      failed = row.status();
      break;
    }
    if (!flags.Has("json")) {
      std::fprintf(stderr, "  checkpoint %llu: stall %.3f s, memcpy %.3f s (%.2fx)", static_cast<unsigned long long>(c),
                   row->stall_s, row->memcpy_s, row->memcpy_s > 0 ? row->stall_s / row->memcpy_s : 0);
      for (size_t k = 0; k < row->durable.size(); ++k) std::fprintf(stderr, ", tier %zu durable %.2f s", k, row->durable[k]);
      std::fprintf(stderr, "\n");
    }
    run.rows.push_back(std::move(row).value());
  }
  if (sampler) sampler->Stop();
  if (!flags.Has("keep")) {
    for (size_t k = 0; k < tiers; ++k) {
      for (uint64_t c = 1; c <= checkpoints; ++c) (void)(*pipeline)->tier(k).Remove({name, c});
    }
  }
  if (!failed.ok()) return Fail(failed);
  return ReportAsyncBench(flags, **pipeline, po, run, report ? &ceiling : nullptr, sampler.get());
}

}  // namespace sluice::cli
