// sluice plan calibrate: measures this host and its tiers with sluice's own
// save and restore, and writes a profile for `sluice plan`.
//
// Each --tier gets two saves of --bytes (a synthetic state, in staging that
// holds it whole; the second counts, into staging already used, as a
// trainer's saves after its first) and one restore that verifies every
// chunk; the checkpoints are removed afterwards. The first file tier is the
// local NVMe (tier 0); a rados:// tier is the Ceph tier; a further file tier
// is a shared filesystem. From those runs:
//   memcpy_bytes_per_s      bytes / the save's stall (the copy into staging)
//   nvme_*_bytes_per_s      bytes / the write (commit - stall), bytes / the restore
//   ceph osd_write          this host's write rate x copies / OSDs (assumes the
//                           OSDs, not this host's link, bound it: see doc/planning.md)
//   ceph osd_read           this host's read rate / OSDs
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_report.h"
#include "sluice/aligned_buffer.h"
#include "output.h"
#include "plan_files.h"
#include "sluice/pipeline.h"

namespace sluice::cli {
namespace {

struct TierRun {
  double stall_s = 0, write_s = 0, read_s = 0;
};

// Two saves and one verified restore of `bytes` on `uri`; the second
// save's figures count: a trainer saves into a staging arena it has used
// before, and the first save also faults the fresh arena in.
Result<TierRun> MeasureTier(const std::string& uri, const void* data, uint64_t bytes) {
  PipelineOptions o;
  o.tiers.push_back(TierOptions{uri});
  o.store.create_if_missing = true;
  o.staging_bytes = bytes + o.store.io_bytes;
  o.resume_drains = false;
  ASSIGN_OR_RETURN(auto pipeline, Pipeline::Open(o));
  const CheckpointId first{"sluice-calibrate", static_cast<uint64_t>(getpid()) * 2};
  const CheckpointId id{first.name, first.step + 1};
  TierRun run;
  SaveOptions full;
  full.incremental = false;  // the second save writes every chunk too
  for (const CheckpointId& save : {first, id}) {
    ASSIGN_OR_RETURN(auto pending, pipeline->Begin(save, 0, 1, full));
    RETURN_IF_ERROR(pending->AddItem("state", "", data, bytes));
    ASSIGN_OR_RETURN(auto handle, pending->Snapshot());
    RETURN_IF_ERROR(handle->Wait());
    run.stall_s = handle->stall_seconds();
    run.write_s = handle->progress()[0].durable_seconds - run.stall_s;
  }
  {
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(auto reader, pipeline->OpenCheckpoint(id.name, id.step, nullptr));
    RETURN_IF_ERROR(reader->ReadAll(std::nullopt, [](const ItemInfo&, uint64_t, const void*, size_t) {
      return Status::OK();
    }));
    run.read_s = SecondsSince(start);
  }
  for (const CheckpointId& save : {first, id}) {
    Status removed = pipeline->tier(0).Remove(save);
    if (!removed.ok()) {
      std::fprintf(stderr, "sluice: calibrate: %s left behind: %s\n", uri.c_str(), removed.message().c_str());
    }
  }
  if (run.write_s <= 0 || run.read_s <= 0 || run.stall_s <= 0) {
    return Status::Unavailable(uri + ": a measurement took no time; use a larger --bytes");
  }
  return run;
}

// rados://POOL/PREFIX?conf=...: the `ceph` command line for that cluster.
std::vector<std::string> CephArgs(const std::string& uri, std::string* pool) {
  std::string rest = uri.substr(8);
  *pool = rest.substr(0, rest.find_first_of("/?"));
  std::vector<std::string> argv = {"ceph"};
  std::string query = rest.find('?') == std::string::npos ? "" : rest.substr(rest.find('?') + 1);
  std::stringstream q(query);
  std::string kv;
  while (std::getline(q, kv, '&')) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "conf") argv.insert(argv.end(), {"--conf", v});
    if (k == "id") argv.insert(argv.end(), {"--id", v});
    if (k == "keyring") argv.insert(argv.end(), {"--keyring", v});
  }
  return argv;
}

Result<JsonValue> CephJson(std::vector<std::string> argv, const std::vector<std::string>& command) {
  argv.insert(argv.end(), command.begin(), command.end());
  argv.insert(argv.end(), {"--format", "json"});
  std::string out;
  auto rc = RunTool(argv, &out);
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  if (!rc.ok()) return Status::NotFound("'" + line + "': " + rc.status().message() + " (apt-get install ceph-common)");
  if (*rc != 0) return Status::Unavailable("'" + line + "' failed (exit " + std::to_string(*rc) + ")");
  JsonValue j = JsonValue::parse(out, nullptr, false);
  if (j.is_discarded()) return Status::Unavailable("'" + line + "' printed no JSON");
  return j;
}

// The host's link speed from sysfs (the interface of the default route), in
// bytes/s; 0 if it cannot be told (a VM's virtio link has none).
double LinkSpeedFromSysfs() {
  std::ifstream routes("/proc/net/route");
  std::string line, iface;
  std::getline(routes, line);  // header
  while (std::getline(routes, line)) {
    std::istringstream fields(line);
    std::string name, dest;
    fields >> name >> dest;
    if (dest == "00000000") {
      iface = name;
      break;
    }
  }
  if (iface.empty()) return 0;
  std::ifstream speed("/sys/class/net/" + iface + "/speed");
  long mbit = 0;
  if (!(speed >> mbit) || mbit <= 0) return 0;
  return mbit * 1e6 / 8;
}

Result<double> RateFlag(const Flags& flags, const char* name, double dflt) {
  auto v = flags.Get(name);
  if (!v) return dflt;
  std::string text = *v;
  if (text.size() > 2 && text.compare(text.size() - 2, 2, "/s") == 0) text.resize(text.size() - 2);
  auto parsed = ParseSize(text);
  if (!parsed.ok()) return Status::InvalidArgument(std::string("--") + name + ": " + parsed.status().message());
  if (*parsed == 0) return Status::InvalidArgument(std::string("--") + name + " must be more than 0");
  return static_cast<double>(*parsed);
}

}  // namespace

int CmdPlanCalibrate(const Flags& flags) {
  for (const char* other : {"job", "layout", "report", "profile"}) {
    if (flags.Has(other)) return Fail(Status::InvalidArgument(std::string("--") + other + " is not for plan calibrate"), true);
  }
  const std::vector<std::string> uris = flags.GetAll("tier");
  if (uris.empty()) return Fail(Status::InvalidArgument("--tier is required (repeat it for each tier)"), true);
  auto out = flags.Require("out");
  if (!out.ok()) return Fail(out.status(), true);
  auto bytes = flags.GetSize("bytes", 1ull << 30);
  if (!bytes.ok()) return Fail(bytes.status(), true);
  if (*bytes < (64ull << 20)) return Fail(Status::InvalidArgument("--bytes must be at least 64MiB"), true);
  PlanProfile profile;
  double share = 1;
  if (auto s = flags.Get("share")) {
    char* end = nullptr;
    share = std::strtod(s->c_str(), &end);
    if (end == s->c_str() || *end != '\0' || !(share > 0 && share <= 1)) {
      return Fail(Status::InvalidArgument("--share must be a fraction in (0, 1], not '" + *s + "'"), true);
    }
  }
  auto nic = RateFlag(flags, "nic", LinkSpeedFromSysfs());
  if (!nic.ok()) return Fail(nic.status(), true);
  if (*nic == 0) {
    return Fail(Status::InvalidArgument("give --nic RATE: this host's link speed cannot be read from sysfs"), true);
  }
  auto d2h = RateFlag(flags, "d2h", 0);
  if (!d2h.ok()) return Fail(d2h.status(), true);
  struct sysinfo si {};
  sysinfo(&si);
  auto staging = flags.GetSize("staging", static_cast<uint64_t>(si.totalram) * si.mem_unit / 2);
  if (!staging.ok()) return Fail(staging.status(), true);
  profile.host.nic_bytes_per_s = *nic;
  profile.host.storage_link_share = share;
  profile.host.d2h_bytes_per_s = *d2h;
  profile.host.staging_bytes = static_cast<double>(*staging);

  auto buffer = AlignedBuffer::Allocate(*bytes);
  if (!buffer.ok()) return Fail(buffer.status());
  uint8_t* data = buffer->data();
  for (uint64_t i = 0; i < *bytes; i += 8) {  // incompressible, and faulted in before any timing
    uint64_t v = (i + 1) * 0x9E3779B97F4A7C15ull;
    std::memcpy(data + i, &v, std::min<uint64_t>(8, *bytes - i));
  }
  const double b = static_cast<double>(*bytes);
  const auto started = std::chrono::steady_clock::now();
  JsonValue measured;
  bool have_local = false;
  for (const auto& uri : uris) {
    std::fprintf(stderr, "calibrate: %s (%s saved twice, then restored) ...\n", uri.c_str(), HumanBytes(*bytes).c_str());
    auto run = MeasureTier(uri, data, *bytes);
    if (!run.ok()) return Fail(run.status().WithContext("calibrate " + uri));
    measured[uri] = {{"bytes", *bytes}, {"save_stall_s", run->stall_s}, {"write_s", run->write_s},
                     {"restore_s", run->read_s}};
    if (profile.host.memcpy_bytes_per_s == 0 || b / run->stall_s > profile.host.memcpy_bytes_per_s) {
      profile.host.memcpy_bytes_per_s = b / run->stall_s;  // the fastest copy seen: the others waited on a tier
    }
    const bool s3 = uri.rfind("s3://", 0) == 0;
    if (uri.rfind("rados://", 0) == 0) {
      std::string pool;
      const auto ceph = CephArgs(uri, &pool);
      auto osds = CephJson(ceph, {"osd", "ls"});
      if (!osds.ok()) return Fail(osds.status().WithContext("calibrate " + uri));
      auto size = CephJson(ceph, {"osd", "pool", "get", pool, "size"});
      if (!size.ok()) return Fail(size.status().WithContext("calibrate " + uri));
      PlanTier t;
      t.kind = PlanTierKind::kCeph;
      t.osds = static_cast<uint32_t>(osds->size());
      t.write_amplification = size->value("size", 3);
      if (t.osds == 0) return Fail(Status::Unavailable("calibrate " + uri + ": the cluster lists no OSD"));
      t.osd_write_bytes_per_s = b / run->write_s * t.write_amplification / t.osds;
      t.osd_read_bytes_per_s = b / run->read_s / t.osds;
      profile.tiers["ceph"] = t;
      measured[uri]["osds"] = t.osds;
      measured[uri]["pool_size"] = t.write_amplification;
    } else if (!have_local && !s3) {
      have_local = true;
      profile.host.nvme_write_bytes_per_s = b / run->write_s;
      profile.host.nvme_read_bytes_per_s = b / run->read_s;
      measured[uri]["role"] = "local tier 0";
    } else {
      // A shared tier measured as one rate through this host: an object
      // store (through its gateway) or a shared filesystem.
      PlanTier t;
      t.kind = s3 ? PlanTierKind::kS3 : PlanTierKind::kSharedFs;
      t.write_bytes_per_s = b / run->write_s;
      t.read_bytes_per_s = b / run->read_s;
      profile.tiers[s3 ? "s3" : "shared-fs"] = t;
      measured[uri]["role"] = s3 ? "S3 object store" : "shared filesystem";
    }
  }
  measured["seconds"] = SecondsSince(started);
  profile.measured = measured;
  std::ofstream file(*out);
  file << ProfileJson(profile).dump(2) << "\n";
  file.close();
  if (!file) return Fail(Status::IOError("cannot write " + *out));
  std::printf("profile written to %s (%.1f s): memcpy %s", out->c_str(), SecondsSince(started),
              HumanRate(profile.host.memcpy_bytes_per_s).c_str());
  if (have_local) {
    std::printf(", NVMe write %s read %s", HumanRate(profile.host.nvme_write_bytes_per_s).c_str(),
                HumanRate(profile.host.nvme_read_bytes_per_s).c_str());
  }
  for (const auto& [kind, t] : profile.tiers) {
    if (t.kind == PlanTierKind::kCeph) {
      std::printf(", ceph %u OSDs x %s write", t.osds, HumanRate(t.osd_write_bytes_per_s).c_str());
    } else {
      std::printf(", %s write %s", kind.c_str(), HumanRate(t.write_bytes_per_s).c_str());
    }
  }
  std::printf("\n");
  return kExitOk;
}

}  // namespace sluice::cli
