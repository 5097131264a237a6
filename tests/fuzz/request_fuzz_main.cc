// trainctl-fuzz-requests: the long run of the request fuzzer
// (tests/fuzz/README.md).
//
//   trainctl-fuzz-requests --requests 1000000 --seed 1 [--seeds-dir DIR]
//       [--json FILE] [--episode E]
//
// Episodes run in a child process; when the child dies of a signal the crash
// is counted with its episode (replay: --seed S --episode E) and a new child
// goes on from the next episode. Prints requests tried, invariant violations
// and crashes; --json writes them (protobuf Struct, JsonUtil).

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "tests/fuzz/request_fuzzer.h"

namespace {

using trainctl::fuzz::FuzzStats;

// Progress of the current child, in memory shared with the parent.
struct Shared {
  std::atomic<int64_t> episode;
  std::atomic<int64_t> requests;
  std::atomic<int64_t> violations;
};
Shared* g_shared = nullptr;
int64_t g_base_requests = 0;
int64_t g_base_violations = 0;

void OnEpisode(int64_t index, const FuzzStats& so_far) {
  g_shared->episode = index;
  g_shared->requests = g_base_requests + so_far.requests;
  g_shared->violations = g_base_violations + so_far.violations;
}

// What a child sends back at its end: "op\tNAME\tCOUNT", "sample\tTEXT",
// "episodes\tN" lines.
void WriteStats(int fd, const FuzzStats& s) {
  std::string out = absl::StrCat("episodes\t", s.episodes, "\n");
  for (const auto& [op, n] : s.ops) absl::StrAppend(&out, "op\t", op, "\t", n, "\n");
  for (const auto& [k, n] : s.known_issues) {
    absl::StrAppend(&out, "known\t", k, "\t", n, "\n");
  }
  for (const auto& [k, v] : s.known_issue_first) {
    absl::StrAppend(&out, "first\t", k, "\t", v, "\n");
  }
  for (const auto& [k, n] : s.job_end_states) {
    absl::StrAppend(&out, "state\t", k, "\t", n, "\n");
  }
  for (std::string v : s.violation_samples) {
    for (char& c : v) {
      if (c == '\n' || c == '\t') c = ' ';
    }
    absl::StrAppend(&out, "sample\t", v, "\n");
  }
  for (size_t off = 0; off < out.size();) {
    ssize_t n = write(fd, out.data() + off, out.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

void ReadStats(int fd, FuzzStats& s) {
  std::string in;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) in.append(buf, static_cast<size_t>(n));
  for (absl::string_view line : absl::StrSplit(in, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits('\t', 2));
    int64_t n = 0;
    if (f[0] == "episodes" && f.size() == 2 && absl::SimpleAtoi(f[1], &n)) {
      s.episodes += n;
    } else if (f[0] == "op" && f.size() == 3 && absl::SimpleAtoi(f[2], &n)) {
      s.ops[f[1]] += n;
    } else if (f[0] == "first" && f.size() == 3) {
      s.known_issue_first.emplace(f[1], f[2]);
    } else if (f[0] == "state" && f.size() == 3 && absl::SimpleAtoi(f[2], &n)) {
      s.job_end_states[f[1]] += n;
    } else if (f[0] == "known" && f.size() == 3 && absl::SimpleAtoi(f[2], &n)) {
      s.known_issues[f[1]] += n;
    } else if (f[0] == "sample" && f.size() >= 2 && s.violation_samples.size() < 20) {
      s.violation_samples.push_back(f[1]);
    }
  }
}

int Usage() {
  std::cerr << "usage: trainctl-fuzz-requests [--requests N] [--seed S] "
               "[--seeds-dir DIR] [--json FILE] [--episode E | --episode-seed X]\n"
               "  TRAINCTL_FUZZ_TRACE=1 prints each request of a replay\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t requests = 1'000'000;
  uint64_t seed = 1;
  int64_t only_episode = -1;
  uint64_t episode_seed = 0;
  std::string seeds_dir = TRAINCTL_FUZZ_SEEDS_DIR;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage();
    const std::string v = argv[++i];
    bool ok = true;
    if (a == "--requests") {
      ok = absl::SimpleAtoi(v, &requests) && requests > 0;
    } else if (a == "--seed") {
      ok = absl::SimpleAtoi(v, &seed);
    } else if (a == "--episode") {
      ok = absl::SimpleAtoi(v, &only_episode) && only_episode >= 0;
    } else if (a == "--episode-seed") {
      ok = absl::SimpleAtoi(v, &episode_seed);
      only_episode = 0;
    } else if (a == "--seeds-dir") {
      seeds_dir = v;
    } else if (a == "--json") {
      json_path = v;
    } else {
      ok = false;
    }
    if (!ok) return Usage();
  }
  std::string error;
  const trainctl::fuzz::Seeds seeds = trainctl::fuzz::LoadSeeds(seeds_dir, &error);
  if (!error.empty()) {
    std::cerr << "seeds: " << error << "\n";
    return 1;
  }

  if (only_episode >= 0) {  // replay one episode in this process
    FuzzStats s;
    if (episode_seed == 0) episode_seed = trainctl::fuzz::EpisodeSeed(seed, only_episode);
    trainctl::fuzz::RunEpisode(episode_seed, seeds,
                               std::numeric_limits<int64_t>::max(), s);
    std::cout << "episode seed " << episode_seed << ": " << s.requests << " requests, "
              << s.violations << " violations\n";
    for (const auto& [k, n] : s.known_issues) std::cout << "  known issue " << k << "\n";
    for (const auto& v : s.violation_samples) std::cout << "  " << v << "\n";
    return s.violations == 0 ? 0 : 1;
  }

  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  g_shared = new (mem) Shared{};

  const auto t0 = std::chrono::steady_clock::now();
  FuzzStats total;
  std::vector<std::string> crashes;
  int64_t next_episode = 0;
  while (total.requests < requests) {
    g_shared->episode = next_episode;
    g_shared->requests = total.requests;
    g_shared->violations = total.violations;
    g_base_requests = total.requests;
    g_base_violations = total.violations;
    int fds[2];
    if (pipe(fds) != 0) {
      std::perror("pipe");
      return 1;
    }
    std::cout.flush();
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      FuzzStats s = trainctl::fuzz::Run(seed, seeds, requests - total.requests,
                                        next_episode, &OnEpisode);
      g_shared->requests = g_base_requests + s.requests;
      g_shared->violations = g_base_violations + s.violations;
      WriteStats(fds[1], s);
      close(fds[1]);
      _exit(0);
    }
    close(fds[1]);
    FuzzStats child;
    ReadStats(fds[0], child);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    total.episodes += child.episodes;
    for (const auto& [op, n] : child.ops) total.ops[op] += n;
    for (const auto& [k, n] : child.known_issues) total.known_issues[k] += n;
    for (const auto& [k, n] : child.job_end_states) total.job_end_states[k] += n;
    for (const auto& [k, v] : child.known_issue_first) total.known_issue_first.emplace(k, v);
    for (const auto& v : child.violation_samples) {
      if (total.violation_samples.size() < 20) total.violation_samples.push_back(v);
    }
    total.requests = g_shared->requests;
    total.violations = g_shared->violations;
    if (WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0)) {
      const int64_t e = g_shared->episode;
      const std::string what =
          WIFSIGNALED(status) ? absl::StrCat("signal ", WTERMSIG(status))
                              : absl::StrCat("exit ", WEXITSTATUS(status));
      crashes.push_back(absl::StrCat("episode ", e, " (", what, "; replay: --seed ", seed,
                                     " --episode ", e, ")"));
      std::cout << "CRASH in episode " << e << ": " << what << "\n";
      total.episodes += 1;
      total.requests += 1;  // at least the request that crashed
      next_episode = e + 1;
    } else {
      break;
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::cout << "requests tried: " << total.requests << "\n"
            << "episodes: " << total.episodes << "\n"
            << "invariant violations: " << total.violations << "\n"
            << "crashes: " << crashes.size() << "\n"
            << "seconds: " << secs << " (" << static_cast<int64_t>(total.requests / secs)
            << " requests/s)\n";
  for (const auto& [op, n] : total.ops) std::cout << "  " << op << ": " << n << "\n";
  for (const auto& [k, n] : total.job_end_states) std::cout << "  jobs ending " << k << ": " << n << "\n";
  for (const auto& [k, n] : total.known_issues) {
    std::cout << "known issue " << k << ": " << n << " episodes (first: "
              << total.known_issue_first[k] << ")\n";
  }
  for (const auto& v : total.violation_samples) std::cout << "VIOLATION " << v << "\n";
  for (const auto& c : crashes) std::cout << "CRASH " << c << "\n";

  if (!json_path.empty()) {
    google::protobuf::Struct out;
    auto& f = *out.mutable_fields();
    f["tool"].set_string_value("trainctl-fuzz-requests");
    f["seed"].set_number_value(static_cast<double>(seed));
    f["requests_asked"].set_number_value(static_cast<double>(requests));
    f["requests_tried"].set_number_value(static_cast<double>(total.requests));
    f["episodes"].set_number_value(static_cast<double>(total.episodes));
    f["invariant_violations"].set_number_value(static_cast<double>(total.violations));
    f["crashes"].set_number_value(static_cast<double>(crashes.size()));
    f["seconds"].set_number_value(secs);
    f["requests_per_second"].set_number_value(total.requests / secs);
    f["hardware_threads"].set_number_value(std::thread::hardware_concurrency());
    f["seed_files"].set_number_value(static_cast<double>(
        seeds.specs.size() + seeds.nodes.size() + seeds.agent_messages.size()));
    auto& ops = *f["requests_per_operation"].mutable_struct_value()->mutable_fields();
    for (const auto& [op, n] : total.ops) ops[op].set_number_value(static_cast<double>(n));
    auto& known = *f["known_issue_episodes"].mutable_struct_value()->mutable_fields();
    for (const auto& [k, n] : total.known_issues) known[k].set_number_value(static_cast<double>(n));
    auto& first = *f["known_issue_first_seen"].mutable_struct_value()->mutable_fields();
    for (const auto& [k, v] : total.known_issue_first) first[k].set_string_value(v);
    auto& states = *f["jobs_by_end_state"].mutable_struct_value()->mutable_fields();
    for (const auto& [k, n] : total.job_end_states) states[k].set_number_value(static_cast<double>(n));
    auto* samples = f["violation_samples"].mutable_list_value();
    for (const auto& v : total.violation_samples) samples->add_values()->set_string_value(v);
    auto* cr = f["crash_episodes"].mutable_list_value();
    for (const auto& c : crashes) cr->add_values()->set_string_value(c);
    std::string json;
    google::protobuf::util::JsonPrintOptions opts;
    opts.add_whitespace = true;
    if (!google::protobuf::util::MessageToJsonString(out, &json, opts).ok()) {
      std::cerr << "cannot print JSON\n";
      return 1;
    }
    std::ofstream(json_path) << json;
  }
  return total.violations == 0 && crashes.empty() ? 0 : 1;
}
