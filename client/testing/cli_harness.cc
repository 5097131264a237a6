// The non-template parts of the CLI test harness (cli_harness.h): running a
// command line through a Cli, and splitting output into lines.

#include "client/testing/cli_harness.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/cli.h"

namespace trainctl::cli {

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

int RunCli(Cli& cli, std::vector<std::string> args) {
  args.insert(args.begin(), "trainctl");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return cli.Run(static_cast<int>(argv.size()), argv.data());
}

}  // namespace trainctl::cli
