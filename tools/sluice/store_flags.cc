#include "store_flags.h"

namespace sluice::cli {

std::vector<FlagSpec> StoreFlagSpecs(bool writer) {
  std::vector<FlagSpec> f = {
      {"store", "URI", "store: file:///path or a plain path (required)"},
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
  if (o.chunk_bytes == 0 || o.chunk_bytes > (256ull << 20)) {
    return Status::InvalidArgument("--chunk-size must be between 1 byte and 256MiB");
  }
  if (o.io_bytes < 4096 || o.io_bytes > (256ull << 20) || o.io_bytes % 4096 != 0) {
    return Status::InvalidArgument("--io-size must be a multiple of 4KiB between 4KiB and 256MiB");
  }
  if (o.object_bytes < (1ull << 20)) return Status::InvalidArgument("--object-size must be at least 1MiB");
  return o;
}

Result<std::unique_ptr<Store>> OpenStoreFromFlags(const Flags& flags, bool create) {
  ASSIGN_OR_RETURN(std::string uri, flags.Require("store"));
  ASSIGN_OR_RETURN(StoreOptions o, StoreOptionsFromFlags(flags));
  o.create_if_missing = create;
  return Store::Open(uri, o);
}

Result<std::string> NameFromFlags(const Flags& flags) {
  ASSIGN_OR_RETURN(std::string name, flags.Require("name"));
  RETURN_IF_ERROR(ValidateCheckpointName(name));
  return name;
}

Result<std::optional<uint64_t>> StepFromFlags(const Flags& flags, bool allow_latest, bool required) {
  auto v = flags.Get("step");
  if (!v) {
    if (required) return Status::InvalidArgument("--step is required");
    return std::optional<uint64_t>();
  }
  if (allow_latest && *v == "latest") return std::optional<uint64_t>();
  ASSIGN_OR_RETURN(uint64_t s, ParseStep(*v));
  return std::optional<uint64_t>(s);
}

}  // namespace sluice::cli
