// sluice completion bash: a bash completion script made from the same
// command specs the commands parse their flags with, so it never drifts.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <string>

#include "output.h"

namespace sluice::cli {
namespace {

// Values of a flag completed as file names: stores (a plain path is a
// store URI), directories, files.
bool TakesPath(const std::string& value_name) {
  for (const char* p : {"URI", "DIR", "PATH", "FILE"}) {
    if (value_name.find(p) != std::string::npos) return true;
  }
  return false;
}

std::string BashScript() {
  std::string commands;
  for (const auto& c : Commands()) commands += std::string(commands.empty() ? "" : " ") + c.name;
  std::string cases;
  for (const auto& c : Commands()) {
    const CommandSpec spec = c.spec();
    std::string flags = "--help", valued = " ", paths = " ", choices;
    for (const auto& f : spec.flags) {
      flags += " --" + f.name;
      if (f.value_name.empty()) continue;
      valued += "--" + f.name + " ";
      if (TakesPath(f.value_name)) paths += "--" + f.name + " ";
      if (f.value_name.find('|') != std::string::npos) {
        // The literal choices only: a placeholder (N, SIZE) is not a word to type.
        std::string words, word;
        for (size_t i = 0; i <= f.value_name.size(); ++i) {
          if (i < f.value_name.size() && f.value_name[i] != '|') {
            word += f.value_name[i];
            continue;
          }
          const bool placeholder = std::none_of(word.begin(), word.end(), [](char ch) { return std::islower(ch); });
          if (!word.empty() && !placeholder) words += (words.empty() ? "" : " ") + word;
          word.clear();
        }
        if (words.empty()) continue;
        choices += "        --" + f.name + ") COMPREPLY=($(compgen -W '" + words + "' -- \"$cur\")); return ;;\n";
      }
    }
    cases += "    " + std::string(c.name) + ")\n      flags='" + flags + "'\n      valued='" + valued +
             "'\n      paths='" + paths + "'\n";
    if (!choices.empty()) cases += "      case \"$prev\" in\n" + choices + "      esac\n";
    cases += "      ;;\n";
  }
  return "# bash completion for sluice, made by `sluice completion bash` from the\n"
         "# flags the commands parse. Load: source <(sluice completion bash)\n"
         "_sluice() {\n"
         "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
         "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
         "    COMPREPLY=($(compgen -W '" + commands + " --help --version' -- \"$cur\"))\n"
         "    return\n"
         "  fi\n"
         "  local flags='' valued=' ' paths=' '\n"
         "  case \"${COMP_WORDS[1]}\" in\n" + cases +
         "    *) return ;;\n"
         "  esac\n"
         "  if [[ \"$valued\" == *\" $prev \"* ]]; then\n"
         "    # The value of a flag: file names where it is a path or store, else nothing to offer.\n"
         "    if [[ \"$paths\" == *\" $prev \"* ]]; then\n"
         "      compopt -o filenames 2>/dev/null\n"
         "      COMPREPLY=($(compgen -f -- \"$cur\"))\n"
         "    else\n"
         "      COMPREPLY=()\n"
         "    fi\n"
         "    return\n"
         "  fi\n"
         "  COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\"))\n"
         "}\n"
         "complete -F _sluice sluice\n";
}

}  // namespace

CommandSpec CompletionSpec() {
  CommandSpec spec;
  spec.name = "completion";
  spec.usage = "completion bash";
  spec.summary =
      "Prints a bash completion script for sluice: its commands, each command's flags,\n"
      "the choices of flags that have a few (e.g. --mode threads|processes), and file\n"
      "names for stores, paths and directories. It is made from the definitions the\n"
      "commands parse their flags with, so it always matches this binary.";
  spec.details =
      "Load it in the current shell:  source <(sluice completion bash)\n"
      "or install it:  sluice completion bash > ~/.local/share/bash-completion/completions/sluice";
  return spec;
}

int CmdCompletion(int argc, char** argv) {
  const CommandSpec spec = CompletionSpec();
  if (argc == 3 && (!std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "-h"))) {
    std::fputs(HelpText(spec).c_str(), stdout);
    return kExitOk;
  }
  if (argc > 3) {
    const std::string extra = argv[3];
    return Fail(Status::InvalidArgument("completion: " +
                                        (extra.rfind("--", 0) == 0 ? "unknown flag " + extra
                                                                   : "unexpected argument '" + extra + "'") +
                                        " (see sluice completion --help)"),
                true);
  }
  if (argc != 3 || std::strcmp(argv[2], "bash") != 0) {
    return Fail(Status::InvalidArgument(std::string("completion: ") +
                                        (argc < 3 ? "name the shell: sluice completion bash"
                                                  : "only bash is supported, not '" + std::string(argv[2]) + "'")),
                true);
  }
  std::fputs(BashScript().c_str(), stdout);
  return kExitOk;
}

}  // namespace sluice::cli
