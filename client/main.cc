// trainctl: the command-line client of trainctl-coordinator. All logic lives
// in cli.h and the cli*.cc files (tc_cli); this file only opens the channel
// and finds the terminal.

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "client/auth_channel.h"
#include "client/cli.h"
#include "common/grpc_target.h"
#include "common/malloc_tuning.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.grpc.pb.h"

int main(int argc, char** argv) {
  // Session output moves in chunks of up to 1 MiB: reuse, not fresh pages.
  trainctl::TuneMallocForStreams();
  trainctl::cli::CliOptions options;
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 &&
      ws.ws_col > 0) {
    options.terminal_width = ws.ws_col;
  } else if (const char* columns = std::getenv("COLUMNS")) {
    // Piped, or a terminal that reports no size: $COLUMNS if the user set
    // it (as ls and ps honour it).
    int width = 0;
    if (absl::SimpleAtoi(columns, &width) && width > 0) {
      options.terminal_width = width;
    }
  }
  // `submit --user` defaults to this process's account (the password
  // database, not $USER, which any shell may set): without authentication a
  // job is never anonymous.
  options.default_user = trainctl::cli::LocalAccountName();
  // The spinner of `wait` only where a person watches: never in a pipe or
  // a file, on either stream.
  options.progress = isatty(STDOUT_FILENO) && isatty(STDERR_FILENO);
  options.stdout_terminal = isatty(STDOUT_FILENO);
  // Created by the CLI once it knows the address; outlives Run.
  std::unique_ptr<trainctl::v1::Coordinator::Stub> stub;
  trainctl::cli::Cli cli(
      trainctl::cli::ConnectionStubFactory(
          [&stub](const trainctl::cli::Connection& connection) {
            // "a:p,b:q": the leader and its standbys, tried in order.
            absl::StatusOr<std::string> target =
                trainctl::GrpcTargetFor(connection.address);
            if (!target.ok()) {
              std::cerr << "trainctl: --coordinator: " << target.status().message()
                        << "\n";
              std::exit(trainctl::cli::kExitUsage);
            }
            stub = trainctl::v1::Coordinator::NewStub(
                trainctl::cli::MakeCoordinatorChannel(connection, *target));
            return stub.get();
          }),
      std::cout, std::cerr, options);
  return cli.Run(argc, argv);
}
