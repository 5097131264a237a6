#ifndef TRAINCTL_TESTS_FUZZ_REQUEST_FUZZER_H_
#define TRAINCTL_TESTS_FUZZ_REQUEST_FUZZER_H_

// A random mutator over the request protos that drives the validation, the
// coordinator core and the scheduler, and checks invariants after every
// request (tests/fuzz/README.md). Deterministic: an episode is a function of
// its seed alone (std::mt19937_64, no absl::BitGen), so a violation or crash
// is replayed with RunEpisode(seed).
//
// One episode: a fresh Coordinator over a MemoryStateStore and a FakeClock,
// then a sequence of random requests (SubmitJob, RegisterAgent,
// AgentDisconnected, HandleAgentMessage, CancelJob, GetJob, ListJobs,
// WaitJobAsync, GetLogsAsync, PublishUniqueId, FetchUniqueIdAsync, Tick,
// Stats, ValidateJobSpec/KindOf/ToJobRequest, Scheduler::Schedule over a
// random snapshot). Random protos are built field by field through protobuf
// reflection, from scratch or by mutating the seeds (text protos).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::fuzz {

// Hand-made interesting requests, the starting points of mutation.
struct Seeds {
  std::vector<v1::JobSpec> specs;
  std::vector<v1::RegisterNode> nodes;
  std::vector<v1::AgentMessage> agent_messages;
};

// Loads `dir`/spec_*.textproto (JobSpec), node_*.textproto (RegisterNode) and
// agent_*.textproto (AgentMessage). Errors go to `error` (a file that does
// not parse); returns what parsed.
Seeds LoadSeeds(const std::string& dir, std::string* error);

struct FuzzStats {
  int64_t requests = 0;
  int64_t episodes = 0;
  int64_t violations = 0;
  // Requests per operation name.
  std::map<std::string, int64_t> ops;
  // Episodes ended by a known core bug, by name (not counted as violations;
  // each has a DISABLED_ reproducer in request_fuzz_test.cc).
  std::map<std::string, int64_t> known_issues;
  // Where each known issue first showed ("episode seed X step Y (op)").
  std::map<std::string, std::string> known_issue_first;
  // Accepted jobs by their state at the end of their episode (how deep the
  // run went).
  std::map<std::string, int64_t> job_end_states;
  // The first few violations, each naming the episode seed and step.
  std::vector<std::string> violation_samples;

  void Merge(const FuzzStats& other);
};

// Seed of episode `index` of a run seeded with `run_seed`.
uint64_t EpisodeSeed(uint64_t run_seed, int64_t index);

// Runs one episode of at most `max_requests` requests (the episode picks its
// own length, 1 to 400, then stops at `max_requests`); adds to `stats`.
void RunEpisode(uint64_t episode_seed, const Seeds& seeds, int64_t max_requests,
                FuzzStats& stats);

// Runs episodes 0, 1, ... of `run_seed` until `requests` requests are done.
// `on_episode(index)` (optional) is called before each episode starts.
FuzzStats Run(uint64_t run_seed, const Seeds& seeds, int64_t requests,
              int64_t first_episode = 0,
              void (*on_episode)(int64_t index, const FuzzStats& so_far) = nullptr);

}  // namespace trainctl::fuzz

#endif  // TRAINCTL_TESTS_FUZZ_REQUEST_FUZZER_H_
