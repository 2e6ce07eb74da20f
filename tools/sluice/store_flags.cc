#include "store_flags.h"

#include <cstdio>

namespace sluice::cli {

std::vector<FlagSpec> StoreFlagSpecs(bool writer) {
  std::vector<FlagSpec> f = {
      {"store", "URI", "store: file:///path[?dirs=/path2,/path3], rados://POOL/PREFIX?conf=..., s3://BUCKET/PREFIX?endpoint=..., or a plain path"},
      {"tier", "URI", "a tier, fastest first; repeat for each tier (instead of --store)", true},
  };
  if (writer) {
    f.push_back({"chunk-size", "SIZE", "bytes per checksummed chunk (default 4MiB, at most 256MiB)"});
    f.push_back({"io-size", "SIZE", "bytes per write submitted to the device (default 4MiB)"});
    f.push_back({"object-size", "SIZE", "data objects roll over at this size (default 1GiB)"});
  }
  return f;
}

Result<StoreOptions> StoreOptionsFromFlags(const Flags& flags) {
  StoreOptions o;
  ASSIGN_OR_RETURN(o.chunk_bytes, flags.GetSize("chunk-size", o.chunk_bytes));
  ASSIGN_OR_RETURN(o.io_bytes, flags.GetSize("io-size", o.io_bytes));
  ASSIGN_OR_RETURN(o.object_bytes, flags.GetSize("object-size", o.object_bytes));
  RETURN_IF_ERROR(o.Validate());
  return o;
}

std::vector<FlagSpec> TierPolicyFlagSpecs() {
  return {
      {"rate-limit", "TIER=RATE",
       "cap background writes into a tier (by position 0,1,... or URI) at RATE\n"
       "                            bytes/s, e.g. 1=200MiB; repeatable (default: no cap)", true},
      {"keep-last", "TIER=K",
       "keep the newest K committed steps of each name on that tier; older ones go\n"
       "                            once a later tier holds them; repeatable (default: all)", true},
      BacklogPolicyFlagSpec(),
  };
}

FlagSpec BacklogPolicyFlagSpec() {
  return {"backlog-policy", "[TIER=]POLICY",
          "what drains into a later tier do when it falls behind: coalesce\n"
          "                            (default: only the newest waiting step drains there, older\n"
          "                            waiting ones are superseded) or drain-every (every step,\n"
          "                            oldest first); without TIER= for every later tier", true};
}

Result<std::vector<std::string>> TierUrisFromFlags(const Flags& flags) {
  std::vector<std::string> tiers = flags.GetAll("tier");
  if (flags.Has("store") && !tiers.empty()) {
    return Status::InvalidArgument("give either --store or --tier (repeated), not both");
  }
  if (flags.Has("store")) return std::vector<std::string>{*flags.Get("store")};
  if (tiers.empty()) return Status::InvalidArgument("--store (or --tier, repeated) is required");
  if (tiers.size() > 16) return Status::InvalidArgument("at most 16 --tier");
  return tiers;
}

namespace {

// "1=200MiB" -> (tier index, value text); the tier is a position or a URI.
Result<std::pair<size_t, std::string>> TierAssignment(const std::string& flag, const std::string& text,
                                                      const std::vector<std::string>& uris) {
  size_t eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return Status::InvalidArgument("--" + flag + " '" + text + "' is not TIER=VALUE: name the tier by position or URI, e.g. --" +
                                   flag + " 1=" + (flag == "keep-last" ? "3" : "200MiB"));
  }
  std::string tier = text.substr(0, eq);
  for (size_t k = 0; k < uris.size(); ++k) {
    if (uris[k] == tier) return std::make_pair(k, text.substr(eq + 1));
  }
  if (tier.find_first_not_of("0123456789") == std::string::npos && tier.size() < 4) {
    size_t k = std::stoul(tier);
    if (k < uris.size()) return std::make_pair(k, text.substr(eq + 1));
  }
  return Status::InvalidArgument("--" + flag + " '" + text + "': no tier '" + tier + "' (there are " +
                                 std::to_string(uris.size()) + ", numbered from 0, or give a tier's URI)");
}

}  // namespace

Result<PipelineOptions> PipelineOptionsFromFlags(const Flags& flags, bool create) {
  ASSIGN_OR_RETURN(auto uris, TierUrisFromFlags(flags));
  PipelineOptions o;
  for (const auto& u : uris) o.tiers.push_back(TierOptions{u});
  for (const auto& text : flags.GetAll("rate-limit")) {
    ASSIGN_OR_RETURN(auto a, TierAssignment("rate-limit", text, uris));
    auto rate = ParseSize(a.second);
    if (!rate.ok() || *rate == 0) {
      return Status::InvalidArgument("--rate-limit '" + text + "': RATE must be a positive size per second, e.g. 200MiB");
    }
    o.tiers[a.first].rate_bytes_per_sec = *rate;
  }
  for (const auto& text : flags.GetAll("keep-last")) {
    ASSIGN_OR_RETURN(auto a, TierAssignment("keep-last", text, uris));
    const std::string& v = a.second;
    if (v.find_first_not_of("0123456789") != std::string::npos || v.size() > 9 || std::stoul(v) == 0) {
      return Status::InvalidArgument("--keep-last '" + text + "': K must be a positive integer");
    }
    o.tiers[a.first].keep_last = static_cast<uint32_t>(std::stoul(v));
  }
  for (const auto& text : flags.GetAll("backlog-policy")) {
    auto policy_of = [&](const std::string& v) -> Result<BacklogPolicy> {
      if (v == "coalesce") return BacklogPolicy::kCoalesce;
      if (v == "drain-every") return BacklogPolicy::kDrainEvery;
      return Status::InvalidArgument("--backlog-policy '" + text + "': POLICY must be coalesce or drain-every");
    };
    if (text.find('=') == std::string::npos) {
      ASSIGN_OR_RETURN(BacklogPolicy policy, policy_of(text));
      for (auto& t : o.tiers) t.backlog = policy;
      continue;
    }
    ASSIGN_OR_RETURN(auto a, TierAssignment("backlog-policy", text, uris));
    ASSIGN_OR_RETURN(o.tiers[a.first].backlog, policy_of(a.second));
  }
  ASSIGN_OR_RETURN(o.store, StoreOptionsFromFlags(flags));
  o.store.create_if_missing = create;
  o.staging_bytes = o.store.io_bytes;
  o.copy_threads = 1;
  o.resume_drains = false;
  return o;
}

Result<std::unique_ptr<Store>> OpenStoreFromFlags(const Flags& flags, bool create) {
  ASSIGN_OR_RETURN(auto uris, TierUrisFromFlags(flags));
  if (uris.size() != 1) return Status::InvalidArgument("this command takes one store (--store URI)");
  std::string uri = uris[0];
  ASSIGN_OR_RETURN(StoreOptions o, StoreOptionsFromFlags(flags));
  o.create_if_missing = create;
  return Store::Open(uri, o);
}

Result<std::string> NameFromFlags(const Flags& flags) {
  ASSIGN_OR_RETURN(std::string name, flags.Require("name"));
  RETURN_IF_ERROR(ValidateCheckpointName(name));
  return name;
}

Result<std::string> OptionalNameFromFlags(const Flags& flags) {
  if (!flags.Has("name")) return std::string();
  return NameFromFlags(flags);
}

Result<std::optional<uint64_t>> StepFromFlags(const Flags& flags, bool allow_latest, bool required) {
  auto v = flags.Get("step");
  if (!v) {
    if (required) return Status::InvalidArgument("--step is required");
    return std::optional<uint64_t>();
  }
  if (allow_latest && (*v == "latest" || *v == "latest-good")) return std::optional<uint64_t>();
  auto s = ParseStep(*v);
  if (!s.ok()) {
    return Status::InvalidArgument("--step '" + v->substr(0, 40) + "' is not a step: give a number (e.g. --step 1000)" +
                                   (allow_latest ? ", latest or latest-good" : ""));
  }
  return std::optional<uint64_t>(*s);
}

namespace {

// A damaged newest step's message advises --step latest-good; not to one
// who gave it.
std::string WithoutLatestGoodAdvice(std::string message) {
  const size_t at = message.find(" (--step latest-good");
  if (at != std::string::npos) message.erase(at, message.find(')', at) + 1 - at);
  return message;
}

}  // namespace

bool LatestGoodFromFlags(const Flags& flags) { return flags.Get("step").value_or("") == "latest-good"; }

Result<std::unique_ptr<CheckpointReader>> OpenCheckpointFromFlags(Pipeline& pipeline, const std::string& name,
                                                                  std::optional<uint64_t> step, bool latest_good,
                                                                  ReadRecovery* recovery) {
  auto reader = pipeline.OpenCheckpoint(name, step, recovery);
  if (reader.ok() || !latest_good || step || reader.status().code() != StatusCode::kCorruption) return reader;
  ASSIGN_OR_RETURN(uint64_t good, pipeline.LatestGoodStep(name));
  std::fprintf(stderr, "sluice: %s\nsluice: --step latest-good: using %s, the newest intact step\n",
               WithoutLatestGoodAdvice(reader.status().message()).c_str(), CheckpointLabel(name, good).c_str());
  return pipeline.OpenCheckpoint(name, good, recovery);
}

Result<uint64_t> ResolveStepOnStore(Store& store, const std::string& name, std::optional<uint64_t> step,
                                    bool latest_good) {
  if (step) return *step;
  auto r = store.OpenCheckpoint(name, std::nullopt);
  if (r.ok()) return (*r)->info().step;
  if (!latest_good || r.status().code() != StatusCode::kCorruption) return r.status();
  ASSIGN_OR_RETURN(uint64_t good, store.LatestGoodStep(name));
  std::fprintf(stderr, "sluice: %s\nsluice: --step latest-good: using %s, the newest intact step\n",
               WithoutLatestGoodAdvice(r.status().message()).c_str(), CheckpointLabel(name, good).c_str());
  return good;
}

Result<CheckpointArgs> CheckpointArgsFromFlags(const Flags& flags) {
  CheckpointArgs args;
  ASSIGN_OR_RETURN(args.name, NameFromFlags(flags));
  ASSIGN_OR_RETURN(args.step, StepFromFlags(flags, true, false));
  args.latest_good = LatestGoodFromFlags(flags);
  ASSIGN_OR_RETURN(args.pipeline, PipelineOptionsFromFlags(flags, false));
  args.json = flags.Has("json");
  return args;
}

std::vector<std::string> CheckpointArgs::uris() const {
  std::vector<std::string> out;
  for (const auto& t : pipeline.tiers) out.push_back(t.uri);
  return out;
}

Result<TierWalkArgs> TierWalkArgsFromFlags(const Flags& flags) {
  TierWalkArgs args;
  ASSIGN_OR_RETURN(args.name, OptionalNameFromFlags(flags));
  auto rate = flags.GetSize("rate-limit", 0);
  if (!rate.ok()) {
    return Status::InvalidArgument("--rate-limit '" + flags.Get("rate-limit").value_or("") +
                                   "' is not a size per second: one cap for every tier this command reads, "
                                   "no TIER=, e.g. --rate-limit 200MiB");
  }
  args.rate_bytes_per_sec = *rate;
  ASSIGN_OR_RETURN(args.uris, TierUrisFromFlags(flags));
  ASSIGN_OR_RETURN(args.store, StoreOptionsFromFlags(flags));
  return args;
}

}  // namespace sluice::cli
