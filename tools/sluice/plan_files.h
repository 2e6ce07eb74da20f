// `sluice plan`'s files: the profile (a host's measured rates and its
// tiers', as `sluice plan calibrate` writes it, or by hand) and the job. Both
// JSON; sizes and rates are numbers (bytes, bytes/s) or strings such as
// "2.8TiB" and "1.5GiB/s". doc/planning.md lists every field.
#ifndef SLUICE_TOOLS_SLUICE_PLAN_FILES_H_
#define SLUICE_TOOLS_SLUICE_PLAN_FILES_H_

#include <map>
#include <string>
#include <vector>

#include "output.h"
#include "sluice/plan.h"
#include "sluice/status.h"

namespace sluice::cli {

constexpr const char* kProfileFormat = "sluice.plan.profile";
constexpr const char* kJobFormat = "sluice.plan.job";
constexpr int kPlanFileVersion = 1;
constexpr const char* kSluiceVersion = "0.1.0";

// The cluster the planner reads (sluice/plan.h), plus calibrate's raw
// figures, kept as they are.
struct PlanProfile : PlanCluster {
  JsonValue measured;
};

// Reads a profile, or several (one per host: the cluster is as fast as its
// slowest host, so each host rate is the least of them, and each tier's
// rates too). InvalidArgument naming the file and the field on anything
// missing, mistyped, or from another format version or sluice version.
Result<PlanProfile> ReadProfiles(const std::vector<std::string>& paths);
Result<PlanJob> ReadJob(const std::string& path);

// The profile as `sluice plan calibrate` writes it.
JsonValue ProfileJson(const PlanProfile& profile);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_PLAN_FILES_H_
