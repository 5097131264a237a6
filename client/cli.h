#ifndef TRAINCTL_CLIENT_CLI_H_
#define TRAINCTL_CLIENT_CLI_H_

#include <functional>
#include <ostream>
#include <string>

#include "common/clock.h"
#include "trainctl/v1/metrics.pb.h"
#include "trainctl/v1/service.grpc.pb.h"
#include "trainctl/v1/types.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace trainctl::cli {

// Exit statuses of `trainctl` (besides those of `trainctl wait`, see
// WaitExitStatus).
inline constexpr int kExitOk = 0;
// An RPC failed (coordinator unreachable, unknown job, invalid spec...).
inline constexpr int kExitRpcError = 1;
// Bad command line: unknown flag, conflicting flags, malformed value.
inline constexpr int kExitUsage = 2;
// `trainctl wait`: the job was cancelled.
inline constexpr int kExitCancelled = 2;
// `trainctl wait --timeout`: the job was still running at the timeout (as
// GNU timeout(1)).
inline constexpr int kExitWaitTimeout = 124;

// The address used when neither --coordinator nor TRAINCTL_COORDINATOR is set.
inline constexpr char kDefaultCoordinator[] = "127.0.0.1:50051";

// Returns the stub to talk to the coordinator at `address` (host:port). The
// pointer is not owned by the caller and must outlive the Cli::Run call.
using StubFactory =
    std::function<v1::Coordinator::StubInterface*(const std::string& address)>;

// How to reach the coordinator, resolved by Cli::Run from (first wins) the
// flags, the environment, the config file and the defaults:
//   address  --coordinator, $TRAINCTL_COORDINATOR, `coordinator` key,
//            kDefaultCoordinator;
//   token    --token, $TRAINCTL_AUTH_TOKEN, `token` key; none by default
//            ($TRAINCTL_TOKEN is a task's rendezvous token, never read here);
//   ca_pem   contents of --tls-ca, $TRAINCTL_TLS_CA or the `ca_cert` key;
//            none: plaintext.
// The config file is $XDG_CONFIG_HOME/trainctl/config (default
// ~/.config/trainctl/config) or --config FILE, in the INI/TOML subset CLI11
// reads: `key = "value"` lines, `#` comments, no sections.
struct Connection {
  std::string address;
  // Sent as `authorization: Bearer <token>` on every call; empty: none.
  std::string token;
  // PEM CA certificate to verify the coordinator with; empty: plaintext.
  std::string ca_pem;
};

// Returns the stub for `connection`; same ownership as StubFactory.
using ConnectionStubFactory =
    std::function<v1::Coordinator::StubInterface*(const Connection& connection)>;

// How the CLI renders its output; everything has a usable default.
struct CliOptions {
  // Width of the terminal in columns: tables narrow their widest columns to
  // fit it (client/table.h); 0 means unknown (not a terminal, $COLUMNS
  // unset): only the last column is cut, at 60 columns.
  int terminal_width = 0;
  // Source of "now" for ages, runtimes and `wait --timeout`; null means the
  // system clock. Not owned.
  const Clock* clock = nullptr;
  // Reads the environment (`trainctl report` takes TRAINCTL_JOB_ID,
  // TRAINCTL_ATTEMPT, TRAINCTL_TOKEN and RANK from it); null means ::getenv.
  std::function<const char*(const char*)> getenv;
  // The environment `submit --export` and `sweep --export` take variables
  // from (NAME=VALUE strings, null-terminated); null means ::environ.
  const char* const* environ = nullptr;
  // `submit --user` when not given (main.cc: LocalAccountName()); empty
  // sends none. Ignored with a token: the coordinator takes the user from
  // it.
  std::string default_user;
  // The config file read when --config is not given; empty means
  // $XDG_CONFIG_HOME/trainctl/config, else ~/.config/trainctl/config. A
  // missing default file is fine; a missing --config file is a usage error.
  std::string config_file;
  // Draw a progress line (spinner, state, elapsed time) on `err` while
  // `wait` and `submit --wait` wait: main.cc sets it when stdout and stderr
  // are terminals, so nothing of it reaches a pipe or a file. With it, the
  // CLI polls the job every second instead of long-polling 30 s.
  bool progress = false;
  // Standard output is a terminal (main.cc: isatty): `top` redraws its frame
  // in place with escape codes; never in a pipe or a file.
  bool stdout_terminal = false;
  // Called with the parsed-to-be command line definition just before each
  // Run parses argv (tests walk it to check completion and --help); may be
  // empty.
  std::function<void(const CLI::App&)> inspect_app;
};

// The account this process runs as, from the password database
// (getpwuid_r(geteuid())): what a job submitted without authentication is
// charged to, never "". Without an entry for the uid (a container's
// arbitrary uid): $USER, else "uid<N>".
std::string LocalAccountName();

// The `trainctl` command line: parses argv with CLI11, calls the Coordinator
// service through a stub and prints for people (tables) or programs (-o json).
// Holds no gRPC channel itself: main.cc supplies a StubFactory, tests a mock
// stub. Single-threaded; one Cli may Run several command lines in turn.
class Cli {
 public:
  // `make_stub` is called once per Run, after parsing, with the coordinator
  // address (--coordinator, else $TRAINCTL_COORDINATOR, else
  // kDefaultCoordinator). Standard output goes to `out`, messages to `err`.
  Cli(StubFactory make_stub, std::ostream& out, std::ostream& err,
      CliOptions options = {});
  // Same, with the whole Connection (token and TLS CA too): what main.cc uses.
  Cli(ConnectionStubFactory make_stub, std::ostream& out, std::ostream& err,
      CliOptions options = {});
  // Same, with one stub whatever the address (tests).
  Cli(v1::Coordinator::StubInterface* stub, std::ostream& out,
      std::ostream& err, CliOptions options = {});

  // Runs one command line (argv[0] is the program name) and returns the
  // process exit status: kExitOk, kExitRpcError, kExitUsage, or for `wait`
  // and `submit --wait` the job's WaitExitStatus. Never throws.
  int Run(int argc, char** argv);

  // The exit status of `trainctl wait` for `job` in a final state:
  //   SUCCEEDED -> 0;
  //   FAILED    -> the exit code of the rank that failed first (earliest end
  //                time among ranks with a non-zero exit code), capped to
  //                1..125; 1 when no rank exited non-zero (killed by a
  //                signal, lost node, infeasible, failed to start);
  //   CANCELLED -> 2 (kExitCancelled);
  //   anything else -> 1.
  static int WaitExitStatus(const v1::Job& job);

 private:
  ConnectionStubFactory make_stub_;
  std::ostream& out_;
  std::ostream& err_;
  CliOptions options_;
};

}  // namespace trainctl::cli

#endif  // TRAINCTL_CLIENT_CLI_H_
