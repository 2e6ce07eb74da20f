// sluice rm: remove one checkpoint, or every step of a name.
#include <cstdio>

#include "output.h"
#include "store_flags.h"

namespace sluice::cli {

CommandSpec RmSpec() {
  CommandSpec spec;
  spec.name = "rm";
  spec.usage = "rm --store URI --name NAME (--step N | --all-steps)";
  spec.summary =
      "Removes a checkpoint: its commit record first, so it disappears at once, then\n"
      "its manifests and data. Data objects a later step still shares (an\n"
      "incremental save's references) stay until no step names them. Also removes\n"
      "an incomplete checkpoint's leftovers.";
  spec.flags = StoreFlagSpecs(false);
  spec.flags.insert(spec.flags.end(), {
      {"name", "NAME", "checkpoint name"},
      {"step", "N", "step to remove"},
      {"all-steps", "", "remove every step of NAME, committed or not"},
  });
  return spec;
}

int CmdRm(int argc, char** argv) {
  const CommandSpec spec = RmSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  auto name = NameFromFlags(flags);
  if (!name.ok()) return Fail(name.status(), true);
  if (flags.Has("step") == flags.Has("all-steps")) {
    return Fail(Status::InvalidArgument("give exactly one of --step N and --all-steps"), true);
  }
  auto step = StepFromFlags(flags, false, false);
  if (!step.ok()) return Fail(step.status(), true);
  auto uris = TierUrisFromFlags(flags);
  if (!uris.ok()) return Fail(uris.status(), true);
  // From every tier given, the slowest first, so that the copy restores
  // read (the fastest) is the last to go.
  bool removed_any = false;
  for (size_t i = uris->size(); i-- > 0;) {
    StoreOptions o;
    auto store = Store::Open((*uris)[i], o);
    if (!store.ok()) return FailStoreOpen(store.status());
    const std::string where = uris->size() > 1 ? " from tier " + std::to_string(i) : "";
    if (!step->has_value()) {
      // Every step in one pass over the name (not a listing per step).
      auto removed = (*store)->RemoveAll(*name);
      if (removed.status().IsNotFound() && uris->size() > 1) continue;
      if (!removed.ok()) return Fail(removed.status());
      removed_any = true;
      std::printf("removed %llu step(s) of %s%s\n", static_cast<unsigned long long>(*removed), name->c_str(),
                  where.c_str());
      continue;
    }
    Status st = (*store)->Remove(CheckpointId{*name, **step});
    if (st.IsNotFound() && uris->size() > 1) continue;
    if (!st.ok()) return Fail(st);
    removed_any = true;
    std::printf("removed %s%s\n", CheckpointLabel(*name, **step).c_str(), where.c_str());
  }
  if (!removed_any) {
    return Fail(Status::NotFound(step->has_value() ? CheckpointLabel(*name, **step) + " not found"
                                                   : "no checkpoint named '" + *name + "'"));
  }
  return kExitOk;
}

}  // namespace sluice::cli
