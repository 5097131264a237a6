#ifndef TRAINCTL_TESTS_SIM_CLUSTER_SIM_H_
#define TRAINCTL_TESTS_SIM_CLUSTER_SIM_H_

// Deterministic simulation of a whole cluster (FoundationDB's simulation
// testing, TigerBeetle's VOPR): the real coordinator core (coordinator.h, the
// real scheduler, the memory or the SQLite state store) against N simulated
// agents on a FakeClock, every step drawn from one seed. After every event
// the global invariants are checked (tests/sim/README.md lists them):
//
//   - no GPU's memory is over-committed, counting every process the agents
//     really run (job ranks, pre-flight probes, ranks still in their stop
//     grace): a gang rank or a whole-GPU experiment reserves the whole GPU,
//     so two jobs can never share it;
//   - a gang is all-or-nothing: placed with all its ranks, RUNNING only while
//     no rank of the attempt failed;
//   - a final job never changes; every acked job exists exactly once;
//   - no live task on a node the coordinator holds lost, and an agent that
//     fences runs nothing once that node is lost;
//   - a second agent under a live node's name is refused (ALREADY_EXISTS);
//     reports an agent makes about another node's tasks change nothing;
//   - a task log file is written by one task of one cluster only;
//   - a rank gets only its own job attempt's ncclUniqueId, and another job's
//     token opens no rendezvous;
//   - no illegal state transition (Stats().illegal_transitions stays 0);
//   - nothing is placed on a node an admin drained or took down (a gang's
//     ranks may still start where its pre-flight, placed before, passed,
//     and a node's own verify job runs there);
//   - at the end (faults healed, work allowed to finish), every job is final
//     or PENDING with a reason.
//
// A run is a list of events (type + two random parameters) drawn from the
// seed up front; each event is interpreted against the state at its turn
// ("cancel job #p of the acked ones"), so any sublist is a valid run too.
// That is what makes shrinking work: Shrink() removes events while the same
// invariant still fails, down to a short list that replays exactly
// (FormatScenario / ParseScenario give it a text form). The simulation is
// single-threaded: with the SQLite store it waits for every write after each
// event (Coordinator::WaitForWrites), so no commit thread reorders anything.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainctl::sim {

// Kinds of event, in the order of their default weights (EventWeights).
enum class EventType : int {
  kSubmitExperiment = 0,
  kSubmitGang,
  kSubmitSweep,
  kCancel,
  kDeliver,           // an agent reads the messages sent to it
  kTaskExit,          // a job's process exits (0, an error, or out of memory)
  kProbeExit,         // a pre-flight probe finishes (passes or fails)
  kAdvance,           // time passes: heartbeats, leases, stop graces, Tick()
  kPartition,         // an agent is cut off from the coordinator
  kHeal,              // a cut-off agent's stream breaks and it registers again
  kReconnect,         // an agent's stream breaks; it registers again at once
  kShrinkGpus,        // an agent registers again with one GPU fewer
  kImpostor,          // a second agent registers under a live node's name
  kForgedReport,      // an agent reports on another node's task
  kCoordinatorCrash,  // the coordinator dies and restarts over its store
  kNewCluster,        // a new coordinator on a new store; agents keep their disk
  kRendezvous,        // a rank publishes or fetches its ncclUniqueId, or a
                      // rank of another job tries to fetch it with its own token
  kSubmitArray,       // a job array (SubmitJobs), maybe with a %P limit
  kNodeAdmin,         // an admin drains (maybe with a deadline), downs or
                      // resumes (maybe --verify) a node
  kSubmitDependent,   // jobs with dependencies: a chain, a diamond, any-of,
                      // singleton, or an array after an array (afterok or
                      // aftercorr)
  kCount,
};

// The event's name as FormatEvents writes it ("submit_gang", ...).
const char* EventName(EventType type);

struct Event {
  EventType type = EventType::kAdvance;
  // Random parameters the event interprets against the state at its turn.
  uint64_t a = 0;
  uint64_t b = 0;
};

// The stores a run may use (SimOptions::store, a scenario's "store" line).
inline constexpr const char* kStores[] = {"memory", "queue", "sqlite"};

struct SimOptions {
  // Which store the coordinator runs on: "memory" (every write durable at
  // once), "queue" (writes wait in a commit queue as behind SqliteStateStore's
  // group commit, and a crash loses what was not committed, as kill -9 does:
  // CommitQueueStore) or "sqlite" (a file under sqlite_dir,
  // synchronous=NORMAL; reopened after a crash, which commits its queue
  // first).
  std::string store = "memory";
  std::string sqlite_dir = "/tmp";
  // Simulated agents (nodes) at the start, and GPUs each.
  int min_nodes = 2;
  int max_nodes = 5;
  int max_gpus_per_node = 4;
  // Unlike clusters: each node draws a GPU model (16 to 141 GiB: T4, A10,
  // A100 40GB, L40S, H100 80GB, H200) for its GPUs, except on a quarter of
  // the seeds, whose nodes are all H100 80 GiB. False: every seed's nodes
  // are H100 80 GiB.
  bool unlike_gpus = true;
  // After the events: heal every fault and let work finish (then check that
  // every job ended or waits with a reason).
  bool drain = true;
  // Stop at the first violation (the shrinker does; a long run counts them).
  bool stop_at_first_violation = true;
};

struct SimResult {
  int64_t events = 0;
  // Events run per type name.
  std::map<std::string, int64_t> events_by_type;
  // Jobs acked, by the state they ended the run in.
  std::map<std::string, int64_t> job_end_states;
  // Of those, the jobs submitted with a dependency, by end state; the ones
  // ended because their dependency could never be met counted apart, as
  // "CANCELLED (dependency never met)".
  std::map<std::string, int64_t> dependency_end_states;
  // Processes the agents started (job ranks and probes).
  int64_t processes_started = 0;
  int64_t preflight_runs = 0;
  // Rendezvous fetches answered with the right ncclUniqueId.
  int64_t rendezvous_fetched = 0;
  int64_t preemptions = 0;
  // Queued writes the crashes lost (store "queue").
  int64_t writes_lost = 0;
  // Invariant violations, each "step N (event): invariant: detail".
  std::vector<std::string> violations;
  // The invariant name of the first violation ("" when none).
  std::string first_invariant;
  // Index of the event at which the first violation showed (-1: none, or
  // only at the final drain).
  int64_t first_violation_event = -1;
};

// The events seed `seed` draws: `count` of them, a mix weighted towards
// submissions, deliveries, exits and time, faults rarer.
std::vector<Event> GenerateEvents(uint64_t seed, int64_t count);

// Runs `events` over a fresh simulated cluster whose shape (nodes, GPUs,
// which agents fence) comes from `seed`. Deterministic: the same seed,
// events and options give the same result.
SimResult RunEvents(uint64_t seed, const std::vector<Event>& events,
                    const SimOptions& options);

// GenerateEvents + RunEvents.
SimResult RunSeed(uint64_t seed, int64_t count, const SimOptions& options);

// A shorter list of events that still fails with `invariant` (the name in
// SimResult::first_invariant): removes chunks of halving size while the run
// still fails so (delta debugging, Zeller's ddmin, simplified), at most
// `max_runs` runs.
std::vector<Event> Shrink(uint64_t seed, std::vector<Event> events,
                          const std::string& invariant, const SimOptions& options,
                          int max_runs = 2000);

// A run to replay: the seed that shapes the cluster and the events.
struct Scenario {
  uint64_t seed = 0;
  std::vector<Event> events;
  // The store it fails on (SimOptions::store); "memory" unless a "store
  // <name>" line says otherwise.
  std::string store = "memory";
};

// Text form of a scenario: a line "seed <n>", a line "store <name>" when the
// store is not "memory", then one line per event, "<name> <a> <b>".
// ParseScenario reads it back (blank lines and lines starting with '#' are
// skipped). Errors: INVALID_ARGUMENT naming the line that does not parse (an
// unknown store included), or a missing seed line.
std::string FormatScenario(const Scenario& scenario);
absl::StatusOr<Scenario> ParseScenario(const std::string& text);

}  // namespace trainctl::sim

#endif  // TRAINCTL_TESTS_SIM_CLUSTER_SIM_H_
