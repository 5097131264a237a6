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
  // "job" or "sweep" when the value is a job id or a sweep id (--sweep):
  // completion offers the ids the coordinator knows (see IdsCommandName).
  std::string ids;
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
  // "job" or "sweep" when its positional argument is a job id (JOB) or a
  // sweep id (SWEEP); empty otherwise.
  std::string positional_ids;
};

// The hidden command the scripts run for job and sweep ids: one ListJobs
// call, printed one per line as "job 42" and "sweep sw-3f2a" (each sweep
// once), newest first. The scripts keep its output for
// kCompletionIdsCacheSeconds, so pressing Tab again makes no new call.
inline constexpr char kIdsCommandName[] = "__complete-ids";
inline constexpr int kCompletionIdsCacheSeconds = 10;

// Every command of `app`, depth first, the program itself first: what the
// completion scripts are generated from. Hidden commands (an empty group,
// e.g. kIdsCommandName) are left out, and positional arguments but JOB and
// SWEEP (ids, offered from the coordinator) are too (the command after --:
// completion offers file names there).
std::vector<CompletionCommand> WalkCommands(const CLI::App& app);

// A bash completion script for the program `app` describes (its name is
// app.get_name()), generated from the App itself, so it knows exactly the
// subcommands and options the parser accepts. Completes subcommand names,
// option names, IsMember values (-o table|json), job and sweep ids (from
// `trainctl __complete-ids`, one call per 10 s at most), and file names
// elsewhere (after --, --workdir...). Install: `source <(trainctl completion bash)` in
// ~/.bashrc, or save it as /etc/bash_completion.d/trainctl.
std::string BashCompletion(const CLI::App& app);

// The same for zsh, with each subcommand's and option's description. Works
// both sourced (`source <(trainctl completion zsh)` after compinit) and as
// an autoloaded `_trainctl` file in $fpath.
std::string ZshCompletion(const CLI::App& app);

}  // namespace trainctl::cli

#endif  // TRAINCTL_CLIENT_COMPLETION_H_
