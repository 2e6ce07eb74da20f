// Training-loop benchmark: what checkpointing costs a trainer.
//
// A "trainer" on one core runs steps of fixed compute (a cache-resident FMA
// kernel, standing in for the GPU work a real trainer waits on) that also
// mutate a slice of a multi-GiB state, and checkpoints the whole state every
// K steps. Three runs of the same steps: no checkpoints, synchronous saves
// (snapshot, then wait until durable), and async saves (snapshot only; the
// pipeline writes in the background on the other core). Prints the mean step
// time of each and the overheads side by side.
//
// usage: sluice-train-bench --tier DIR [--tier DIR2] [--state SIZE] [--steps N]
//                           [--every K] [--compute-ms MS] [--rounds R]
// Defaults: 2 GiB state, 1 s steps (a GPU trainer's), a checkpoint every 10
// steps, 30 steps per run, 3 rounds (about 6 minutes).
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sluice/aligned_buffer.h"
#include "sluice/pipeline.h"

using namespace sluice;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t ParseBytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string u = end;
  double m = 1;
  if (u == "K" || u == "KiB") m = 1024.0;
  if (u == "M" || u == "MiB") m = 1024.0 * 1024;
  if (u == "G" || u == "GiB") m = 1024.0 * 1024 * 1024;
  return static_cast<uint64_t>(v * m);
}

void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof set, &set);
}

// ~`iters` FMAs over a 256 KiB array: compute-bound, cache resident.
float Compute(std::vector<float>& a, long iters) {
  float acc = 0;
  const size_t n = a.size();
  for (long it = 0; it < iters; ++it) {
    for (size_t i = 0; i < n; ++i) a[i] = a[i] * 0.999f + 0.001f;
    acc += a[static_cast<size_t>(it) % n];
  }
  return acc;
}

// One mode's run of the loop: its mean step, each checkpoint's stall, and
// when the last checkpoint was durable on the last tier.
struct Run {
  double mean_step = 0;
  std::vector<double> stalls;
  double durable = 0;
};

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

// Each mode's median round, against the loop without checkpoints, then
// every round's mean step.
void PrintResults(const std::vector<Run>& none, const std::vector<Run>& sync, const std::vector<Run>& async) {
  auto median_run = [](std::vector<Run> v) {
    std::sort(v.begin(), v.end(), [](const Run& a, const Run& b) { return a.mean_step < b.mean_step; });
    return v[v.size() / 2];
  };
  Run n = median_run(none), sy = median_run(sync), as = median_run(async);
  const double base = n.mean_step;
  std::printf("%-26s %14s %10s %18s %16s\n", "mode", "mean step (s)", "overhead", "stall/ckpt (s)", "durable (s)");
  std::printf("%-26s %14.4f %10s %18s %16s\n", "no checkpoints", base, "-", "-", "-");
  std::printf("%-26s %14.4f %9.1f%% %18.3f %16s\n", "sync save (snapshot+wait)", sy.mean_step,
              100 * (sy.mean_step / base - 1), Mean(sy.stalls), "(in the stall)");
  std::printf("%-26s %14.4f %9.1f%% %18.3f %16.2f\n", "async save (snapshot)", as.mean_step,
              100 * (as.mean_step / base - 1), Mean(as.stalls), as.durable);
  std::printf("per-round mean step, none/async/sync:");
  for (size_t r = 0; r < none.size(); ++r) {
    std::printf(" [%.3f %.3f %.3f]", none[r].mean_step, async[r].mean_step, sync[r].mean_step);
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> tiers;
  uint64_t state_bytes = 2ull << 30;
  int steps = 30, every = 10, rounds = 3;
  double compute_ms = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    if (f == "--tier" || f == "--store") tiers.push_back(v);
    else if (f == "--state") state_bytes = ParseBytes(v);
    else if (f == "--steps") steps = std::atoi(v.c_str());
    else if (f == "--every") every = std::atoi(v.c_str());
    else if (f == "--compute-ms") compute_ms = std::atof(v.c_str());
    else if (f == "--rounds") rounds = std::max(1, std::atoi(v.c_str()));
    else { std::fprintf(stderr, "unknown flag %s\n", f.c_str()); return 2; }
  }
  if (tiers.empty() || steps < every || every < 1 || state_bytes < (64u << 20)) {
    std::fprintf(stderr, "usage: sluice-train-bench --tier DIR [--tier DIR2] [--state SIZE>=64MiB] "
                         "[--steps N] [--every K<=N] [--compute-ms MS]\n");
    return 2;
  }
  // The pipeline's threads (created at Open) get core 1; the trainer core 0.
  Pin(1);
  PipelineOptions o;
  for (const auto& t : tiers) o.tiers.push_back(TierOptions{t});
  o.store.create_if_missing = true;
  o.staging_bytes = AlignUp(state_bytes, 4 << 20) + (4 << 20);
  o.max_in_flight = 1;
  auto pipeline = Pipeline::Open(o);
  if (!pipeline.ok()) {
    std::fprintf(stderr, "sluice-train-bench: %s\n", pipeline.status().ToString().c_str());
    return 1;
  }
  Pin(0);

  const int kTensors = 32;
  const uint64_t per = state_bytes / kTensors;
  std::vector<AlignedBuffer> state;
  for (int i = 0; i < kTensors; ++i) {
    auto b = AlignedBuffer::Allocate(per);
    if (!b.ok()) { std::fprintf(stderr, "%s\n", b.status().ToString().c_str()); return 1; }
    std::memset(b->data(), i, per);
    state.push_back(std::move(b).value());
  }
  std::vector<float> work(64 << 10, 1.0f);
  // Calibrate the compute to compute_ms.
  double t0 = Now();
  Compute(work, 200);
  long iters = std::max<long>(1, static_cast<long>(200 * compute_ms / 1000.0 / std::max(Now() - t0, 1e-6)));

  const std::string name = "train-bench-" + std::to_string(getpid());
  uint64_t next_step = 1;
  auto run = [&](int mode) -> Run {  // 0 none, 1 sync, 2 async
    Run r;
    std::shared_ptr<SaveHandle> last;
    double total = 0;
    for (int s = 1; s <= steps; ++s) {
      double a = Now();
      volatile float sink = Compute(work, iters);
      (void)sink;
      // The optimizer step touches 1/every of the state per step.
      for (int t = (s % every); t < kTensors; t += every) {
        uint8_t* p = state[t].data();
        for (uint64_t off = 0; off < per; off += 4096) p[off] += 1;
      }
      if (mode != 0 && s % every == 0) {
        auto pending = (*pipeline)->Begin({name, next_step++}, 0, 1);
        if (!pending.ok()) { std::fprintf(stderr, "%s\n", pending.status().ToString().c_str()); std::exit(1); }
        for (int t = 0; t < kTensors; ++t) {
          (void)(*pending)->AddItem("t" + std::to_string(t), "", state[t].data(), per);
        }
        auto h = (*pending)->Snapshot();
        if (!h.ok()) { std::fprintf(stderr, "%s\n", h.status().ToString().c_str()); std::exit(1); }
        if (mode == 1) {
          if (Status st = (*h)->Wait(); !st.ok()) { std::fprintf(stderr, "%s\n", st.ToString().c_str()); std::exit(1); }
        }
        r.stalls.push_back(mode == 1 ? Now() - (a + 0) : (*h)->stall_seconds());
        last = *h;
      }
      total += Now() - a;
    }
    if (last) {
      (void)last->Wait();
      auto pr = last->progress();
      r.durable = pr.back().durable_seconds;
    }
    r.mean_step = total / steps;
    return r;
  };
  std::fprintf(stderr, "train-bench: state %.2f GiB in %d tensors, %d steps, checkpoint every %d, "
               "compute %.0f ms/step on core 0, pipeline on core 1, %zu tier(s)\n",
               state_bytes / 1073741824.0, kTensors, steps, every, compute_ms, tiers.size());
  // Modes interleave over rounds and each reports its median round, since
  // a shared machine's speed drifts by more than the effect measured.
  std::vector<Run> none, sync, async;
  for (int round = 0; round < rounds; ++round) {
    none.push_back(run(0));
    async.push_back(run(2));
    sync.push_back(run(1));
  }
  PrintResults(none, sync, async);
  for (size_t k = 0; k < (*pipeline)->tier_count(); ++k) {
    for (uint64_t s = 1; s < next_step; ++s) (void)(*pipeline)->tier(k).Remove({name, s});
  }
  return 0;
}
