// sluice plan: what checkpointing will cost a job on a cluster, from
// measured rates (sluice/plan.h, doc/planning.md).
//   sluice plan --profile P --job J [--layout L] [--json] [--report DIR]
//   sluice plan compare --profile P --job J [--json]
//   sluice plan calibrate --tier URI [--tier URI ...] --out P (cmd_plan_calibrate.cc)
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_report.h"
#include "output.h"
#include "plan_files.h"

namespace sluice::cli {

int CmdPlanCalibrate(const Flags& flags);

CommandSpec PlanSpec() {
  CommandSpec spec;
  spec.name = "plan";
  spec.usage = "plan [compare | calibrate] --profile FILE --job FILE [--layout L] [--json] [--report DIR]";
  spec.summary =
      "Predicts one checkpoint cycle of a job on a cluster, from rates measured on its\n"
      "hardware: the trainer's stall, when each tier holds the checkpoint, whether the\n"
      "drain keeps up with the interval, the link share training keeps, recovery after a\n"
      "host loss, a rebuild's time, the interval that loses the least work (Young), and\n"
      "the GPU-hours lost a day. Every figure names the input that bounds it.\n"
      "  plan compare   the same job on every layout the profile describes, side by side\n"
      "  plan calibrate measure this host and its tiers (--tier, --out) into a profile";
  spec.flags = {
      {"profile", "FILE", "a profile (repeat for several hosts: the slowest of each rate counts)", true},
      {"job", "FILE", "the job: state per rank, ranks per host, hosts, interval, step time"},
      {"layout", "L", "nvme+ceph, ceph, shared-fs, nvme+s3, nvme+peer+ceph, nvme+peer+s3 or nvme+peer "
                      "(default: the first the profile has)"},
      {"json", "", "print the result as JSON"},
      {"report", "DIR", "also write DIR/index.html with plots against interval, hosts and OSDs"},
      {"tier", "URI", "calibrate: a tier to measure (repeat; the first file tier is the local NVMe)", true},
      {"out", "FILE", "calibrate: where to write the profile"},
      {"bytes", "SIZE", "calibrate: bytes each measurement writes and reads (default 1GiB)"},
      {"nic", "RATE", "calibrate: the host's link to storage in bytes/s, e.g. 12GiB (default: its speed in sysfs)"},
      {"share", "F", "calibrate: the part of that link drains may take (default 1)"},
      {"d2h", "RATE", "calibrate: device-to-host bytes/s per GPU (bench/cuda_stall.py measures it)"},
      {"staging", "SIZE", "calibrate: the staging memory a host gives sluice (default: half of its memory)"},
  };
  spec.details =
      "Profile and job files are JSON; doc/planning.md lists their fields, the formulas,\n"
      "and how the predictions were checked against measured runs.";
  return spec;
}

namespace {

JsonValue BoundedJson(const Bounded& b) { return {{"seconds", b.value}, {"bound", b.bound}}; }

JsonValue PlanJson(const CyclePlan& p) {
  JsonValue j;
  j["layout"] = p.layout;
  j["host_bytes"] = p.host_bytes;
  j["job_bytes"] = p.job_bytes;
  j["stall"] = BoundedJson(p.stall);
  j["copy"] = BoundedJson(p.copy);
  j["tier0_durable"] = BoundedJson(p.tier0_durable);
  j["durable"] = BoundedJson(p.durable);
  j["safe"] = BoundedJson(p.safe);
  j["drain"] = BoundedJson(p.drain);
  j["min_interval"] = BoundedJson(p.min_interval);
  j["backlog_bounded"] = p.backlog_bounded;
  j["training_link_share_during_drain"] = p.training_link_share_during_drain;
  j["training_link_share_average"] = p.training_link_share_average;
  j["recovery"] = BoundedJson(p.recovery);
  j["rebuild"] = BoundedJson(p.rebuild);
  j["best_interval"] = BoundedJson(p.best_interval);
  j["gpu_hours_lost_per_day"] = p.gpu_hours_lost_per_day;
  j["gpu_hours_lost_per_day_at_job_interval"] = p.gpu_hours_lost_per_day_at_job_interval;
  return j;
}

std::string Seconds(double s) {
  char b[32];
  if (s >= 100) {
    std::snprintf(b, sizeof b, "%.0f s", s);
  } else {
    std::snprintf(b, sizeof b, "%.3g s", s);
  }
  return b;
}

void Line(const std::string& label, const std::string& value, const std::string& note = "") {
  std::printf("  %-34s %-10s%s%s\n", label.c_str(), value.c_str(), note.empty() ? "" : "  ", note.c_str());
}

std::string By(const Bounded& b) { return "bound by " + b.bound; }

void PrintPlan(const PlanJob& job, const CyclePlan& p) {
  std::printf("layout %s: %u hosts x %u ranks, %s per host, %s per checkpoint, every %s\n", p.layout.c_str(),
              job.hosts, job.ranks_per_host, HumanBytes(static_cast<uint64_t>(p.host_bytes)).c_str(),
              HumanBytes(static_cast<uint64_t>(p.job_bytes)).c_str(), Seconds(job.interval_s).c_str());
  Line("stall per checkpoint", Seconds(p.stall.value), By(p.stall));
  if (p.tier0_durable.value > 0) Line("durable on local NVMe after", Seconds(p.tier0_durable.value), By(p.tier0_durable));
  if (p.safe.value > 0) Line("safe on peers after", Seconds(p.safe.value), By(p.safe));
  if (p.drain.value > 0) Line("durable on the shared tier after", Seconds(p.durable.value), By(p.durable));
  std::string backlog = p.backlog_bounded ? "bounded" : "GROWS";
  Line("backlog at this interval", backlog, "a drain takes " + Seconds(p.drain.value) +
                                                "; shorter intervals let the backlog grow");
  char share[96];
  std::snprintf(share, sizeof share, "%.1f%% during a drain, %.1f%% on average",
                100 * p.training_link_share_during_drain, 100 * p.training_link_share_average);
  Line("link share training keeps", share);
  Line("recovery after a host loss", Seconds(p.recovery.value), By(p.recovery));
  if (p.rebuild.value > 0) Line("rebuild of a drive", Seconds(p.rebuild.value), By(p.rebuild));
  Line("best interval", Seconds(p.best_interval.value), p.best_interval.bound);
  char lost[96];
  std::snprintf(lost, sizeof lost, "%.3g at the best interval, %.3g at this one", p.gpu_hours_lost_per_day,
                p.gpu_hours_lost_per_day_at_job_interval);
  Line("GPU-hours lost a day", lost);
}

// The plots of --report: the plan again over a range of one input.
Status WritePlanReport(const std::string& dir, const PlanJob& job, const PlanHost& host, const PlanLayout& layout,
                       const PlanFailures& failures, const CyclePlan& plan) {
  std::vector<ReportPlot> plots;
  auto sweep = [&](const std::string& name, const std::string& title, const std::string& xlabel,
                   const std::vector<double>& xs, auto apply) {
    std::string data = "# " + xlabel + " stall_s durable_s min_interval_s gpu_hours_lost_per_day\n";
    for (double x : xs) {
      PlanJob j = job;
      PlanLayout l = layout;
      apply(x, &j, &l);
      auto p = PlanCycle(j, host, l, failures);
      if (!p.ok()) continue;  // e.g. an interval shorter than the copy
      data += FormatNumber(x) + " " + FormatNumber(p->stall.value) + " " + FormatNumber(p->durable.value) + " " +
              FormatNumber(p->min_interval.value) + " " + FormatNumber(p->gpu_hours_lost_per_day_at_job_interval) + "\n";
    }
    plots.push_back({name, title, "layout " + layout.name + ", the other inputs as given", data,
                     "set xlabel " + GnuplotQuote(xlabel) + "\nset ylabel 'seconds'\nset y2label 'GPU-hours lost a day'\n"
                     "set y2tics\nplot '" + name + ".dat' using 1:2 with linespoints title 'stall', '' using 1:3 with "
                     "linespoints title 'durable', '' using 1:4 with linespoints title 'shortest bounded interval', "
                     "'' using 1:5 axes x1y2 with linespoints title 'GPU-hours lost a day'"});
  };
  std::vector<double> intervals, hosts, osds;
  for (double f : {0.25, 0.5, 1.0, 2.0, 4.0, 8.0}) intervals.push_back(job.interval_s * f);
  for (double h : {1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0}) hosts.push_back(h);
  for (double o : {3.0, 6.0, 12.0, 24.0, 48.0, 96.0, 192.0}) osds.push_back(o);
  sweep("interval", "Against the checkpoint interval", "interval (s)", intervals,
        [](double x, PlanJob* j, PlanLayout*) { j->interval_s = x; });
  sweep("hosts", "Against the number of hosts", "hosts", hosts,
        [](double x, PlanJob* j, PlanLayout*) { j->hosts = static_cast<uint32_t>(x); });
  if (layout.durable.kind == PlanTierKind::kCeph) {
    sweep("osds", "Against the number of OSDs", "OSDs", osds,
          [](double x, PlanJob*, PlanLayout* l) { l->durable.osds = static_cast<uint32_t>(x); });
  }
  std::string summary = "<p>Layout " + HtmlEscape(layout.name) + ": stall " + HtmlEscape(Seconds(plan.stall.value)) +
                        " (bound by " + HtmlEscape(plan.stall.bound) + "), durable after " +
                        HtmlEscape(Seconds(plan.durable.value)) + " (bound by " + HtmlEscape(plan.durable.bound) +
                        ").</p>";
  return WriteReport(dir, "sluice plan: " + layout.name, summary, plots, JsonText(PlanJson(plan)));
}

int PlanOne(const Flags& flags, const PlanProfile& profile, const PlanJob& job) {
  std::string name = flags.Get("layout").value_or("");
  if (name.empty()) {
    for (const auto& n : PlanLayoutNames()) {
      if (LayoutOf(profile, n).ok()) {
        name = n;
        break;
      }
    }
    if (name.empty()) return Fail(Status::InvalidArgument("the profile has no tiers: nothing to plan for"));
  }
  auto layout = LayoutOf(profile, name);
  if (!layout.ok()) return Fail(layout.status(), true);
  // What the job and profile files hold (1), not the command line.
  auto plan = PlanCycle(job, profile.host, *layout, profile.failures);
  if (!plan.ok()) return Fail(plan.status());
  if (auto dir = flags.Get("report")) {
    Status st = PrepareReport(*dir);
    if (st.ok()) st = WritePlanReport(*dir, job, profile.host, *layout, profile.failures, *plan);
    if (!st.ok()) return Fail(st);
  }
  if (flags.Has("json")) {
    PrintJson(PlanJson(*plan));
  } else {
    PrintPlan(job, *plan);
  }
  return kExitOk;
}

int PlanCompare(const Flags& flags, const PlanProfile& profile, const PlanJob& job) {
  std::vector<CyclePlan> plans;
  JsonValue skipped = JsonValue::object();
  for (const auto& n : PlanLayoutNames()) {
    auto layout = LayoutOf(profile, n);
    if (!layout.ok()) {
      skipped[n] = layout.status().message();
      continue;
    }
    // A layout that cannot carry the job (its copy outlasts the interval)
    // is no choice: said so beside the others, as one the profile lacks.
    auto plan = PlanCycle(job, profile.host, *layout, profile.failures);
    if (!plan.ok()) {
      skipped[n] = plan.status().message();
      continue;
    }
    plans.push_back(*plan);
  }
  if (plans.empty()) {
    std::string why;
    for (const auto& [n, reason] : skipped.items()) why += (why.empty() ? "" : "; ") + n + ": " + reason.get<std::string>();
    return Fail(Status::InvalidArgument("no layout of the profile can carry the job" + (why.empty() ? "" : " (" + why + ")")));
  }
  PlanComparison c = ComparePlans(plans);
  if (flags.Has("json")) {
    JsonValue j;
    j["layouts"] = JsonValue::array();
    for (const auto& p : plans) j["layouts"].push_back(PlanJson(p));
    j["skipped"] = skipped;
    j["recommended"] = plans[c.best].layout;
    j["reason"] = c.reason;
    PrintJson(j);
    return kExitOk;
  }
  for (const auto& p : plans) {
    PrintPlan(job, p);
    std::printf("\n");
  }
  for (const auto& [n, why] : skipped.items()) std::printf("layout %s: not planned: %s\n", n.c_str(), why.get<std::string>().c_str());
  std::printf("recommended: %s\n", c.reason.c_str());
  return kExitOk;
}

}  // namespace

int CmdPlan(int argc, char** argv) {
  const CommandSpec spec = PlanSpec();
  std::string action;
  if (argc > 2 && argv[2][0] != '-') action = argv[2];
  if (!action.empty() && action != "compare" && action != "calibrate") {
    return Fail(Status::InvalidArgument("unknown plan action '" + action + "' (compare, calibrate, or none)"), true);
  }
  bool help = false;
  auto flags = Flags::Parse(spec, argc, argv, action.empty() ? 2 : 3, &help);
  if (help) {
    std::fputs(HelpText(spec).c_str(), stdout);
    return kExitOk;
  }
  if (!flags.ok()) return Fail(flags.status(), true);
  if (action == "calibrate") return CmdPlanCalibrate(*flags);
  for (const char* only : {"tier", "out", "bytes", "nic", "share", "d2h", "staging"}) {
    if (flags->Has(only)) return Fail(Status::InvalidArgument(std::string("--") + only + " is for plan calibrate"), true);
  }
  auto profile = ReadProfiles(flags->GetAll("profile"));
  // A file named on the command line that cannot be read or does not
  // parse is an operational error (1), as a --from directory that is missing.
  if (!profile.ok()) return Fail(profile.status());
  auto job_file = flags->Require("job");
  if (!job_file.ok()) return Fail(job_file.status(), true);
  auto job = ReadJob(*job_file);
  if (!job.ok()) return Fail(job.status());
  if (action == "compare") {
    if (flags->Has("layout") || flags->Has("report")) {
      return Fail(Status::InvalidArgument("plan compare takes no --layout or --report: it plans every layout"), true);
    }
    return PlanCompare(*flags, *profile, *job);
  }
  return PlanOne(*flags, *profile, *job);
}

}  // namespace sluice::cli
