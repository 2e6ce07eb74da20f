// sluice rm: remove one checkpoint, or every step of a name.
#include <cstdio>

#include "output.h"
#include "store_flags.h"

namespace sluice::cli {

int CmdRm(int argc, char** argv) {
  CommandSpec spec;
  spec.name = "rm";
  spec.usage = "rm --store URI --name NAME (--step N | --all-steps)";
  spec.summary =
      "Removes a checkpoint: its commit record first, so it disappears at once, then\n"
      "its manifests and data. Also removes an incomplete checkpoint's leftovers.";
  spec.flags = StoreFlagSpecs(false);
  spec.flags.insert(spec.flags.end(), {
      {"name", "NAME", "checkpoint name"},
      {"step", "N", "step to remove"},
      {"all-steps", "", "remove every step of NAME, committed or not"},
  });
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
  if (!flags.Has("store")) return Fail(Status::InvalidArgument("--store is required"), true);
  auto store = OpenStoreFromFlags(flags, false);
  if (!store.ok()) return FailStoreOpen(store.status());
  std::vector<uint64_t> steps;
  if (step->has_value()) {
    steps.push_back(**step);
  } else {
    auto list = (*store)->List(*name, true);
    if (!list.ok()) return Fail(list.status());
    for (const auto& c : *list) steps.push_back(c.step);
    if (steps.empty()) return Fail(Status::NotFound("no checkpoint named '" + *name + "'"));
  }
  for (uint64_t s : steps) {
    if (Status st = (*store)->Remove(CheckpointId{*name, s}); !st.ok()) return Fail(st);
    std::printf("removed %s@%llu\n", name->c_str(), static_cast<unsigned long long>(s));
  }
  return kExitOk;
}

}  // namespace sluice::cli
