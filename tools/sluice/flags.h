// Command-line parsing for the sluice tool (on CLI11): --flag VALUE / --flag=VALUE,
// boolean --flag, sizes with binary suffixes. A usage error is a Status with
// code InvalidArgument; main() turns it into exit code 2.
#ifndef SLUICE_TOOLS_SLUICE_FLAGS_H_
#define SLUICE_TOOLS_SLUICE_FLAGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::cli {

struct FlagSpec {
  std::string name;        // without dashes
  std::string value_name;  // empty: boolean flag
  std::string help;
  bool repeatable = false;  // may be given several times; see Flags::GetAll
};

struct CommandSpec {
  std::string name;
  std::string usage;     // one line after "sluice "
  std::string summary;   // what it does
  std::vector<FlagSpec> flags;
  std::string details;   // extra paragraphs for --help
};

class Flags {
 public:
  // Parses argv[first..]. Sets *help if --help/-h is present.
  static Result<Flags> Parse(const CommandSpec& spec, int argc, char** argv, int first, bool* help);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> Get(const std::string& name) const;
  // Required string flag; InvalidArgument "--name is required" if absent.
  Result<std::string> Require(const std::string& name) const;
  Result<uint64_t> GetU64(const std::string& name, uint64_t dflt) const;
  Result<uint64_t> GetSize(const std::string& name, uint64_t dflt) const;
  // Every value of a repeatable flag, in command-line order.
  std::vector<std::string> GetAll(const std::string& name) const;

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> repeated_;
};

std::string HelpText(const CommandSpec& spec);

// "4096", "512MiB", "2GiB", "64K", "1.5G" (K/M/G/T mean KiB/MiB/GiB/TiB).
Result<uint64_t> ParseSize(const std::string& text);
// "30s", "10m", "2h", "500ms", plain number = seconds; returns milliseconds.
Result<uint64_t> ParseDurationMs(const std::string& text);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_SLUICE_FLAGS_H_
