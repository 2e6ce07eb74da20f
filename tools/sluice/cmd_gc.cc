// sluice gc: reclaim objects that no committed checkpoint references.
#include <cstdio>

#include "output.h"
#include "store_flags.h"

namespace sluice::cli {

CommandSpec GcSpec() {
  CommandSpec spec;
  spec.name = "gc";
  spec.usage = "gc --store URI [--min-age DURATION] [--json]";
  spec.summary =
      "Removes every object no valid commit record reaches: data and manifests of\n"
      "aborted or crashed saves, leftovers of interrupted commits. A step whose commit\n"
      "record or manifest is damaged is left untouched (verify reports it). A file\n"
      "store's directories left empty go too.";
  spec.flags = StoreFlagSpecs(false);
  spec.flags.insert(spec.flags.end(), {
      {"min-age", "DURATION", "spare objects modified more recently than this (default 0s;\n"
                              "                            use e.g. 10m while saves may be running)"},
      {"json", "", "print the result as one JSON object"},
  });
  spec.details =
      "A save running during gc with --min-age 0 may have its partial data removed; it\n"
      "then fails before committing (it never commits a checkpoint with missing data).";
  return spec;
}

int CmdGc(int argc, char** argv) {
  const CommandSpec spec = GcSpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  auto min_age = ParseDurationMs(flags.Get("min-age").value_or("0s"));
  if (!min_age.ok()) return Fail(min_age.status().WithContext("--min-age"), true);
  auto uris = TierUrisFromFlags(flags);
  if (!uris.ok()) return Fail(uris.status(), true);
  GcReport total;
  for (const auto& uri : *uris) {
    auto store = Store::Open(uri, StoreOptions{});
    if (!store.ok()) return FailStoreOpen(store.status());
    auto report = (*store)->CollectGarbage(*min_age);
    if (!report.ok()) return Fail(report.status());
    total.objects_removed += report->objects_removed;
    total.bytes_removed += report->bytes_removed;
  }
  const GcReport* report = &total;
  if (flags.Has("json")) {
    PrintJson({{"objects_removed", report->objects_removed}, {"bytes_removed", report->bytes_removed}});
  } else {
    std::printf("gc: removed %llu object(s), %s\n",
                static_cast<unsigned long long>(report->objects_removed),
                HumanBytes(report->bytes_removed).c_str());
  }
  return kExitOk;
}

}  // namespace sluice::cli
