// sluice verify: read every chunk of a checkpoint and report the bad ones.
#include <chrono>
#include <cstdio>

#include "output.h"
#include "store_flags.h"

namespace sluice::cli {

namespace {

// Verifies one store's copy; kExitNotHeld if `several` and it has none.
constexpr int kExitNotHeld = -1;
int VerifyOne(Store& store, const CheckpointArgs& args, const std::string& name,
              std::optional<uint64_t> step, bool several) {
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = ProcessCpuSeconds();
  auto r = ResolveStepOnStore(store, name, step, args.latest_good);
  if (!r.ok() && several && r.status().IsNotFound()) return kExitNotHeld;
  if (!r.ok()) return Fail(r.status());
  const uint64_t resolved = *r;
  auto report = store.Verify(name, resolved);
  if (!report.ok() && several && report.status().IsNotFound()) return kExitNotHeld;
  if (!report.ok()) return Fail(report.status());
  const double secs = SecondsSince(t0);
  if (args.json) {
    JsonValue bad = JsonValue::array();
    for (const auto& b : report->bad) {
      bad.push_back({{"item", b.item}, {"rank", b.rank}, {"chunk", b.chunk_index}, {"object", b.object},
                     {"offset", b.object_offset}, {"length", b.length}, {"reason", b.reason}});
    }
    PrintJson({{"tier", store.backend().uri()}, {"name", name}, {"step", resolved}, {"ok", report->ok()},
               {"items", report->items}, {"chunks", report->chunks}, {"bytes", report->bytes}, {"seconds", secs},
               {"cpu_seconds", ProcessCpuSeconds() - cpu0}, {"bad_chunks", bad}});
  } else {
    for (const auto& b : report->bad) {
      std::printf("BAD item '%s' rank %u chunk %llu: object %s offset %llu length %llu: %s\n",
                  b.item.c_str(), b.rank, static_cast<unsigned long long>(b.chunk_index),
                  b.object.c_str(), static_cast<unsigned long long>(b.object_offset),
                  static_cast<unsigned long long>(b.length), b.reason.c_str());
    }
    std::printf("%s %s@%llu: %llu items, %llu chunks, %s checked in %.2f s, %zu bad chunk(s)\n",
                report->ok() ? "OK" : "FAILED", name.c_str(), static_cast<unsigned long long>(resolved),
                static_cast<unsigned long long>(report->items), static_cast<unsigned long long>(report->chunks),
                HumanBytes(report->bytes).c_str(), secs, report->bad.size());
  }
  if (!report->ok()) {
    std::fprintf(stderr, "sluice: %s@%llu has %zu bad chunk(s)\n", name.c_str(),
                 static_cast<unsigned long long>(resolved), report->bad.size());
    return kExitError;
  }
  return kExitOk;
}

}  // namespace

CommandSpec VerifySpec() {
  CommandSpec spec;
  spec.name = "verify";
  spec.usage = "verify (--store URI | --tier URI...) --name NAME [--step N|latest|latest-good] [--json]";
  spec.summary =
      "Reads every chunk of a committed checkpoint and checks its crc32c. Exits 1 and\n"
      "names item, rank, chunk, data object and offset of every bad chunk. The latest\n"
      "step is the newest committed one: if it is damaged (a commit record or manifest\n"
      "that does not verify, a missing data object), verify fails naming it;\n"
      "--step latest-good checks the newest intact step instead, and says so.";
  spec.flags = StoreFlagSpecs(false);
  spec.flags.insert(spec.flags.end(), {
      {"name", "NAME", "checkpoint name"},
      {"step", "N|latest|latest-good", "step to verify (default latest)"},
      {"json", "", "print the report as one JSON object"},
  });
  return spec;
}

int CmdVerify(int argc, char** argv) {
  const CommandSpec spec = VerifySpec();
  Flags flags;
  int rc;
  if (!ParseOrExit(spec, argc, argv, &flags, &rc)) return rc;
  auto args = CheckpointArgsFromFlags(flags);
  if (!args.ok()) return Fail(args.status(), true);
  const std::vector<std::string> uris = args->uris();
  const std::string& name = args->name;
  const std::optional<uint64_t>& step = args->step;
  // Every tier's copy is checked on its own: a good copy on one tier does
  // not make a bad one on another acceptable.
  const bool several = uris.size() > 1;
  bool any = false, all_ok = true;
  for (size_t k = 0; k < uris.size(); ++k) {
    auto store = Store::Open(uris[k], args->pipeline.store);
    if (!store.ok()) {
      if (!several) return FailStoreOpen(store.status());
      std::fprintf(stderr, "sluice: tier %zu: %s\n", k, store.status().message().c_str());
      all_ok = false;
      continue;
    }
    if (several && !args->json) std::printf("tier %zu %s:\n", k, uris[k].c_str());
    int r = VerifyOne(**store, *args, name, step, several);
    if (r == kExitNotHeld) continue;
    any = true;
    if (r != kExitOk) {
      if (!several) return r;
      all_ok = false;
    }
  }
  if (several && !any) {
    return Fail(Status::NotFound("no tier holds a committed copy of " + name + "@" +
                                 (step.has_value() ? std::to_string(*step) : std::string("latest"))));
  }
  if (!all_ok) return kExitError;
  return kExitOk;
}

}  // namespace sluice::cli
