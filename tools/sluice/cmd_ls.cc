// sluice ls: committed (and with --all, incomplete) checkpoints.
#include <cstdio>
#include <ctime>

#include "output.h"
#include "store_flags.h"

namespace sluice::cli {
namespace {

std::string FormatTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  time_t t = static_cast<time_t>(unix_ms / 1000);
  tm tmv{};
  gmtime_r(&t, &tmv);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tmv);
  return buf;
}

}  // namespace

int CmdLs(int argc, char** argv) {
  CommandSpec spec;
  spec.name = "ls";
  spec.usage = "ls --store URI [--name NAME] [--all] [--json]";
  spec.summary = "Lists committed checkpoints: name, step, bytes, ranks, items, creation time.";
  spec.flags = StoreFlagSpecs(false);
  spec.flags.insert(spec.flags.end(), {
      {"name", "NAME", "only checkpoints of this name"},
      {"all", "", "also list incomplete checkpoints (no valid commit record), marked so"},
      {"json", "", "print a JSON array, one object per checkpoint"},
  });
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  std::string name = flags.Get("name").value_or("");
  if (flags.Has("name")) {
    if (Status st = ValidateCheckpointName(name); !st.ok()) return Fail(st, true);
  }
  if (!flags.Has("store")) return Fail(Status::InvalidArgument("--store is required"), true);
  auto store = OpenStoreFromFlags(flags, false);
  if (!store.ok()) return FailStoreOpen(store.status());
  auto list = (*store)->List(name, flags.Has("all"));
  if (!list.ok()) return Fail(list.status());
  if (flags.Has("json")) {
    Json j;
    j.BeginArray();
    for (const auto& c : *list) {
      j.BeginObject()
          .Key("name").Str(c.name).Key("step").UInt(c.step).Key("bytes").UInt(c.bytes)
          .Key("ranks").UInt(c.ranks).Key("items").UInt(c.items)
          .Key("created").Str(FormatTime(c.created_unix_ms))
          .Key("created_unix_ms").Int(c.created_unix_ms)
          .Key("complete").Bool(c.complete);
      if (!c.complete) j.Key("problem").Str(c.problem);
      j.EndObject();
    }
    j.EndArray();
    std::printf("%s\n", j.str().c_str());
    return kExitOk;
  }
  if (list->empty()) {
    std::printf("no checkpoints%s\n", flags.Has("all") ? "" : " (--all also shows incomplete ones)");
    return kExitOk;
  }
  std::printf("%-24s %20s %12s %6s %8s  %-20s  %s\n", "NAME", "STEP", "BYTES", "RANKS", "ITEMS",
              "CREATED", "STATE");
  for (const auto& c : *list) {
    std::printf("%-24s %20llu %12s %6u %8s  %-20s  %s\n", c.name.c_str(),
                static_cast<unsigned long long>(c.step), HumanBytes(c.bytes).c_str(), c.ranks,
                c.complete ? std::to_string(c.items).c_str() : "-", FormatTime(c.created_unix_ms).c_str(),
                c.complete ? "committed" : ("INCOMPLETE: " + c.problem).c_str());
  }
  return kExitOk;
}

}  // namespace sluice::cli
