// trainctl-cluster-sim: the long run of the cluster simulation (tests/sim/README.md).
//
//   trainctl-cluster-sim --seeds 1-5000 --events 2000 [--store memory|queue|sqlite]
//       [--min-nodes 2 --max-nodes 5 --max-gpus-per-node 4]
//       [--json FILE] [--shrink-dir DIR] [--max-shrinks 3]
//   trainctl-cluster-sim --replay tests/sim/seeds/NAME.scenario [--log info]
//
// Runs every seed of the range (each a fresh cluster and its own events),
// prints events run, events/s and the violations by invariant; --json writes
// the same (protobuf Struct, JsonUtil). With --shrink-dir, the first
// --max-shrinks failing seeds are shrunk and written there as scenarios that
// --replay runs again. Exit status: 0 when no invariant failed, 1 otherwise,
// 2 for bad arguments.

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "spdlog/spdlog.h"
#include "tests/sim/cluster_sim.h"

namespace {

using trainctl::sim::SimOptions;
using trainctl::sim::SimResult;

int Replay(const std::string& path, const SimOptions& options) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "trainctl-cluster-sim: cannot read " << path << "\n";
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto scenario = trainctl::sim::ParseScenario(text.str());
  if (!scenario.ok()) {
    std::cerr << "trainctl-cluster-sim: " << path << ": " << scenario.status().message() << "\n";
    return 2;
  }
  SimOptions replay_options = options;
  replay_options.store = scenario->store;  // The store it failed on.
  SimResult r = trainctl::sim::RunEvents(scenario->seed, scenario->events, replay_options);
  std::printf("replayed %lld events of seed %llu: %zu violation(s)\n",
              static_cast<long long>(r.events),
              static_cast<unsigned long long>(scenario->seed), r.violations.size());
  for (const std::string& v : r.violations) std::printf("  %s\n", v.c_str());
  return r.violations.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainctl-cluster-sim: the deterministic cluster simulation, long run"};
  std::string seeds = "1-100";
  int64_t events = 2000;
  SimOptions options;
  std::string json_path, shrink_dir, replay, log_level = "off";
  int max_shrinks = 3;
  app.add_option("--seeds", seeds, "seed range A-B (inclusive)");
  app.add_option("--events", events, "events per seed")->check(CLI::PositiveNumber);
  app.add_option("--store", options.store, "coordinator store")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(trainctl::sim::kStores),
                                                     std::end(trainctl::sim::kStores))));
  app.add_option("--sqlite-dir", options.sqlite_dir, "where SQLite stores go");
  app.add_option("--min-nodes", options.min_nodes, "simulated nodes, at least")
      ->check(CLI::Range(1, 64));
  app.add_option("--max-nodes", options.max_nodes, "simulated nodes, at most")
      ->check(CLI::Range(1, 64));
  app.add_option("--max-gpus-per-node", options.max_gpus_per_node, "GPUs per node, at most")
      ->check(CLI::Range(1, 16));
  bool uniform_gpus = false;
  app.add_flag("--uniform-gpus", uniform_gpus,
               "every node H100 80 GiB (default: unlike clusters, 16-141 GiB GPUs)");
  app.add_option("--json", json_path, "write the totals here");
  app.add_option("--shrink-dir", shrink_dir, "write shrunk failing scenarios here");
  app.add_option("--max-shrinks", max_shrinks, "failing seeds to shrink");
  app.add_option("--replay", replay, "run one scenario file (on the store it names)");
  app.add_option("--log", log_level, "coordinator log level (off, error, info, debug)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  options.unlike_gpus = !uniform_gpus;
  if (!options.sqlite_dir.empty()) {
    // Made here: a missing directory would fail every seed at its setup.
    std::error_code ec;
    std::filesystem::create_directories(options.sqlite_dir, ec);
    if (ec) {
      std::cerr << "trainctl-cluster-sim: --sqlite-dir " << options.sqlite_dir << ": "
                << ec.message() << "\n";
      return 2;
    }
  }

  if (!replay.empty()) return Replay(replay, options);

  std::vector<std::string> range = absl::StrSplit(seeds, '-');
  uint64_t first = 0, last = 0;
  if (range.size() != 2 || !absl::SimpleAtoi(range[0], &first) ||
      !absl::SimpleAtoi(range[1], &last) || first > last) {
    std::cerr << "trainctl-cluster-sim: --seeds: want A-B with A <= B, got '" << seeds << "'\n";
    return 2;
  }
  if (options.min_nodes > options.max_nodes) {
    std::cerr << "trainctl-cluster-sim: --min-nodes must not exceed --max-nodes\n";
    return 2;
  }
  options.stop_at_first_violation = true;
  const auto start = std::chrono::steady_clock::now();
  int64_t total_events = 0, processes = 0, probes = 0, preemptions = 0, failed_seeds = 0,
          fetched = 0, writes_lost = 0;
  std::map<std::string, int64_t> by_invariant, by_type, end_states, dep_end_states;
  std::vector<std::string> samples;
  int shrunk = 0;
  for (uint64_t seed = first; seed <= last; ++seed) {
    SimResult r = trainctl::sim::RunSeed(seed, events, options);
    total_events += r.events;
    processes += r.processes_started;
    probes += r.preflight_runs;
    preemptions += r.preemptions;
    fetched += r.rendezvous_fetched;
    writes_lost += r.writes_lost;
    for (const auto& [k, n] : r.events_by_type) by_type[k] += n;
    for (const auto& [k, n] : r.job_end_states) end_states[k] += n;
    for (const auto& [k, n] : r.dependency_end_states) dep_end_states[k] += n;
    if (r.violations.empty()) continue;
    ++failed_seeds;
    ++by_invariant[r.first_invariant];
    if (samples.size() < 10) samples.push_back(r.violations.front());
    std::printf("FAIL %s\n", r.violations.front().c_str());
    if (!shrink_dir.empty() && shrunk < max_shrinks) {
      ++shrunk;
      trainctl::sim::Scenario s{seed, trainctl::sim::GenerateEvents(seed, events),
                                options.store};
      s.events = trainctl::sim::Shrink(seed, s.events, r.first_invariant, options);
      const std::string path =
          absl::StrCat(shrink_dir, "/seed-", seed, "-", r.first_invariant, ".scenario");
      std::error_code ec;
      std::filesystem::create_directories(shrink_dir, ec);
      std::ofstream out(path);
      out << "# " << r.violations.front() << "\n" << trainctl::sim::FormatScenario(s);
      out.close();
      if (!out) {
        std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(),
                     ec ? ec.message().c_str() : "write failed");
      } else {
        std::printf("  shrunk to %zu events: %s\n", s.events.size(), path.c_str());
      }
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("seeds %llu-%llu: %lld events in %.1f s (%.0f events/s), %lld processes, "
              "%lld pre-flight probes, %lld preemptions, %lld ncclUniqueIds fetched, "
              "%lld queued writes lost in crashes; %lld failing seed(s)\n",
              static_cast<unsigned long long>(first), static_cast<unsigned long long>(last),
              static_cast<long long>(total_events), secs, total_events / secs,
              static_cast<long long>(processes), static_cast<long long>(probes),
              static_cast<long long>(preemptions), static_cast<long long>(fetched),
              static_cast<long long>(writes_lost), static_cast<long long>(failed_seeds));
  for (const auto& [k, n] : by_invariant) {
    std::printf("  %s: %lld\n", k.c_str(), static_cast<long long>(n));
  }
  if (!json_path.empty()) {
    google::protobuf::Struct out;
    auto& f = *out.mutable_fields();
    f["seeds"].set_string_value(seeds);
    f["events_per_seed"].set_number_value(static_cast<double>(events));
    f["store"].set_string_value(options.store);
    f["nodes"].set_string_value(absl::StrCat(options.min_nodes, "-", options.max_nodes));
    f["max_gpus_per_node"].set_number_value(options.max_gpus_per_node);
    f["unlike_gpus"].set_bool_value(options.unlike_gpus);
    f["events"].set_number_value(static_cast<double>(total_events));
    f["seconds"].set_number_value(secs);
    f["events_per_s"].set_number_value(total_events / secs);
    f["processes_started"].set_number_value(static_cast<double>(processes));
    f["preflight_probes"].set_number_value(static_cast<double>(probes));
    f["preemptions"].set_number_value(static_cast<double>(preemptions));
    f["rendezvous_ids_fetched"].set_number_value(static_cast<double>(fetched));
    f["writes_lost_in_crashes"].set_number_value(static_cast<double>(writes_lost));
    f["failing_seeds"].set_number_value(static_cast<double>(failed_seeds));
    auto put_map = [&](const char* name, const std::map<std::string, int64_t>& m) {
      auto& s = *f[name].mutable_struct_value()->mutable_fields();
      for (const auto& [k, n] : m) s[k].set_number_value(static_cast<double>(n));
    };
    put_map("violations_by_invariant", by_invariant);
    put_map("events_by_type", by_type);
    put_map("job_end_states", end_states);
    put_map("dependency_job_end_states", dep_end_states);
    auto* list = f["violation_samples"].mutable_list_value();
    for (const std::string& s : samples) list->add_values()->set_string_value(s);
    std::string text;
    google::protobuf::util::JsonPrintOptions print;
    print.add_whitespace = true;
    (void)google::protobuf::util::MessageToJsonString(out, &text, print);
    std::ofstream(json_path) << text;
  }
  return failed_seeds == 0 ? 0 : 1;
}
