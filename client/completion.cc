#include "client/completion.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace trainctl::cli {
namespace {

// The values of a CLI::IsMember check: CLI11 appends each validator's
// description to the option's type name, and IsMember's is the set as
// "{a,b,c}" (CLI11 2.1 Validators.hpp generate_set), e.g. "TEXT:{table,json}".
std::vector<std::string> Choices(const CLI::Option& opt) {
  const std::string type = opt.get_type_name();
  const size_t open = type.find(":{");
  if (open == std::string::npos) return {};
  const size_t close = type.find('}', open);
  if (close == std::string::npos) return {};
  return absl::StrSplit(type.substr(open + 2, close - open - 2), ',',
                        absl::SkipEmpty());
}

std::string OneLine(const std::string& text) {
  return absl::StrReplaceAll(text, {{"\n", " "}, {"\t", " "}});
}

CompletionOption ToCompletionOption(const CLI::Option& opt) {
  CompletionOption c;
  for (const std::string& s : opt.get_snames()) c.names.push_back("-" + s);
  for (const std::string& l : opt.get_lnames()) c.names.push_back("--" + l);
  c.description = OneLine(opt.get_description());
  // Flags expect no value (CLI11's add_flag sets expected(0)).
  c.takes_value = opt.get_expected_max() > 0;
  c.choices = Choices(opt);
  if (c.takes_value && opt.get_lnames() == std::vector<std::string>{"sweep"}) {
    c.ids = "sweep";
  }
  return c;
}

// "job" for a JOB positional, "sweep" for SWEEP, else empty.
std::string PositionalIds(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    if (!opt->get_lnames().empty() || !opt->get_snames().empty()) continue;
    if (opt->get_name() == "JOB") return "job";
    if (opt->get_name() == "SWEEP") return "sweep";
  }
  return "";
}

void Walk(const CLI::App& app, const CLI::App& root,
          std::vector<std::string> path, std::vector<CompletionCommand>* out) {
  CompletionCommand command;
  command.path = path;
  command.description = OneLine(app.get_description());
  command.positional_ids = PositionalIds(app);
  // Not option groups (no name), not hidden commands (no group).
  std::vector<const CLI::App*> subs = app.get_subcommands([](const CLI::App* sub) {
    return !sub->get_name().empty() && !sub->get_group().empty();
  });
  for (const CLI::App* sub : subs) {
    command.subcommands.emplace_back(sub->get_name(),
                                     OneLine(sub->get_description()));
  }
  std::vector<std::string> seen;
  auto add = [&](const CLI::Option* opt) {
    if (opt->get_lnames().empty() && opt->get_snames().empty()) return;
    CompletionOption c = ToCompletionOption(*opt);
    for (const std::string& name : c.names) {
      if (std::find(seen.begin(), seen.end(), name) != seen.end()) return;
    }
    seen.insert(seen.end(), c.names.begin(), c.names.end());
    command.options.push_back(std::move(c));
  };
  for (const CLI::Option* opt : app.get_options()) add(opt);
  if (&app != &root && app.get_fallthrough()) {
    for (const CLI::Option* opt : root.get_options()) add(opt);
  }
  out->push_back(std::move(command));
  for (const CLI::App* sub : subs) {
    std::vector<std::string> sub_path = path;
    sub_path.push_back(sub->get_name());
    Walk(*sub, root, std::move(sub_path), out);
  }
}

// 'text' for a POSIX shell (bash and zsh alike).
std::string Quote(const std::string& text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "'\\''"}}), "'");
}

// A shell function name from the program name: _trainctl.
std::string FunctionName(const CLI::App& app) {
  std::string name = "_";
  for (char c : app.get_name()) name += absl::ascii_isalnum(c) ? c : '_';
  return name;
}

// The helper functions both scripts share (valid bash and zsh). Each takes
// the command path ("" or "sweep describe") and prints words:
//   F_subcommands PATH       subcommand names
//   F_options PATH           option names
//   F_value_options PATH     names of the options that take a value
//   F_choices PATH OPTION    the fixed values of OPTION, if any
//   F_id_kind PATH [OPTION]  job or sweep when OPTION's value (without
//                            OPTION: the positional argument) is such an id
// and one that keeps state, so it must not run in a $(...) subshell:
//   F_ids KIND               sets F_reply to the ids of KIND (job, sweep)
//                            from `PROGRAM __complete-ids`, run at most
//                            once per kCompletionIdsCacheSeconds
std::string Helpers(const CLI::App& app, const std::string& f,
                    const std::vector<CompletionCommand>& commands) {
  std::string subs, opts, value_opts, choices, id_kinds;
  for (const CompletionCommand& c : commands) {
    const std::string key = Quote(absl::StrJoin(c.path, " "));
    std::vector<std::string> sub_names, opt_names, value_names;
    if (!c.positional_ids.empty()) {
      absl::StrAppend(&id_kinds, "    ", Quote(absl::StrCat(absl::StrJoin(c.path, " "), "|")),
                      ") echo ", c.positional_ids, " ;;\n");
    }
    for (const auto& [name, description] : c.subcommands) {
      sub_names.push_back(name);
    }
    for (const CompletionOption& o : c.options) {
      opt_names.insert(opt_names.end(), o.names.begin(), o.names.end());
      if (o.takes_value) {
        value_names.insert(value_names.end(), o.names.begin(), o.names.end());
      }
      if (!o.ids.empty()) {
        std::vector<std::string> keys;
        for (const std::string& name : o.names) {
          keys.push_back(Quote(absl::StrCat(absl::StrJoin(c.path, " "), "|", name)));
        }
        absl::StrAppend(&id_kinds, "    ", absl::StrJoin(keys, "|"), ") echo ", o.ids,
                        " ;;\n");
      }
      if (!o.choices.empty()) {
        std::vector<std::string> keys;
        for (const std::string& name : o.names) {
          keys.push_back(Quote(absl::StrCat(absl::StrJoin(c.path, " "), "|", name)));
        }
        absl::StrAppend(&choices, "    ", absl::StrJoin(keys, "|"), ") echo ",
                        Quote(absl::StrJoin(o.choices, " ")), " ;;\n");
      }
    }
    absl::StrAppend(&subs, "    ", key, ") echo ",
                    Quote(absl::StrJoin(sub_names, " ")), " ;;\n");
    absl::StrAppend(&opts, "    ", key, ") echo ",
                    Quote(absl::StrJoin(opt_names, " ")), " ;;\n");
    absl::StrAppend(&value_opts, "    ", key, ") echo ",
                    Quote(absl::StrJoin(value_names, " ")), " ;;\n");
  }
  auto function = [&f](absl::string_view suffix, absl::string_view subject,
                       const std::string& cases) {
    return absl::StrCat(f, "_", suffix, "() {\n  case ", subject, " in\n", cases,
                        "  esac\n}\n");
  };
  const std::string ids = absl::StrCat(
      f, "_ids() {\n"
      "  if [[ -z ${", f, "_ids_at-} ]] || ((SECONDS - ", f, "_ids_at >= ",
      kCompletionIdsCacheSeconds, ")); then\n"
      "    ", f, "_ids_cache=$(command ", app.get_name(), " ", kIdsCommandName,
      " 2>/dev/null)\n"
      "    ", f, "_ids_at=$SECONDS\n"
      "  fi\n"
      "  ", f, "_reply=\n"
      "  local k v\n"
      "  while read -r k v; do\n"
      "    [[ $k == \"$1\" ]] && ", f, "_reply=\"$", f, "_reply $v\"\n"
      "  done <<< \"$", f, "_ids_cache\"\n"
      "  return 0\n"
      "}\n");
  return absl::StrCat(function("subcommands", "\"$1\"", subs),
                      function("options", "\"$1\"", opts),
                      function("value_options", "\"$1\"", value_opts),
                      function("choices", "\"$1|$2\"", choices),
                      function("id_kind", "\"$1|$2\"", id_kinds), ids);
}

// The loop both scripts run over the words before the cursor: it follows
// subcommand names into CMD, skips option values, and stops at `--` (what
// follows is the job's command). Leaves SKIP=1 when the cursor word is an
// option's value. FIRST and WORD are the shell's index expressions.
std::string WalkLoop(const std::string& f, absl::string_view first,
                     absl::string_view last, absl::string_view word,
                     absl::string_view at_double_dash) {
  return absl::StrCat(
      "  for ((i = ", first, "; i < ", last, "; i++)); do\n"
      "    w=", word, "\n"
      "    if ((skip)); then skip=0; continue; fi\n"
      "    case $w in\n"
      "      --) ", at_double_dash, " ;;\n"
      "      --*=*) ;;\n"
      "      -*) [[ \" $(", f, "_value_options \"$cmd\") \" == *\" $w \"* ]] && skip=1 ;;\n"
      "      *) [[ \" $(", f, "_subcommands \"$cmd\") \" == *\" $w \"* ]] && cmd=${cmd:+$cmd }$w ;;\n"
      "    esac\n"
      "  done\n");
}

std::string Header(const CLI::App& app, absl::string_view shell,
                   absl::string_view install) {
  return absl::StrCat("# ", shell, " completion for ", app.get_name(),
                      "; generated by `", app.get_name(), " completion ", shell,
                      "` from its own command-line definition.\n# ", install,
                      "\n");
}

// For zsh's _describe: "name:description", the name's colons escaped.
std::string DescribeItem(const std::string& name, const std::string& description) {
  return Quote(absl::StrCat(absl::StrReplaceAll(name, {{":", "\\:"}}), ":",
                            description));
}

}  // namespace

std::vector<CompletionCommand> WalkCommands(const CLI::App& app) {
  std::vector<CompletionCommand> commands;
  Walk(app, app, {}, &commands);
  return commands;
}

std::string BashCompletion(const CLI::App& app) {
  const std::string f = FunctionName(app);
  const std::vector<CompletionCommand> commands = WalkCommands(app);
  return absl::StrCat(
      Header(app, "bash",
             absl::StrCat("Install: source <(", app.get_name(),
                          " completion bash) in ~/.bashrc, or save it as "
                          "/etc/bash_completion.d/",
                          app.get_name(), ".")),
      Helpers(app, f, commands), f, "() {\n",
      "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
      "  local cmd= w i skip=0\n",
      // After --: nothing of ours; `complete -o default` offers file names.
      WalkLoop(f, "1", "COMP_CWORD", "${COMP_WORDS[i]}",
               "COMPREPLY=(); return 0"),
      "  COMPREPLY=()\n"
      "  local choices kind\n"
      "  if ((skip)); then\n"
      "    choices=$(", f, "_choices \"$cmd\" \"$prev\")\n"
      "    kind=$(", f, "_id_kind \"$cmd\" \"$prev\")\n"
      "    if [[ -n $kind ]]; then ", f, "_ids \"$kind\"; choices=$", f, "_reply; fi\n"
      "    [[ -n $choices ]] && COMPREPLY=($(compgen -W \"$choices\" -- \"$cur\"))\n"
      "    return 0\n"
      "  fi\n"
      "  case $cur in\n"
      "    -*) COMPREPLY=($(compgen -W \"$(", f, "_options \"$cmd\")\" -- \"$cur\")) ;;\n"
      "    *)\n"
      "      choices=$(", f, "_subcommands \"$cmd\")\n"
      "      kind=$(", f, "_id_kind \"$cmd\" \"\")\n"
      "      if [[ -n $kind ]]; then ", f, "_ids \"$kind\"; choices=\"$choices $", f, "_reply\"; fi\n"
      "      COMPREPLY=($(compgen -W \"$choices\" -- \"$cur\")) ;;\n"
      "  esac\n"
      "  return 0\n"
      "}\n"
      "complete -o default -F ", f, " ", app.get_name(), "\n");
}

std::string ZshCompletion(const CLI::App& app) {
  const std::string f = FunctionName(app);
  const std::vector<CompletionCommand> commands = WalkCommands(app);
  std::string option_cases, sub_cases;
  for (const CompletionCommand& c : commands) {
    const std::string key = Quote(absl::StrJoin(c.path, " "));
    std::vector<std::string> opts, subs;
    for (const CompletionOption& o : c.options) {
      for (const std::string& name : o.names) {
        opts.push_back(DescribeItem(name, o.description));
      }
    }
    for (const auto& [name, description] : c.subcommands) {
      subs.push_back(DescribeItem(name, description));
    }
    absl::StrAppend(&option_cases, "      ", key, ") items=(",
                    absl::StrJoin(opts, " "), ") ;;\n");
    absl::StrAppend(&sub_cases, "      ", key, ") items=(",
                    absl::StrJoin(subs, " "), ") ;;\n");
  }
  return absl::StrCat(
      "#compdef ", app.get_name(), "\n",
      Header(app, "zsh",
             absl::StrCat("Install: source <(", app.get_name(),
                          " completion zsh) in ~/.zshrc after compinit, or "
                          "save it as _",
                          app.get_name(), " in a directory of $fpath.")),
      Helpers(app, f, commands), f, "() {\n",
      "  local cur=${words[CURRENT]} prev=${words[CURRENT-1]}\n"
      "  local cmd= w i skip=0\n"
      "  local -a items\n",
      // After --: complete the job's command like any command line.
      WalkLoop(f, "2", "CURRENT", "${words[i]}",
               "shift $i words; (( CURRENT -= i )); _normal; return"),
      "  local kind\n"
      "  if ((skip)); then\n"
      "    items=(${=$(", f, "_choices \"$cmd\" \"$prev\")})\n"
      "    kind=$(", f, "_id_kind \"$cmd\" \"$prev\")\n"
      "    if [[ -n $kind ]]; then ", f, "_ids \"$kind\"; items=(${=", f, "_reply}); fi\n"
      "    if ((${#items})); then compadd -a items; else _files; fi\n"
      "    return\n"
      "  fi\n"
      "  if [[ $cur == -* ]]; then\n"
      "    case $cmd in\n", option_cases,
      "    esac\n"
      "    _describe -t options option items\n"
      "  else\n"
      "    case $cmd in\n", sub_cases,
      "    esac\n"
      "    kind=$(", f, "_id_kind \"$cmd\" \"\")\n"
      "    if [[ -n $kind ]]; then\n"
      "      ", f, "_ids \"$kind\"\n"
      "      local -a ids\n"
      "      ids=(${=", f, "_reply})\n"
      "      compadd -a ids\n"
      "    elif ((${#items})); then _describe -t commands command items; else _files; fi\n"
      "  fi\n"
      "}\n"
      "if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then\n"
      "  ", f, " \"$@\"\n"
      "else\n"
      "  compdef ", f, " ", app.get_name(), "\n"
      "fi\n");
}

}  // namespace trainctl::cli
