// The helpers every `trainctl` command shares (cli_internal.h): the names
// and formats of states, ages, resources and exit codes; JSON output; the
// user-facing message of a failed RPC; usage errors and --help examples; and
// the connection to the coordinator (flags, environment, config file).

#include <string.h>  // sigabbrev_np

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "yaml-cpp/yaml.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/cli_internal.h"
#include "common/units.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"

namespace trainctl::cli::internal {

// ------------------------------------------------------------ formatting

// "JOB_STATE_RUNNING" -> "running": the user-facing name of an enum value.
std::string ShortEnumName(const std::string& full, absl::string_view prefix) {
  return absl::AsciiStrToLower(absl::StripPrefix(full, prefix));
}
std::string JobStateLabel(const v1::Job& job) {
  if (job.state() == v1::JOB_STATE_CANCELLED && job.stopped_early_at_step() > 0) {
    return "stopped early";
  }
  return StateName(job.state());
}

std::string StateName(v1::JobState s) {
  return ShortEnumName(v1::JobState_Name(s), "JOB_STATE_");
}
std::string KindName(v1::JobKind k) {
  return ShortEnumName(v1::JobKind_Name(k), "JOB_KIND_");
}
std::string TaskStateName(v1::TaskState s) {
  return ShortEnumName(v1::TaskState_Name(s), "TASK_STATE_");
}
std::string NodeStateName(v1::NodeState s) {
  return ShortEnumName(v1::NodeState_Name(s), "NODE_STATE_");
}

// "45s", "12m5s", "3h4m", "2d3h": coarse, like kubectl's AGE.
std::string FormatAge(absl::Duration d) {
  int64_t s = std::max<int64_t>(0, absl::ToInt64Seconds(d));
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm%ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%dm", s / 3600, s % 3600 / 60);
  return absl::StrFormat("%dd%dh", s / 86400, s % 86400 / 3600);
}

absl::Time FromMs(int64_t ms) { return absl::FromUnixMillis(ms); }

// The resource shape of a spec, compactly: "0.25", "10GiB", "1", "8", "2x4".
std::string FormatGpus(const v1::JobSpec& spec) {
  if (spec.nodes() > 0) {
    return absl::StrFormat("%dx%d", spec.nodes(), spec.gpus_per_node());
  }
  if (spec.gpu_fraction() > 0)
    return absl::StrFormat("%g", spec.gpu_fraction());
  if (spec.gpu_memory_bytes() > 0) {
    return absl::StrReplaceAll(FormatBytes(spec.gpu_memory_bytes()),
                               {{" ", ""}});
  }
  return absl::StrCat(std::max(1, spec.gpus()));
}

// The resources in words, for `describe`.
std::string DescribeResources(const v1::JobSpec& spec) {
  std::string shape;
  if (spec.nodes() > 0) {
    shape = absl::StrFormat("%d node(s) x %d GPU(s)", spec.nodes(),
                            spec.gpus_per_node());
  } else if (spec.gpu_fraction() > 0) {
    shape = absl::StrFormat("%g of a GPU", spec.gpu_fraction());
  } else if (spec.gpu_memory_bytes() > 0) {
    shape =
        absl::StrCat(FormatBytes(spec.gpu_memory_bytes()), " of GPU memory");
  } else {
    shape = absl::StrFormat("%d GPU(s)", std::max(1, spec.gpus()));
  }
  if (spec.tasks_per_node() > 0) {
    absl::StrAppend(&shape, ", ", spec.tasks_per_node(), " task(s) per node");
  }
  return shape;
}

std::string DescribeNodeSelection(const v1::JobSpec& spec) {
  std::vector<std::string> parts;
  if (spec.gpu_types_size() > 0) {
    parts.push_back(absl::StrCat("--gpu-type ", absl::StrJoin(spec.gpu_types(), ",")));
  }
  if (!spec.constraint().empty()) {
    parts.push_back(absl::StrCat("--constraint ", spec.constraint()));
  }
  if (spec.nodelist_size() > 0) {
    parts.push_back(absl::StrCat("-w ", absl::StrJoin(spec.nodelist(), ",")));
  }
  if (spec.exclude_nodes_size() > 0) {
    parts.push_back(absl::StrCat("-x ", absl::StrJoin(spec.exclude_nodes(), ",")));
  }
  if (spec.allow_mixed_gpu_types()) parts.push_back("--allow-mixed-gpu-types");
  return absl::StrJoin(parts, " ");
}

// Quotes an argv element for display when a shell would split or expand it.
std::string ShellQuote(const std::string& arg) {
  bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
    return absl::ascii_isalnum(c) ||
           absl::string_view("-_./=:,+@%").find(c) != absl::string_view::npos;
  });
  if (plain) return arg;
  return absl::StrCat("'", absl::StrReplaceAll(arg, {{"'", "'\\''"}}), "'");
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev)
                           : absl::StrCat("signal ", sig);
}

// EXIT cell of a task: its code, its signal's name, or "-" while it runs.
std::string FormatExit(const v1::Task& t) {
  if (t.signal() != 0) return SignalName(t.signal());
  if (t.state() == v1::TASK_STATE_EXITED) return absl::StrCat(t.exit_code());
  return "-";
}

// The protobuf JSON of `message` (proto field names, defaults included).
std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  auto status =
      google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok())
    return absl::StrCat("{\"error\": \"", status.ToString(), "\"}\n");
  return json;
}

namespace {

// Whether the plain YAML scalar `text` would be read back as something other
// than a string (YAML 1.1 and 1.2 core schemas: null, booleans, numbers).
bool ReadsAsNonString(const std::string& text) {
  static const std::regex kNonString(
      "|~|null|Null|NULL|true|True|TRUE|false|False|FALSE|yes|Yes|YES|no|No|NO|"
      "on|On|ON|off|Off|OFF|y|Y|n|N|[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?|"
      "[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)|0x[0-9a-fA-F]+|0o[0-7]+");
  return std::regex_match(text, kNonString);
}

// Emits `node` (loaded from JSON) in block style all the way down. A JSON
// string (yaml-cpp tags a quoted scalar "!") that would read back as a
// number, boolean or null is double-quoted, so strings stay strings ("1.0"
// in a command line); but an integer, which protobuf's JSON writes as a
// string for 64-bit fields (ids, *_ms, *_bytes), stays a number.
void Emit(YAML::Emitter& out, const YAML::Node& node) {
  if (node.IsMap()) {
    out << YAML::BeginMap;
    for (auto it = node.begin(); it != node.end(); ++it) {
      out << YAML::Key;
      Emit(out, it->first);
      out << YAML::Value;
      Emit(out, it->second);
    }
    out << YAML::EndMap;
  } else if (node.IsSequence()) {
    out << YAML::BeginSeq;
    for (auto it = node.begin(); it != node.end(); ++it) Emit(out, *it);
    out << YAML::EndSeq;
  } else if (node.IsNull()) {
    out << YAML::Null;
  } else {
    static const std::regex kInteger("-?[0-9]+");
    const std::string& text = node.Scalar();
    if (node.Tag() == "!" && ReadsAsNonString(text) && !std::regex_match(text, kInteger)) {
      out << YAML::DoubleQuoted << text;
    } else {
      out << text;
    }
  }
}

}  // namespace

std::string JsonToYaml(const std::string& json) {
  YAML::Emitter emitter;
  emitter.SetMapFormat(YAML::Block);
  emitter.SetSeqFormat(YAML::Block);
  Emit(emitter, YAML::Load(json));
  return std::string(emitter.c_str()) + "\n";
}

std::map<std::string, std::string> MaskSecrets(
    const google::protobuf::Map<std::string, std::string>& env) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : env) {
    out[name] = LooksSecret(name) ? "****" : value;
  }
  return out;
}

std::string FormatValue(double v) { return absl::StrFormat("%.6g", v); }

// ------------------------------------------------------------ RPC errors

// UNAVAILABLE always means the coordinator could not be reached: the
// coordinator itself never answers UNAVAILABLE to the user API (a
// disconnected node is FAILED_PRECONDITION).
absl::Status Session::ToUserStatus(const grpc::Status& status,
                                   absl::Duration deadline) const {
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  const std::string& msg = status.error_message();
  if (code == absl::StatusCode::kUnavailable) {
    return absl::Status(
        code, absl::StrFormat("cannot reach the coordinator at %s: %s (is "
                              "trainctl-coordinator running? set "
                              "--coordinator or TRAINCTL_COORDINATOR)",
                              address_, msg));
  }
  // gRPC's own message when our deadline passed; the coordinator's
  // DEADLINE_EXCEEDED errors say more.
  if (code == absl::StatusCode::kDeadlineExceeded &&
      msg == "Deadline Exceeded") {
    return absl::Status(
        code,
        absl::StrFormat("the coordinator at %s did not answer within %s",
                        address_, absl::FormatDuration(deadline)));
  }
  return absl::Status(code,
                      msg.empty() ? absl::StatusCodeToString(code) : msg);
}

// ------------------------------------------------------------ command line

int UsageError(std::ostream& err, absl::string_view message) {
  err << "trainctl: error: " << message << "\n";
  return kExitUsage;
}

std::string Example(absl::string_view text) {
  return absl::StrCat("Example:\n", text);
}

namespace {

// The config file to read: --config, else options.config_file, else
// $XDG_CONFIG_HOME/trainctl/config, else ~/.config/trainctl/config ("" when
// neither variable is set). `explicit_file` tells whether it must exist.
std::string ConfigPath(const Flags& f, const CliOptions& options,
                       bool* explicit_file) {
  *explicit_file = !f.config.empty();
  if (!f.config.empty()) return f.config;
  if (!options.config_file.empty()) return options.config_file;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && *xdg) {
    return absl::StrCat(xdg, "/trainctl/config");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home) {
    return absl::StrCat(home, "/.config/trainctl/config");
  }
  return "";
}

// Reads `key = "value"` lines of the config file with CLI11's config parser.
// Errors: INVALID_ARGUMENT naming the file and the key (unknown key, a
// section, a list value), or when it cannot be parsed.
absl::StatusOr<std::map<std::string, std::string>> ReadConfigFile(
    const std::string& path) {
  static const std::set<std::string> kKeys = {"coordinator", "token", "ca_cert"};
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  std::map<std::string, std::string> out;
  for (const CLI::ConfigItem& item : items) {
    // CLI11 marks section starts and ends with "++" / "--" items.
    if (item.name == "++" || item.name == "--") continue;
    if (!item.parents.empty() || kKeys.count(item.name) == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: unknown key \"%s\"; the keys are coordinator, token and "
          "ca_cert (no sections)",
          path, item.fullname()));
    }
    if (item.inputs.size() != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s: expected one value, e.g. %s = \"...\"", path, item.name,
          item.name));
    }
    out[item.name] = item.inputs.front();
  }
  return out;
}

}  // namespace

// Resolves the Connection (see cli.h) from the flags (which already hold
// the environment variables) and the config file. Warns on `err` about a
// token kept in a file others can read, or sent without TLS off-host.
// Errors: INVALID_ARGUMENT for an unreadable --config or CA file, a bad
// config file, or a token gRPC cannot send.
absl::StatusOr<Connection> ResolveConnection(const Flags& f,
                                             const CliOptions& options,
                                             std::ostream& err) {
  bool explicit_file = false;
  const std::string path = ConfigPath(f, options, &explicit_file);
  std::map<std::string, std::string> config;
  std::error_code ec;
  if (!path.empty() && std::filesystem::is_regular_file(path, ec)) {
    absl::StatusOr<std::map<std::string, std::string>> read = ReadConfigFile(path);
    if (!read.ok()) return read.status();
    config = *std::move(read);
    const auto perms = std::filesystem::status(path, ec).permissions();
    if (config.count("token") > 0 && !ec &&
        (perms & (std::filesystem::perms::group_read |
                  std::filesystem::perms::others_read)) !=
            std::filesystem::perms::none) {
      err << "trainctl: warning: " << path
          << " holds a token and others can read it; run chmod 600 " << path
          << "\n";
    }
  } else if (explicit_file) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config ", path, ": no such file"));
  }
  auto pick = [&config](const std::string& flag, const std::string& key) {
    if (!flag.empty()) return flag;
    auto it = config.find(key);
    return it == config.end() ? std::string() : it->second;
  };
  Connection c;
  c.address = pick(f.coordinator, "coordinator");
  if (c.address.empty()) c.address = kDefaultCoordinator;
  c.token = pick(f.token, "token");
  for (char ch : c.token) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(ch))) {
      return absl::InvalidArgumentError(
          "token: must be printable ASCII without spaces (check --token, "
          "$TRAINCTL_AUTH_TOKEN and the config file)");
    }
  }
  const std::string ca_file = pick(f.tls_ca, "ca_cert");
  if (!ca_file.empty()) {
    std::ifstream in(ca_file);
    std::stringstream pem;
    if (in) pem << in.rdbuf();
    if (!in || pem.str().find("-----BEGIN ") == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls-ca ", ca_file, ": cannot read a PEM certificate there"));
    }
    c.ca_pem = pem.str();
  }
  const bool loopback = absl::StartsWith(c.address, "127.") ||
                        absl::StartsWith(c.address, "localhost:") ||
                        absl::StartsWith(c.address, "[::1]");
  if (!c.token.empty() && c.ca_pem.empty() && !loopback) {
    err << "trainctl: warning: sending the token to " << c.address
        << " without TLS; pass --tls-ca (or ca_cert in the config file)\n";
  }
  return c;
}


}  // namespace trainctl::cli::internal
