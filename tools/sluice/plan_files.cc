#include "plan_files.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace sluice::cli {
namespace {

// Reads fields of one JSON object, naming "<file>: <prefix><field>" in
// every error.
class Fields {
 public:
  Fields(const std::string& file, const std::string& prefix, const JsonValue& obj)
      : file_(file), prefix_(prefix), obj_(obj) {}

  Status Error(const std::string& field, const std::string& what) const {
    return Status::InvalidArgument(file_ + ": " + prefix_ + field + " " + what);
  }
  bool Has(const std::string& field) const { return obj_.contains(field) && !obj_.at(field).is_null(); }

  // A number, or a string with a size suffix ("2GiB", "1.5GiB/s").
  Result<double> Amount(const std::string& field, std::optional<double> dflt = std::nullopt) const {
    if (!Has(field)) {
      if (dflt) return *dflt;
      return Error(field, "is missing");
    }
    const JsonValue& v = obj_.at(field);
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
      std::string text = v.get<std::string>();
      if (text.size() > 2 && text.compare(text.size() - 2, 2, "/s") == 0) text.resize(text.size() - 2);
      auto parsed = ParseSize(text);
      if (!parsed.ok()) return Error(field, "is not a number or a size like \"2GiB\" or \"1.5GiB/s\": '" +
                                                v.get<std::string>() + "'");
      return static_cast<double>(*parsed);
    }
    return Error(field, "must be a number or a size string, not " + std::string(v.type_name()));
  }
  Result<uint32_t> Count(const std::string& field, std::optional<uint32_t> dflt = std::nullopt) const {
    if (!Has(field)) {
      if (dflt) return *dflt;
      return Error(field, "is missing");
    }
    const JsonValue& v = obj_.at(field);
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 10'000'000) {
      return Error(field, "must be a whole number of at least 1, not " + v.dump());
    }
    return static_cast<uint32_t>(v.get<int64_t>());
  }
  Result<bool> Flag(const std::string& field, bool dflt) const {
    if (!Has(field)) return dflt;
    if (!obj_.at(field).is_boolean()) return Error(field, "must be true or false");
    return obj_.at(field).get<bool>();
  }
  Result<std::string> Text(const std::string& field, const std::string& dflt) const {
    if (!Has(field)) return dflt;
    if (!obj_.at(field).is_string()) return Error(field, "must be a string");
    return obj_.at(field).get<std::string>();
  }

 private:
  const std::string file_, prefix_;
  const JsonValue& obj_;
};

Result<JsonValue> ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  JsonValue j = JsonValue::parse(text.str(), nullptr, false);
  if (j.is_discarded()) return Status::InvalidArgument(path + ": not valid JSON");
  if (!j.is_object()) return Status::InvalidArgument(path + ": not a JSON object");
  return j;
}

Status CheckFormat(const std::string& path, const JsonValue& j, const char* format) {
  Fields f(path, "", j);
  if (!j.contains("format") || j["format"] != format) {
    return f.Error("format", std::string("must be \"") + format + "\"" +
                                 (j.contains("format") ? ", not " + j["format"].dump() : " (missing)"));
  }
  if (!j.contains("version") || j["version"] != kPlanFileVersion) {
    return f.Error("version", "is " + (j.contains("version") ? j["version"].dump() : std::string("missing")) +
                                  "; this sluice reads version " + std::to_string(kPlanFileVersion));
  }
  return Status::OK();
}

Result<PlanTier> ReadTier(const std::string& path, const std::string& kind, const JsonValue& j) {
  if (!j.is_object()) return Status::InvalidArgument(path + ": tiers." + kind + " must be an object");
  Fields f(path, "tiers." + kind + ".", j);
  PlanTier t;
  if (kind == "ceph") {
    t.kind = PlanTierKind::kCeph;
    ASSIGN_OR_RETURN(t.osds, f.Count("osds"));
    ASSIGN_OR_RETURN(t.osd_write_bytes_per_s, f.Amount("osd_write_bytes_per_s"));
    ASSIGN_OR_RETURN(t.osd_read_bytes_per_s, f.Amount("osd_read_bytes_per_s"));
    ASSIGN_OR_RETURN(t.write_amplification, f.Amount("write_amplification", 3.0));
    ASSIGN_OR_RETURN(t.network_bytes_per_s, f.Amount("network_bytes_per_s", 0.0));
  } else if (kind == "s3" || kind == "shared-fs") {
    t.kind = kind == "s3" ? PlanTierKind::kS3 : PlanTierKind::kSharedFs;
    ASSIGN_OR_RETURN(t.write_bytes_per_s, f.Amount("write_bytes_per_s"));
    ASSIGN_OR_RETURN(t.read_bytes_per_s, f.Amount("read_bytes_per_s"));
  } else {
    return Status::InvalidArgument(path + ": tiers." + kind + " is not a tier kind (ceph, s3, shared-fs)");
  }
  return t;
}

Result<PlanProfile> ReadProfile(const std::string& path) {
  ASSIGN_OR_RETURN(JsonValue j, ReadJsonFile(path));
  RETURN_IF_ERROR(CheckFormat(path, j, kProfileFormat));
  Fields top(path, "", j);
  ASSIGN_OR_RETURN(std::string version, top.Text("sluice_version", ""));
  if (version != kSluiceVersion) {
    return top.Error("sluice_version", "is \"" + version + "\", this is sluice " + kSluiceVersion +
                                           ": calibrate again with this version (its measurements may differ)");
  }
  if (!j.contains("host") || !j["host"].is_object()) return top.Error("host", "is missing");
  Fields h(path, "host.", j["host"]);
  PlanProfile p;
  ASSIGN_OR_RETURN(p.host.memcpy_bytes_per_s, h.Amount("memcpy_bytes_per_s"));
  ASSIGN_OR_RETURN(p.host.d2h_bytes_per_s, h.Amount("d2h_bytes_per_s", 0.0));
  ASSIGN_OR_RETURN(p.host.staging_bytes, h.Amount("staging_bytes"));
  ASSIGN_OR_RETURN(p.host.nvme_write_bytes_per_s, h.Amount("nvme_write_bytes_per_s", 0.0));
  ASSIGN_OR_RETURN(p.host.nvme_read_bytes_per_s, h.Amount("nvme_read_bytes_per_s", 0.0));
  ASSIGN_OR_RETURN(p.host.nic_bytes_per_s, h.Amount("nic_bytes_per_s"));
  ASSIGN_OR_RETURN(p.host.storage_link_share, h.Amount("storage_link_share", 1.0));
  ASSIGN_OR_RETURN(p.host.peer_bytes_per_s, h.Amount("peer_bytes_per_s", 0.0));
  if (j.contains("tiers")) {
    if (!j["tiers"].is_object()) return top.Error("tiers", "must be an object");
    for (const auto& [kind, tier] : j["tiers"].items()) {
      ASSIGN_OR_RETURN(p.tiers[kind], ReadTier(path, kind, tier));
    }
  }
  if (j.contains("failures")) {
    if (!j["failures"].is_object()) return top.Error("failures", "must be an object");
    Fields f(path, "failures.", j["failures"]);
    ASSIGN_OR_RETURN(p.failures.host_mtbf_hours, f.Amount("host_mtbf_hours", 0.0));
    ASSIGN_OR_RETURN(p.failures.slow_osd, f.Flag("slow_osd", false));
    ASSIGN_OR_RETURN(p.failures.drive_bytes, f.Amount("drive_bytes", 0.0));
    ASSIGN_OR_RETURN(p.failures.rebuild_cap_bytes_per_s, f.Amount("rebuild_cap_bytes_per_s", 0.0));
    ASSIGN_OR_RETURN(p.failures.restart_s, f.Amount("restart_s", 0.0));
  }
  if (j.contains("measured")) p.measured = j["measured"];
  return p;
}

}  // namespace

Result<PlanProfile> ReadProfiles(const std::vector<std::string>& paths) {
  if (paths.empty()) return Status::InvalidArgument("--profile is required");
  ASSIGN_OR_RETURN(PlanProfile out, ReadProfile(paths[0]));
  for (size_t i = 1; i < paths.size(); ++i) {
    ASSIGN_OR_RETURN(PlanProfile next, ReadProfile(paths[i]));
    AddSlowerHost(&out, next);
  }
  return out;
}

Result<PlanJob> ReadJob(const std::string& path) {
  ASSIGN_OR_RETURN(JsonValue j, ReadJsonFile(path));
  RETURN_IF_ERROR(CheckFormat(path, j, kJobFormat));
  Fields f(path, "job.", j);
  PlanJob job;
  ASSIGN_OR_RETURN(job.state_bytes_per_rank, f.Amount("state_bytes_per_rank"));
  ASSIGN_OR_RETURN(job.ranks_per_host, f.Count("ranks_per_host", 1));
  ASSIGN_OR_RETURN(job.hosts, f.Count("hosts"));
  ASSIGN_OR_RETURN(job.interval_s, f.Amount("interval_s"));
  ASSIGN_OR_RETURN(job.step_s, f.Amount("step_s"));
  ASSIGN_OR_RETURN(job.gpu, f.Flag("gpu", false));
  ASSIGN_OR_RETURN(std::string snapshot, f.Text("snapshot", "eager"));
  if (snapshot != "eager" && snapshot != "lazy") return f.Error("snapshot", "must be \"eager\" or \"lazy\"");
  job.lazy = snapshot == "lazy";
  return job;
}

JsonValue ProfileJson(const PlanProfile& p) {
  JsonValue j;
  j["format"] = kProfileFormat;
  j["version"] = kPlanFileVersion;
  j["sluice_version"] = kSluiceVersion;
  j["host"] = {{"memcpy_bytes_per_s", p.host.memcpy_bytes_per_s},
               {"d2h_bytes_per_s", p.host.d2h_bytes_per_s},
               {"staging_bytes", p.host.staging_bytes},
               {"nvme_write_bytes_per_s", p.host.nvme_write_bytes_per_s},
               {"nvme_read_bytes_per_s", p.host.nvme_read_bytes_per_s},
               {"nic_bytes_per_s", p.host.nic_bytes_per_s},
               {"storage_link_share", p.host.storage_link_share},
               {"peer_bytes_per_s", p.host.peer_bytes_per_s}};
  JsonValue tiers = JsonValue::object();
  for (const auto& [kind, t] : p.tiers) {
    if (t.kind == PlanTierKind::kCeph) {
      tiers[kind] = {{"osds", t.osds}, {"osd_write_bytes_per_s", t.osd_write_bytes_per_s},
                     {"osd_read_bytes_per_s", t.osd_read_bytes_per_s},
                     {"write_amplification", t.write_amplification},
                     {"network_bytes_per_s", t.network_bytes_per_s}};
    } else {
      tiers[kind] = {{"write_bytes_per_s", t.write_bytes_per_s}, {"read_bytes_per_s", t.read_bytes_per_s}};
    }
  }
  j["tiers"] = tiers;
  j["failures"] = {{"host_mtbf_hours", p.failures.host_mtbf_hours}, {"slow_osd", p.failures.slow_osd},
                   {"drive_bytes", p.failures.drive_bytes},
                   {"rebuild_cap_bytes_per_s", p.failures.rebuild_cap_bytes_per_s},
                   {"restart_s", p.failures.restart_s}};
  if (!p.measured.is_null()) j["measured"] = p.measured;
  return j;
}

}  // namespace sluice::cli
