// Output helpers for the sluice tool: JSON output, human-readable
// sizes, a progress line on stderr (only when stderr is a terminal), and the
// command table.
#ifndef SLUICE_TOOLS_SLUICE_OUTPUT_H_
#define SLUICE_TOOLS_SLUICE_OUTPUT_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "flags.h"
#include "sluice/backend.h"
#include "sluice/status.h"

namespace sluice::cli {

// Exit codes: 0 success, 1 operational error, 2 usage error.
constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// Prints "sluice: <message>" on stderr and returns the exit code for it:
// kExitUsage for InvalidArgument raised while parsing flags (usage=true),
// kExitError otherwise.
int Fail(const Status& st, bool usage = false);
// For a store that failed to open: a malformed URI (InvalidArgument) is a
// usage error, anything else (missing, unreadable) an operational one.
int FailStoreOpen(const Status& st);

// JSON output (nlohmann-json, keys in insertion order). Strings that are not
// valid UTF-8 (a file name's bytes) print with U+FFFD in place of each bad
// byte, so the output is always valid JSON.
using JsonValue = nlohmann::ordered_json;
std::string JsonText(const JsonValue& j);  // one line
void PrintJson(const JsonValue& j);        // JsonText + newline on stdout

// The median (the mean of the middle two for an even count); 0 if empty.
double Median(std::vector<double> v);
// mkdir -p: OK if `dir` is (now) a directory, IOError if a part of it is not.
Status MakeDirs(const std::string& dir);

// A store's hedged writes (sluice/backend.h: HedgeStats), as --json prints them.
JsonValue HedgeJson(const HedgeStats& s);

std::string HumanBytes(uint64_t bytes);      // "1.50 GiB"
std::string HumanRate(double bytes_per_sec); // "1.50 GiB/s"

// Progress "save  1.2 GiB / 8.0 GiB  1.9 GiB/s  ETA 3s" on stderr, redrawn at
// most 4 times a second, only if stderr is a terminal.
class Progress {
 public:
  Progress(std::string label, uint64_t total_bytes);
  ~Progress();
  void Add(uint64_t bytes);
  void Done();

 private:
  std::string label_;
  uint64_t total_;
  uint64_t done_ = 0;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

double SecondsSince(std::chrono::steady_clock::time_point t);

// "2026-12-03T22:25:05Z" (UTC); "-" for 0 or less.
std::string FormatTime(int64_t unix_ms);
// Now, in Unix milliseconds.
int64_t NowUnixMs();

// CPU seconds (user+sys) this process and its reaped children used so far.
double ProcessCpuSeconds();

// A subcommand: its flags (the one definition behind parsing, --help and
// shell completion) and what runs it.
struct Command {
  const char* name;
  const char* summary;  // its line in `sluice --help`
  int (*run)(int argc, char** argv);
  CommandSpec (*spec)();
};
// Every subcommand, in `sluice --help` order (main.cc).
const std::vector<Command>& Commands();

int CmdSave(int argc, char** argv);
CommandSpec SaveSpec();
int CmdRestore(int argc, char** argv);
CommandSpec RestoreSpec();
int CmdLs(int argc, char** argv);
CommandSpec LsSpec();
int CmdStatus(int argc, char** argv);
CommandSpec StatusSpec();
int CmdVerify(int argc, char** argv);
CommandSpec VerifySpec();
int CmdScrub(int argc, char** argv);
CommandSpec ScrubSpec();
int CmdRebuild(int argc, char** argv);
CommandSpec RebuildSpec();
int CmdRm(int argc, char** argv);
CommandSpec RmSpec();
int CmdPlan(int argc, char** argv);
CommandSpec PlanSpec();
int CmdGc(int argc, char** argv);
CommandSpec GcSpec();
int CmdDrain(int argc, char** argv);
CommandSpec DrainSpec();
int CmdBench(int argc, char** argv);
CommandSpec BenchSpec();
int CmdExport(int argc, char** argv);
CommandSpec ExportSpec();
int CmdImport(int argc, char** argv);
CommandSpec ImportSpec();
// `sluice completion bash`: a bash completion script made from Commands().
int CmdCompletion(int argc, char** argv);
CommandSpec CompletionSpec();
class Flags;
// bench --async (cmd_bench_async.cc).
int RunAsyncBench(const Flags& flags, uint64_t size, uint64_t checkpoints, uint64_t items);

// Parses flags for a command; prints help and returns kExitOk through
// *exit_code when --help is given, or prints the usage error.
bool ParseOrExit(const CommandSpec& spec, int argc, char** argv, Flags* flags, int* exit_code);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_OUTPUT_H_
