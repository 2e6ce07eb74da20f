#include "flags.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace sluice::cli {

Result<Flags> Flags::Parse(const CommandSpec& spec, int argc, char** argv, int first, bool* help) {
  Flags f;
  *help = false;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      *help = true;
      continue;
    }
    if (arg.size() < 3 || arg.substr(0, 2) != "--") {
      return Status::InvalidArgument(spec.name + ": unexpected argument '" + arg + "'");
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const FlagSpec* fs = nullptr;
    for (const auto& s : spec.flags) {
      if (s.name == name) fs = &s;
    }
    if (fs == nullptr) {
      return Status::InvalidArgument(spec.name + ": unknown flag --" + name + " (see sluice " +
                                     spec.name + " --help)");
    }
    if (fs->value_name.empty()) {
      if (value) return Status::InvalidArgument(spec.name + ": --" + name + " takes no value");
      value = "";
    } else if (!value) {
      if (i + 1 >= argc) {
        return Status::InvalidArgument(spec.name + ": --" + name + " needs a value (" +
                                       fs->value_name + ")");
      }
      value = argv[++i];
    }
    if (fs->repeatable) {
      f.repeated_[name].push_back(*value);
      f.values_.emplace(name, *value);  // the first, for Has/Get
      continue;
    }
    if (f.values_.count(name)) {
      return Status::InvalidArgument(spec.name + ": --" + name + " given twice");
    }
    f.values_.emplace(name, *value);
  }
  return f;
}

std::optional<std::string> Flags::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Flags::GetAll(const std::string& name) const {
  auto it = repeated_.find(name);
  if (it != repeated_.end()) return it->second;
  auto v = Get(name);
  if (v) return {*v};
  return {};
}

Result<std::string> Flags::Require(const std::string& name) const {
  auto v = Get(name);
  if (!v) return Status::InvalidArgument("--" + name + " is required");
  return *v;
}

Result<uint64_t> Flags::GetU64(const std::string& name, uint64_t dflt) const {
  auto v = Get(name);
  if (!v) return dflt;
  const std::string& s = *v;
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 19) {
    return Status::InvalidArgument("--" + name + " '" + s + "' is not a non-negative integer");
  }
  return std::strtoull(s.c_str(), nullptr, 10);
}

Result<uint64_t> Flags::GetSize(const std::string& name, uint64_t dflt) const {
  auto v = Get(name);
  if (!v) return dflt;
  auto r = ParseSize(*v);
  if (!r.ok()) return r.status().WithContext("--" + name);
  return r;
}

Result<uint64_t> ParseSize(const std::string& text) {
  auto bad = [&] {
    return Status::InvalidArgument("size '" + text +
                                   "' is not a byte count or a size like 512MiB, 2GiB, 64K");
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string num = text.substr(0, i);
  std::string suffix = text.substr(i);
  if (num.empty() || num.front() == '.' || std::count(num.begin(), num.end(), '.') > 1) return bad();
  long double mult = 1;
  static const std::pair<const char*, int> kSuffixes[] = {
      {"", 0}, {"B", 0}, {"K", 1}, {"KiB", 1}, {"KB", 1}, {"k", 1}, {"M", 2}, {"MiB", 2}, {"MB", 2},
      {"G", 3}, {"GiB", 3}, {"GB", 3}, {"T", 4}, {"TiB", 4}, {"TB", 4}};
  bool found = false;
  for (const auto& [s, p] : kSuffixes) {
    if (suffix == s) {
      mult = std::pow(1024.0L, p);
      found = true;
    }
  }
  if (!found) return bad();
  long double v = std::strtold(num.c_str(), nullptr) * mult;
  if (v >= 18446744073709551615.0L) return Status::InvalidArgument("size '" + text + "' is too large");
  if (num.find('.') != std::string::npos && suffix.empty()) return bad();
  return static_cast<uint64_t>(v);
}

Result<uint64_t> ParseDurationMs(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::string num = text.substr(0, i), unit = text.substr(i);
  if (num.empty() || num.size() > 12) {
    return Status::InvalidArgument("duration '" + text + "' is not like 30s, 10m, 2h, 500ms");
  }
  uint64_t v = std::strtoull(num.c_str(), nullptr, 10);
  uint64_t unit_ms;
  if (unit == "ms") unit_ms = 1;
  else if (unit.empty() || unit == "s") unit_ms = 1000;
  else if (unit == "m") unit_ms = 60'000;
  else if (unit == "h") unit_ms = 3'600'000;
  else if (unit == "d") unit_ms = 86'400'000;
  else return Status::InvalidArgument("duration '" + text + "' is not like 30s, 10m, 2h, 500ms");
  constexpr uint64_t kMaxMs = 3650ull * 86'400'000;  // ten years: "forever" for any purpose here
  if (v > kMaxMs / unit_ms) return Status::InvalidArgument("duration '" + text + "' is longer than 3650d");
  return v * unit_ms;
}

std::string HelpText(const CommandSpec& spec) {
  std::string out = "Usage: sluice " + spec.usage + "\n\n" + spec.summary + "\n";
  if (!spec.flags.empty()) {
    out += "\nFlags:\n";
    for (const auto& f : spec.flags) {
      std::string left = "  --" + f.name + (f.value_name.empty() ? "" : " " + f.value_name);
      if (left.size() < 28) left.resize(28, ' ');
      else left += "\n" + std::string(28, ' ');
      out += left + f.help + "\n";
    }
    out += "  --help                    show this help\n";
  }
  if (!spec.details.empty()) out += "\n" + spec.details + "\n";
  return out;
}

}  // namespace sluice::cli
