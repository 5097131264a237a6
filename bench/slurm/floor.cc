// trainctl-bench-floor: the transport floor for
// bench/slurm/compare.sh: a no-op unary gRPC call (BenchPing, served like the
// coordinator: bench/common/bench_util.h) made `--calls` times in a row over
// loopback; prints the round-trip summary (microseconds) as JSON on stdout.
//
//   trainctl-bench-floor [--calls 2000]

#include <cstdio>

#include "CLI/CLI.hpp"
#include "bench/common/bench_util.h"

int main(int argc, char** argv) {
  CLI::App app{"trainctl-bench-floor: round trips of a no-op unary gRPC call "
               "over loopback (the transport floor), as JSON"};
  int calls = 2000;
  app.add_option("--calls", calls, "calls to time (after 100 warm-up calls)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  auto server = trainctl::bench::PingServer::Start();
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  auto floor = trainctl::bench::MeasureFloor((*server)->address(), calls);
  if (!floor.ok()) {
    std::fprintf(stderr, "%s\n", floor.status().ToString().c_str());
    return 1;
  }
  return trainctl::bench::WriteJson(*floor, "-").ok() ? 0 : 1;
}
