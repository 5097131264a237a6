// Cli (client/cli.h): the `trainctl` command line as a whole. Defines the
// global flags and, through each command's Add*Command (cli_internal.h), the
// commands in the order --help lists them; handles `completion` and `help`;
// checks usage before any RPC; then opens a Session and runs the command.

#include "client/cli.h"

#include <stdlib.h>  // getenv
#include <unistd.h>  // environ

#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/cli_internal.h"
#include "client/completion.h"
#include "client/sweep.h"
#include "common/clock.h"

namespace trainctl::cli {

using internal::AddCancelCommand;
using internal::AddListDescribeCommands;
using internal::AddLogsCommand;
using internal::AddMetricsCommand;
using internal::AddNodeCommands;
using internal::AddNodesCommand;
using internal::NodeCommands;
using internal::AddReportCommand;
using internal::AddSubmitCommand;
using internal::AddSweepCommands;
using internal::AddTokenCommands;
using internal::AddTopCommand;
using internal::AddWaitCommand;
using internal::ClosestName;
using internal::JsonToYaml;
using internal::AddWhyCommand;
using internal::BuildSpec;
using internal::Example;
using internal::Flags;
using internal::ListDescribeCommands;
using internal::ParseTimeout;
using internal::PrepareSweep;
using internal::ResolveConnection;
using internal::Session;
using internal::SweepCommands;
using internal::TokenCommands;
using internal::UsageError;

Cli::Cli(StubFactory make_stub, std::ostream& out, std::ostream& err,
         CliOptions options)
    : Cli(ConnectionStubFactory(
              [make_stub = std::move(make_stub)](const Connection& c) {
                return make_stub(c.address);
              }),
          out, err, std::move(options)) {}

Cli::Cli(ConnectionStubFactory make_stub, std::ostream& out, std::ostream& err,
         CliOptions options)
    : make_stub_(std::move(make_stub)),
      out_(out),
      err_(err),
      options_(options) {}

Cli::Cli(v1::Coordinator::StubInterface* stub, std::ostream& out,
         std::ostream& err, CliOptions options)
    : Cli([stub](const std::string&) { return stub; }, out, err, options) {}

int Cli::Run(int argc, char** argv) {
  Flags f;
  CLI::App app("trainctl: submit and watch jobs on a trainctl GPU cluster.",
               "trainctl");
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", "trainctl " TRAINCTL_VERSION);
  app.add_option("--coordinator", f.coordinator,
                 "Coordinator address, host:port")
      ->envname("TRAINCTL_COORDINATOR")
      ->default_str(kDefaultCoordinator);
  app.add_option("--token", f.token,
                 "Bearer token for a coordinator run with --tokens-file "
                 "(default: $TRAINCTL_AUTH_TOKEN, else `token` in the config "
                 "file)")
      ->envname("TRAINCTL_AUTH_TOKEN");
  app.add_option("--tls-ca", f.tls_ca,
                 "PEM CA certificate to verify a TLS coordinator with (default: "
                 "$TRAINCTL_TLS_CA, else `ca_cert` in the config file; none: "
                 "plaintext)")
      ->envname("TRAINCTL_TLS_CA");
  app.add_option("--config", f.config,
                 "Config file with `coordinator`, `token` and `ca_cert` keys "
                 "(default: $XDG_CONFIG_HOME/trainctl/config or "
                 "~/.config/trainctl/config)");
  app.footer(
      Example("  trainctl --coordinator head-node:50051 list\n"
              "  trainctl submit --gpus 1 -- python train.py"));

  // The commands, in the order --help lists them.
  CLI::App* submit = AddSubmitCommand(app, f);
  const SweepCommands sweep = AddSweepCommands(app, f);
  CLI::App* report = AddReportCommand(app, f);
  CLI::App* metrics_cmd = AddMetricsCommand(app, f);
  const ListDescribeCommands list_describe = AddListDescribeCommands(app, f);
  CLI::App* list = list_describe.list;
  CLI::App* describe = list_describe.describe;
  CLI::App* logs = AddLogsCommand(app, f);
  CLI::App* cancel = AddCancelCommand(app, f);
  CLI::App* wait = AddWaitCommand(app, f);
  CLI::App* why = AddWhyCommand(app, f);
  CLI::App* nodes_cmd = AddNodesCommand(app, f);
  const NodeCommands node_cmds = AddNodeCommands(app, f);
  CLI::App* top = AddTopCommand(app, f);
  const TokenCommands tokens = AddTokenCommands(app, f);
  const internal::AccountingCommands accounting = internal::AddAccountingCommands(app, f);
  const internal::SessionCommands sessions = internal::AddSessionCommands(app, f);

  // completion, help
  std::string shell;
  CLI::App* completion = app.add_subcommand(
      "completion", "Print a shell completion script (bash or zsh)");
  completion->add_option("SHELL", shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  completion->footer(
      Example("  source <(trainctl completion bash)     # in ~/.bashrc\n"
              "  source <(trainctl completion zsh)      # in ~/.zshrc, after "
              "compinit\n"
              "  trainctl completion bash > /etc/bash_completion.d/trainctl"));
  // Hidden (no group): what the completion scripts run for ids.
  CLI::App* complete_ids = app.add_subcommand(
      kIdsCommandName, "Print job and sweep ids for shell completion");
  complete_ids->group("");
  std::vector<std::string> help_topic;
  CLI::App* help = app.add_subcommand(
      "help", "Show the help of a command, with examples");
  help->add_option("COMMAND", help_topic,
                   "The command, e.g. submit or sweep describe");
  help->footer(Example("  trainctl help submit\n  trainctl help sweep describe"));

  if (options_.inspect_app) options_.inspect_app(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      return app.exit(e, out_, err_);  // --help
    }
    std::string command = "trainctl";
    const CLI::App* innermost = &app;
    for (const CLI::App* sub = &app; sub != nullptr;) {
      const std::vector<const CLI::App*> parsed = sub->get_subcommands(
          [](const CLI::App* s) { return s->parsed(); });
      if (parsed.empty()) break;
      innermost = sub = parsed.front();
      absl::StrAppend(&command, " ", sub->get_name());
    }
    std::vector<std::string> command_names;
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (!sub->get_group().empty()) command_names.push_back(sub->get_name());
    }
    if (innermost == &app) {
      // No command recognised: the first word that is not a global flag or
      // its value names the mistyped one.
      std::string word;
      for (int i = 1; i < argc; ++i) {
        const absl::string_view arg = argv[i];
        if (absl::StartsWith(arg, "-")) {
          if (arg.find('=') == absl::string_view::npos && i + 1 < argc &&
              (arg == "--coordinator" || arg == "--token" || arg == "--tls-ca" ||
               arg == "--config")) {
            ++i;
          }
          continue;
        }
        word = std::string(arg);
        break;
      }
      if (!word.empty()) {
        const std::string near = ClosestName(word, command_names);
        err_ << "trainctl: error: unknown command \"" << word << "\""
             << (near.empty() ? absl::StrCat("; the commands are ",
                                             absl::StrJoin(command_names, ", "))
                              : absl::StrCat("; did you mean ", near, "?"))
             << " (see trainctl --help)\n";
        return kExitUsage;
      }
    }
    std::string hint;
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      // "The following argument(s) was/were not expected: X Y" (CLI11 lists
      // them in no useful order): the first flag among them.
      const std::string what = e.what();
      const size_t colon = what.rfind(": ");
      std::string first;
      if (colon != std::string::npos) {
        for (absl::string_view word :
             absl::StrSplit(absl::string_view(what).substr(colon + 2), ' ', absl::SkipEmpty())) {
          if (absl::StartsWith(word, "-")) {
            first = std::string(word);
            break;
          }
        }
      }
      if (!first.empty()) {
        std::vector<std::string> flags;
        for (const CLI::Option* o : innermost->get_options()) {
          for (const std::string& n : o->get_lnames()) flags.push_back("--" + n);
        }
        const std::string flag = first.substr(0, first.find('='));
        const std::string near = ClosestName(flag, flags);
        if (!near.empty()) {
          hint = absl::StrCat("; ", flag, " is not a flag of ", command, " (did you mean ",
                              near, "?)");
        } else if (submit->parsed()) {
          // `submit python train.py --lr 3`: the program's own flag.
          hint = absl::StrCat("; ", flag, " is not a flag of ", command,
                              ": put the command to run after --");
        } else {
          hint = absl::StrCat("; ", flag, " is not a flag of ", command);
        }
      } else if (submit->parsed()) {
        hint = "; put the command to run after --";
      }
    }
    err_ << "trainctl: error: " << e.what() << hint << " (see " << command
         << " --help)\n";
    return kExitUsage;
  }

  if (completion->parsed()) {
    out_ << (shell == "zsh" ? ZshCompletion(app) : BashCompletion(app));
    return kExitOk;
  }
  if (help->parsed()) {
    const CLI::App* topic = &app;
    // CLI11 prints "Usage: PARENTS NAME": the path above the topic.
    std::string parents;
    for (const std::string& word : help_topic) {
      const CLI::App* next = nullptr;
      for (const CLI::App* sub : topic->get_subcommands(
               [&word](const CLI::App* s) { return s->get_name() == word; })) {
        next = sub;
      }
      if (next == nullptr) {
        std::string name = topic == &app ? "trainctl" : topic->get_name();
        return UsageError(
            err_, absl::StrFormat("help: %s has no command %s (see `trainctl "
                                  "--help`)",
                                  name, word));
      }
      parents = parents.empty() ? topic->get_name()
                                : absl::StrCat(parents, " ", topic->get_name());
      topic = next;
    }
    // `trainctl help` alone: the command list. (App::help() would show the
    // parsed `help` subcommand's own help instead.)
    out_ << (topic == &app ? app.get_formatter()->make_help(&app, "trainctl",
                                                             CLI::AppFormatMode::Normal)
                           : topic->help(parents));
    return kExitOk;
  }

  std::optional<absl::Duration> timeout;
  if (wait->parsed() && !f.timeout.empty()) {
    timeout = ParseTimeout(f.timeout);
    if (!timeout) {
      err_ << "trainctl: error: --timeout " << f.timeout
           << ": expected a duration such as 90s, 30m or 2h\n";
      return kExitUsage;
    }
  }
  // $USER is only a default for a coordinator without authentication: with a
  // token the coordinator takes the user from it, and sending a login name
  // that differs from the token's user would be refused.
  const bool user_given = !f.user.empty();
  if (f.user.empty()) f.user = options_.default_user;
  f.environ = options_.environ != nullptr ? options_.environ : ::environ;
  std::optional<ArraySpec> array;
  if (submit->parsed()) {
    if (std::string error = BuildSpec(&f, "submit",
                                      "trainctl submit --gpus 1 -- python train.py");
        !error.empty()) {
      err_ << "trainctl: error: " << error << "\n";
      return kExitUsage;
    }
    if (!f.array.empty()) {
      absl::StatusOr<ArraySpec> parsed = ParseArraySpec(f.array);
      if (!parsed.ok()) {
        err_ << "trainctl: error: --array " << f.array << ": "
             << parsed.status().message() << "\n";
        return kExitUsage;
      }
      if (f.wait) {
        err_ << "trainctl: error: --wait: not with --array; follow the array "
                "with `trainctl list --array ID`\n";
        return kExitUsage;
      }
      array = *std::move(parsed);
    }
  }
  if (sessions.shell->parsed()) {
    if (std::string error = internal::PrepareShell(&f); !error.empty()) {
      err_ << "trainctl: error: " << error << "\n";
      return kExitUsage;
    }
  }
  // A sweep to submit: expanded (and every usage error found) before any RPC.
  const bool sweep_run = sweep.sweep->parsed() && !sweep.list->parsed() &&
                         !sweep.describe->parsed() && !sweep.cancel->parsed() &&
                         !sweep.compare->parsed();
  std::vector<Trial> trials;
  if (sweep_run) {
    if (const int status = PrepareSweep(&f, err_, &trials); status != kExitOk) {
      return status;
    }
  }

  RealClock real_clock;
  const Clock& clock = options_.clock != nullptr ? *options_.clock : real_clock;
  if (std::string error = internal::PrepareTokenCommand(&f, tokens, clock.Now());
      !error.empty()) {
    return UsageError(err_, error);
  }

  if (std::string error = internal::PrepareAccountingCommand(&f, accounting, clock.Now());
      !error.empty()) {
    return UsageError(err_, error);
  }

  absl::StatusOr<Connection> connection = ResolveConnection(f, options_, err_);
  if (!connection.ok()) return UsageError(err_, connection.status().message());
  if (!user_given && !connection->token.empty()) f.submit.mutable_spec()->clear_user();
  const std::string address = connection->address;
  // -o yaml: the command prints its JSON here, which is then converted.
  const bool yaml = f.output == "yaml";
  std::ostringstream yaml_json;
  Session session(make_stub_(*connection), address, yaml ? yaml_json : out_, err_, clock,
                  options_.terminal_width);
  if (options_.progress) session.EnableProgress();
  if (options_.stdout_terminal) session.EnableTerminal();
  const bool json = f.output == "json" || yaml;
  auto dispatch = [&]() -> int {
  if (complete_ids->parsed()) return session.CompletionIds();
  if (submit->parsed() && array.has_value()) return session.SubmitArray(f.submit, *array);
  if (submit->parsed()) return session.Submit(f.submit, f.wait);
  if (sweep.list->parsed()) return session.SweepList(json);
  if (sweep.describe->parsed()) {
    const int status = session.SweepDescribe(f.sweep_id, json);
    if (status != kExitOk || f.metric.empty() || json) return status;
    out_ << absl::StrFormat("\nBest trials by %s (%s, %s value):\n", f.metric,
                            f.mode, f.scope);
    return session.SweepCompare(f.sweep_id, f.metric, f.mode, f.scope, false,
                                /*max_rows=*/3);
  }
  if (sweep.compare->parsed()) {
    return session.SweepCompare(f.sweep_id, f.metric, f.mode, f.scope, json);
  }
  if (report->parsed()) {
    return session.Report(f.report_pairs, f.step,
                          options_.getenv ? options_.getenv
                                          : [](const char* name) -> const char* {
                                              return ::getenv(name);
                                            });
  }
  if (metrics_cmd->parsed()) return session.Metrics(f.job_id, f.metric_key, json);
  if (sweep.cancel->parsed()) return session.SweepCancel(f.sweep_id);
  if (sweep_run) {
    const std::string& name = f.submit.spec().name();
    return session.Sweep(f.submit.spec(), trials, f.sweep_id,
                         name.empty() ? f.sweep_id : name);
  }
  if (list->parsed()) {
    return session.List(f.states, json,
                        {f.list_user, f.list_name, f.list_limit, f.output == "wide",
                         f.list_all_users, f.list_array});
  }
  if (describe->parsed()) return session.DescribeJobs(f.job_ids, json);
  if (logs->parsed()) {
    if (f.all_ranks && f.follow) return session.LogsFollowAllRanks(f.job_id);
    if (f.tail_lines > 0 || f.all_ranks) {
      return session.LogsSnapshot(f.job_id, f.rank, f.all_ranks, f.tail_lines);
    }
    return session.Logs(f.job_id, f.rank, f.follow);
  }
  if (cancel->parsed()) {
    return session.CancelJobs(f.job_ids, f.cancel_sweep, f.cancel_name, f.cancel_states,
                              f.cancel_array);
  }
  if (wait->parsed()) return session.WaitJobs(f.job_ids, timeout);
  if (nodes_cmd->parsed()) return session.Nodes(json);
  if (node_cmds.describe->parsed()) return session.DescribeNodes(f.node_names, json);
  if (node_cmds.drain->parsed() || node_cmds.resume->parsed() || node_cmds.down->parsed()) {
    std::optional<absl::Duration> deadline;
    if (!f.node_deadline.empty()) {
      deadline = ParseTimeout(f.node_deadline);
      if (!deadline.has_value() || *deadline <= absl::ZeroDuration()) {
        err_ << "trainctl: --deadline: '" << f.node_deadline
             << "' is not a duration (e.g. 30m, 2h, 1h30m)\n";
        return kExitUsage;
      }
    }
    const v1::NodeAction action = node_cmds.drain->parsed()    ? v1::NODE_ACTION_DRAIN
                                  : node_cmds.resume->parsed() ? v1::NODE_ACTION_RESUME
                                                               : v1::NODE_ACTION_DOWN;
    return session.UpdateNodes(action, f.node_names, f.node_reason, deadline, f.node_verify,
                               json);
  }
  if (why->parsed()) return session.Why(f.job_id, json);
  if (top->parsed()) {
    return session.Top(absl::Seconds(f.interval_s), f.once, json, f.frames);
  }
  if (tokens.create->parsed()) return session.TokenCreate(f.tok_request, json);
  if (tokens.list->parsed()) return session.TokenList(f.tok_all, json);
  if (tokens.revoke->parsed()) return session.TokenRevoke(f.tok_id, json);
  if (tokens.audit->parsed()) return session.Audit(f.audit_since_ms, f.audit_limit, json);
  if (accounting.usage->parsed()) {
    v1::GetUsageRequest request;
    request.set_by(f.acct_by);
    request.set_since_ms(f.acct_since_ms);
    request.set_until_ms(f.acct_until_ms);
    return session.Usage(request, f.output);
  }
  if (accounting.history->parsed()) {
    v1::ListHistoryRequest request;
    request.set_since_ms(f.acct_since_ms);
    request.set_until_ms(f.acct_until_ms);
    request.set_user(f.acct_user);
    request.set_state(f.acct_state);
    return session.History(request, f.acct_fields, f.output);
  }
  if (sessions.exec->parsed() || sessions.shell->parsed() || sessions.attach->parsed() ||
      sessions.port_forward->parsed()) {
    return internal::RunSessionCommand(sessions, f, session, err_);
  }
  return kExitUsage;  // unreachable: require_subcommand(1)
  };
  const int status = dispatch();
  if (yaml && !yaml_json.str().empty()) out_ << JsonToYaml(yaml_json.str());
  return status;
}

}  // namespace trainctl::cli
