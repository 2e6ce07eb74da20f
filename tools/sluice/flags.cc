#include "flags.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include <CLI/CLI.hpp>

namespace sluice::cli {

namespace {

// Edit distance (insertions, deletions, substitutions, adjacent swaps).
size_t Distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// "; did you mean --step?" for the spec's flag nearest to `given` (a
// typo: at most a third of its letters off), else "".
std::string NearestFlag(const CommandSpec& spec, const std::string& given) {
  const std::string name = given.substr(2, given.find('=') - 2);
  std::string best;
  size_t best_distance = std::max<size_t>(1, name.size() / 3) + 1;
  for (const auto& fs : spec.flags) {
    const size_t d = Distance(name, fs.name);
    if (d < best_distance || (fs.name.rfind(name, 0) == 0 && !name.empty() && best.empty())) {
      best = fs.name;
      best_distance = std::min(best_distance, d);
    }
  }
  return best.empty() ? "" : "; did you mean --" + best + "?";
}

}  // namespace

Result<Flags> Flags::Parse(const CommandSpec& spec, int argc, char** argv, int first, bool* help) {
  // CLI11 parses; the spec stays the one definition of the flags (help text,
  // bash completion). Every option takes all its occurrences, so that "given
  // twice" is this function's clear error rather than a silent last-wins.
  CLI::App app(spec.summary, "sluice " + spec.name);
  app.set_help_flag();  // help is HelpText(spec), printed by the caller
  CLI::Option* help_opt = app.add_flag("-h,--help");
  std::vector<std::pair<const FlagSpec*, CLI::Option*>> options;
  for (const auto& fs : spec.flags) {
    CLI::Option* o = fs.value_name.empty()
                         ? app.add_flag("--" + fs.name)->disable_flag_override()
                         : app.add_option("--" + fs.name)->type_size(1)->allow_extra_args(false);
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    options.emplace_back(&fs, o);
  }
  app.allow_extras();  // reported below, in this tool's words
  std::vector<std::string> args;
  for (int i = argc - 1; i >= first; --i) args.emplace_back(argv[i]);  // CLI11 takes them reversed
  const std::string see = " (see sluice " + spec.name + " --help)";
  *help = false;
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    *help = help_opt->count() > 0;
    // CLI11 names the option first ("--store: 1 required ..."); say it plainly.
    // ("json was given a disallowed flag override" for --json=1).
    std::string what = e.what();
    std::string name = what.substr(0, what.find(':'));
    std::string first_word = what.substr(0, what.find(' '));
    for (const auto& [fs, o] : options) {
      if (first_word == fs->name && what.find("flag override") != std::string::npos) {
        return Status::InvalidArgument(spec.name + ": --" + fs->name + " takes no value");
      }
      if (name == "--" + fs->name) {
        return Status::InvalidArgument(spec.name + ": --" + fs->name + " needs a value (" + fs->value_name + ")");
      }
    }
    return Status::InvalidArgument(spec.name + ": " + what + see);
  }
  *help = help_opt->count() > 0;
  for (const auto& extra : app.remaining()) {
    if (extra.rfind("--", 0) == 0 && extra.size() > 2) {
      return Status::InvalidArgument(spec.name + ": unknown flag " + extra.substr(0, extra.find('=')) +
                                     NearestFlag(spec, extra) + see);
    }
    return Status::InvalidArgument(spec.name + ": unexpected argument '" + extra + "'" + see);
  }
  Flags f;
  for (const auto& [fs, o] : options) {
    if (o->count() == 0) continue;
    std::vector<std::string> values = fs->value_name.empty() ? std::vector<std::string>(o->count(), "")
                                                             : o->results();
    if (!fs->repeatable && values.size() > 1) {
      return Status::InvalidArgument(spec.name + ": --" + fs->name + " given twice");
    }
    f.values_.emplace(fs->name, values.front());  // the first, for Has/Get
    if (fs->repeatable) f.repeated_[fs->name] = values;
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
                                   "' is not a byte count or a size like 512MiB, 2GiB, 1.5GB, 64K "
                                   "(KiB, MiB, GiB, TiB: powers of 1024; KB, MB, GB, TB: of 1000)");
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string num = text.substr(0, i);
  std::string suffix = text.substr(i);
  if (num.empty() || num.front() == '.' || std::count(num.begin(), num.end(), '.') > 1) return bad();
  long double mult = 1;
  // As they read, in any case: KiB..TiB and a bare K..T are powers of 1024
  // (as fio and dd take K), KB..TB powers of 1000.
  std::string lower = suffix;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::string kLetters = "kmgt";
  bool found = lower.empty() || lower == "b";
  if (!found && kLetters.find(lower[0]) != std::string::npos) {
    const int power = static_cast<int>(kLetters.find(lower[0])) + 1;
    const std::string unit = lower.substr(1);
    if (unit.empty() || unit == "ib") {
      mult = std::pow(1024.0L, power);
      found = true;
    } else if (unit == "b") {
      mult = std::pow(1000.0L, power);
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
      // A description's continuation lines line up under its first.
      std::string help;
      for (size_t at = 0; at <= f.help.size();) {
        size_t nl = f.help.find('\n', at);
        std::string line = f.help.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
        if (at > 0) {
          line.erase(0, line.find_first_not_of(' ') == std::string::npos ? line.size() : line.find_first_not_of(' '));
          help += "\n" + std::string(28, ' ');
        }
        help += line;
        if (nl == std::string::npos) break;
        at = nl + 1;
      }
      out += left + help + "\n";
    }
    out += "  --help                    show this help\n";
  }
  if (!spec.details.empty()) out += "\n" + spec.details + "\n";
  return out;
}

}  // namespace sluice::cli
