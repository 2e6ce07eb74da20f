#include "sluice/maintenance.h"


#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>

#include "checkpoint/catalog.h"
#include "checkpoint/step_copy.h"
#include "io/token_bucket.h"
#include "pipeline/pipeline_metrics.h"
#include "pipeline/drain.h"

namespace sluice {

bool RebuildReport::ok() const {
  if (!tier_errors.empty()) return false;
  for (const auto& s : steps) {
    if (s.state == "failed") return false;
  }
  return true;
}

Result<RebuildReport> Rebuild(const std::vector<Backend*>& tiers, const RebuildOptions& options) {
  if (options.target >= tiers.size()) return Status::InvalidArgument("rebuild: no tier " + std::to_string(options.target));
  if (tiers.size() < 2) return Status::InvalidArgument("rebuild needs another tier to copy from");
  if (!options.name.empty()) RETURN_IF_ERROR(ValidateCheckpointName(options.name));
  const auto t0 = std::chrono::steady_clock::now();
  RebuildReport report;
  Backend& target = *tiers[options.target];
  // What the target holds (intact or damaged) and what each other tier
  // holds intact.
  ASSIGN_OR_RETURN(auto there, ListCheckpoints(target, options.name, false));
  std::map<std::pair<std::string, uint64_t>, const CheckpointInfo*> on_target;
  for (const auto& c : there) on_target[{c.name, c.step}] = &c;
  std::map<std::string, std::map<uint64_t, std::vector<size_t>>> sources;  // name -> step -> tiers
  for (size_t k = 0; k < tiers.size(); ++k) {
    if (k == options.target) continue;
    auto listed = ListCheckpoints(*tiers[k], options.name, false);
    if (!listed.ok()) {
      report.tier_errors.push_back("tier " + std::to_string(k) + " (" + tiers[k]->uri() + "): " + listed.status().ToString());
      continue;
    }
    for (const auto& c : *listed) {
      if (c.complete) sources[c.name][c.step].push_back(k);
    }
  }
  // The newest keep_last of each name, then newest first across names.
  std::vector<std::pair<std::string, uint64_t>> wanted;
  for (const auto& [name, steps] : sources) {
    uint32_t taken = 0;
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      if (options.keep_last != 0 && taken++ >= options.keep_last) break;
      wanted.push_back({name, it->first});
    }
  }
  std::stable_sort(wanted.begin(), wanted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  const uint64_t rate = options.rate_bytes_per_sec;
  // A capped rebuild also keeps few writes in flight (4): at a fraction of
  // the device it needs no deep queue, and a shallow one leaves the device's
  // queue to the job training beside it (measured: bench/rebuild_bench.sh).
  TokenBucket bucket(rate, std::max<uint64_t>(options.store.io_bytes, rate / 20), rate > 0 ? 4 : 0);
  for (const auto& [name, step] : wanted) {
    if (options.stop != nullptr && options.stop->load()) {
      report.stopped = true;
      break;
    }
    RebuildStep s;
    s.name = name;
    s.step = step;
    const auto s0 = std::chrono::steady_clock::now();
    auto here = on_target.find({name, step});
    if (here != on_target.end()) {
      s.state = here->second->damaged ? "damaged" : "present";
      if (here->second->damaged) s.reason = here->second->problem + " (sluice scrub repairs it)";
    } else {
      // The nearest tier to the target first: for tier 0, tier 1.
      std::vector<size_t> from = sources[name][step];
      std::sort(from.begin(), from.end(), [&](size_t a, size_t b) {
        auto d = [&](size_t k) { return k > options.target ? k - options.target : options.target - k; };
        return d(a) < d(b);
      });
      std::atomic<uint64_t> written{0};
      CopyControl control;
      control.bucket = rate > 0 ? &bucket : nullptr;
      control.stop = options.stop;
      control.written = &written;
      control.written_total = &TierWrittenBytes(options.target, "rebuild");
      control.io_bytes = options.store.io_bytes;
      Status st = Status::NotFound("no tier holds it intact");
      for (size_t k : from) {
        st = CopyCommittedStep(*tiers[k], target, name, step, control);
        if (st.ok()) {
          s.source = k;
          break;
        }
      }
      s.bytes = written.load();
      report.bytes += s.bytes;
      if (st.ok()) {
        s.state = "rebuilt";
      } else {
        s.state = "failed";
        s.reason = st.ToString();
        if (options.stop != nullptr && options.stop->load()) report.stopped = true;
      }
    }
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    if (options.on_step) options.on_step(s);
    report.steps.push_back(std::move(s));
    if (report.stopped) break;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

bool TierLooksLost(const std::vector<Backend*>& tiers, size_t target) {
  if (target >= tiers.size()) return false;
  auto there = ListCheckpoints(*tiers[target], "", false);
  if (!there.ok() || !there->empty()) return false;
  for (size_t k = 0; k < tiers.size(); ++k) {
    if (k == target) continue;
    auto listed = ListCheckpoints(*tiers[k], "", false);
    if (listed.ok() && !listed->empty()) return true;
  }
  return false;
}

}  // namespace sluice
