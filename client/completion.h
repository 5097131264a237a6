#ifndef TRAINCTL_CLIENT_COMPLETION_H_
#define TRAINCTL_CLIENT_COMPLETION_H_

#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace trainctl::cli {

// One option of a command as completion offers it.
struct CompletionOption {
  // "--output", "-o": every name, dashes included.
  std::vector<std::string> names;
  std::string description;
  // True when the option takes a value (--gpus 2), false for a flag (--wait).
  bool takes_value = false;
  // The values it accepts when they are a fixed set (CLI::IsMember), else
  // empty: completion then offers file names.
  std::vector<std::string> choices;
};

// One command (the program itself or a subcommand at any depth).
struct CompletionCommand {
  // Subcommand names from the program down: {} for `trainctl` itself,
  // {"sweep", "describe"} for `trainctl sweep describe`.
  std::vector<std::string> path;
  std::string description;
  // Its direct subcommands: name and description.
  std::vector<std::pair<std::string, std::string>> subcommands;
  // Its own options, then those of the program itself when it accepts them
  // (CLI11 fallthrough), e.g. --coordinator after any subcommand.
  std::vector<CompletionOption> options;
};

// Every command of `app`, depth first, the program itself first: what the
// completion scripts are generated from. Positional arguments are left out
// (job ids, the command after --: completion offers file names there).
std::vector<CompletionCommand> WalkCommands(const CLI::App& app);

// A bash completion script for the program `app` describes (its name is
// app.get_name()), generated from the App itself, so it knows exactly the
// subcommands and options the parser accepts. Completes subcommand names,
// option names, IsMember values (-o table|json), and file names elsewhere
// (after --, --workdir...). Install: `source <(trainctl completion bash)` in
// ~/.bashrc, or save it as /etc/bash_completion.d/trainctl.
std::string BashCompletion(const CLI::App& app);

// The same for zsh, with each subcommand's and option's description. Works
// both sourced (`source <(trainctl completion zsh)` after compinit) and as
// an autoloaded `_trainctl` file in $fpath.
std::string ZshCompletion(const CLI::App& app);

}  // namespace trainctl::cli

#endif  // TRAINCTL_CLIENT_COMPLETION_H_
