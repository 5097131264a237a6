// The request fuzzer's short deterministic run for CI (the long run is
// trainctl-fuzz-requests, tests/fuzz/README.md): 20 000 random requests over
// the validation, the coordinator core and the scheduler, with the invariants
// checked after each. A crash fails the test binary; a violation fails the
// test and names the episode seed and step to replay.

#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_spec.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/state_store.h"
#include "gtest/gtest.h"
#include "tests/fuzz/request_fuzzer.h"

namespace trainctl::fuzz {
namespace {

Seeds LoadTestSeeds() {
  std::string error;
  Seeds seeds = LoadSeeds(TRAINCTL_FUZZ_SEEDS_DIR, &error);
  EXPECT_EQ(error, "");
  return seeds;
}

TEST(RequestFuzzTest, SeedsParse) {
  const Seeds seeds = LoadTestSeeds();
  EXPECT_GE(seeds.specs.size(), 4u);
  EXPECT_GE(seeds.nodes.size(), 2u);
  EXPECT_GE(seeds.agent_messages.size(), 2u);
}

TEST(RequestFuzzTest, ShortRun_NoViolations) {
  const Seeds seeds = LoadTestSeeds();
  constexpr int64_t kRequests = 20'000;
  const FuzzStats stats = fuzz::Run(/*run_seed=*/20261122, seeds, kRequests);
  EXPECT_EQ(stats.requests, kRequests);
  EXPECT_EQ(stats.violations, 0);
  for (const std::string& v : stats.violation_samples) ADD_FAILURE() << v;
  // A fixed bug seen again is a violation (counted above) and named here.
  for (const auto& [bug, n] : stats.known_issues) {
    ADD_FAILURE() << "fixed bug " << bug << " is back: " << n << " episodes (first: "
                  << stats.known_issue_first.at(bug) << ")";
  }
  // Every kind of request was tried.
  for (const char* op : {"SubmitJob", "RegisterAgent", "HandleAgentMessage/reply",
                         "HandleAgentMessage/random", "CancelJob", "WaitJobAsync",
                         "PublishUniqueId", "FetchUniqueIdAsync", "FetchUniqueIdsAsync", "Tick",
                         "Schedule", "ValidateJobSpec"}) {
    EXPECT_GT(stats.ops.count(op) ? stats.ops.at(op) : 0, 0) << op;
  }
}

TEST(RequestFuzzTest, EpisodesAreDeterministic) {
  const Seeds seeds = LoadTestSeeds();
  FuzzStats a, b;
  RunEpisode(EpisodeSeed(7, 3), seeds, 300, a);
  RunEpisode(EpisodeSeed(7, 3), seeds, 300, b);
  EXPECT_EQ(a.requests, b.requests);
  EXPECT_EQ(a.ops, b.ops);
}

// ------------------------------------------------------------ known bugs

class RecordingConnection : public coord::AgentConnection {
 public:
  void Send(v1::CoordinatorMessage msg) override { sent.push_back(std::move(msg)); }
  void Close(const absl::Status&) override {}
  std::vector<v1::CoordinatorMessage> sent;
};

v1::RegisterNode OneGpuNode(int64_t memory_bytes) {
  v1::RegisterNode reg;
  v1::Node* n = reg.mutable_node();
  n->set_name("n0");
  n->set_address("n0.example");
  n->set_cpu_count(8);
  n->set_port_min(29500);
  n->set_port_max(29500);
  v1::Gpu* g = n->add_gpus();
  g->set_index(0);
  g->set_uuid("GPU-n0-0");
  g->set_memory_total_bytes(memory_bytes);
  // One agent process: a second registration is it coming back on a new
  // stream (RegisterNode.agent_instance_id), not a second agent.
  reg.set_agent_instance_id("agent-n0");
  return reg;
}

// FIXED BUG, shrunk inventory (a regression test now), found by the fuzzer in
// its first 20 000 requests
// (reregister_shrinks_gpu_memory_below_reservations; the run prints the
// episode seed where it first showed: replay with `trainctl-fuzz-requests
// --episode-seed X`, TRAINCTL_FUZZ_TRACE=1 prints the requests). RegisterAgent
// (coordinator/coordinator.cc, Coordinator::RegisterAgent) accepts a new
// inventory for a node that has live tasks and keeps their reservations as
// they were: when a GPU comes back with less memory (agent restarted with
// another --fake-gpus, MIG turned on, a swapped card) while the agent reports
// the task still running, the GPU's reservations exceed its memory
// (ListNodes: 80 GiB reserved on a 40 GiB GPU), and the scheduler's snapshot
// carries reserved_bytes > memory_total_bytes. Fixed: the core
// stops the tasks that no longer fit and counts them as lost.
TEST(RequestFuzzKnownIssueTest,
     FixedIssue_ReregisterWithLessGpuMemory_TasksThatNoLongerFitAreStopped) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  FakeClock clock;
  coord::MemoryStateStore store;
  auto core = coord::Coordinator::Create({}, &store, &clock);
  ASSERT_TRUE(core.ok());
  RecordingConnection first, second;
  ASSERT_TRUE((*core)->RegisterAgent(OneGpuNode(80 * kGiB), &first).ok());
  v1::JobSpec spec;
  spec.add_command("python");
  // A memory-sized experiment: 60 GiB. (A whole-GPU one holds the GPU
  // whole whatever its size, so a smaller GPU under the same index still
  // holds it.)
  spec.set_gpu_memory_bytes(60 * kGiB);
  auto id = (*core)->SubmitJob(spec, "");
  ASSERT_TRUE(id.ok());
  v1::RegisterNode again = OneGpuNode(40 * kGiB);
  v1::TaskRef* running = again.add_running_tasks();
  running->set_job_id(*id);
  running->set_attempt(0);
  running->set_rank(0);
  running->set_pid(100);
  ASSERT_TRUE((*core)->RegisterAgent(again, &second).ok());

  for (const v1::NodeView& v : (*core)->ListNodes()) {
    for (int i = 0; i < v.gpu_tasks_size(); ++i) {
      int64_t reserved = 0;
      for (const auto& t : v.gpu_tasks(i).tasks()) reserved += t.reserved_bytes();
      EXPECT_LE(reserved, v.node().gpus(i).memory_total_bytes())
          << v.node().name() << "/GPU " << v.node().gpus(i).index();
    }
  }
  // The task that no longer fits is stopped, and its job fails saying why.
  bool stopped = false;
  for (const auto& m : second.sent) stopped = stopped || m.has_stop_task();
  EXPECT_TRUE(stopped);
  auto job = (*core)->GetJob(*id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job->reason().find("no longer fits"), std::string::npos) << job->reason();
}

// FIXED (a regression test now), found by the fuzzer as
// restart_after_failed_writes_double_books: a task's end is kept in memory
// but its store write fails; its GPU goes to a later job, whose placement is
// stored. A restart loaded both records as live on the one GPU (160 GiB
// reserved on 80 GiB) until the agent re-registered. Fixed: the load keeps
// the later placement (Job.placement_seq) and takes the earlier task as
// ended, saying why.
TEST(RequestFuzzKnownIssueTest,
     FixedIssue_RestartAfterFailedWrites_LaterPlacementKeepsTheGpu) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  FakeClock clock;
  coord::MemoryStateStore store;
  int64_t a = 0, b = 0;
  {
    auto core = coord::Coordinator::Create({}, &store, &clock);
    ASSERT_TRUE(core.ok());
    RecordingConnection conn;
    ASSERT_TRUE((*core)->RegisterAgent(OneGpuNode(80 * kGiB), &conn).ok());
    v1::JobSpec spec;
    spec.add_command("python");  // a whole-GPU experiment: reserves 80 GiB
    auto id = (*core)->SubmitJob(spec, "a");
    ASSERT_TRUE(id.ok());
    a = *id;
    // Job a runs, then exits; that exit's store write fails: the store
    // still says RUNNING.
    v1::AgentMessage msg;
    v1::TaskStatus* st = msg.mutable_task_status();
    st->mutable_task()->set_job_id(a);
    st->set_state(v1::TASK_STATE_RUNNING);
    ASSERT_TRUE((*core)->HandleAgentMessage("n0", &conn, msg).ok());
    store.SetFailing(true);
    st->set_state(v1::TASK_STATE_EXITED);
    ASSERT_TRUE((*core)->HandleAgentMessage("n0", &conn, msg).ok());
    store.SetFailing(false);
    // Job b takes the freed GPU; its placement is stored.
    id = (*core)->SubmitJob(spec, "b");
    ASSERT_TRUE(id.ok());
    b = *id;
    ASSERT_EQ((*core)->GetJob(b)->state(), v1::JOB_STATE_SCHEDULED);
  }
  // Restart (as after kill -9) over the store.
  auto core = coord::Coordinator::Create({}, &store, &clock);
  ASSERT_TRUE(core.ok());
  const std::vector<v1::NodeView> nodes = (*core)->ListNodes();
  ASSERT_EQ(nodes.size(), 1u);
  ASSERT_EQ(nodes[0].gpu_tasks_size(), 1);
  ASSERT_EQ(nodes[0].gpu_tasks(0).tasks_size(), 1);
  EXPECT_EQ(nodes[0].gpu_tasks(0).tasks(0).job_id(), b);
  EXPECT_EQ((*core)->GetJob(b)->state(), v1::JOB_STATE_SCHEDULED);
  auto job_a = (*core)->GetJob(a);
  ASSERT_TRUE(job_a.ok());
  EXPECT_EQ(job_a->state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job_a->reason().find("its end was not stored"), std::string::npos)
      << job_a->reason();
}

// FIXED BUG, failed register applied (a regression test now), found by the
// fuzzer (classified as
// failed_register_still_applies_inventory). Coordinator::RegisterAgent
// (coordinator/coordinator.cc, the block after the argument checks) replaces
// the node's inventory in memory (e.node = n), marks it READY and closes the
// older connection before store_->PutNode(); when PutNode fails it returns
// UNAVAILABLE but keeps the new inventory (and skips the reconciliation of the
// running tasks). The caller is told the registration failed, yet ListNodes
// and the scheduler use the inventory it carried.
TEST(RequestFuzzKnownIssueTest,
     FixedIssue_FailedRegister_ChangesNothing) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  FakeClock clock;
  coord::MemoryStateStore store;
  auto core = coord::Coordinator::Create({}, &store, &clock);
  ASSERT_TRUE(core.ok());
  RecordingConnection first, second;
  ASSERT_TRUE((*core)->RegisterAgent(OneGpuNode(80 * kGiB), &first).ok());
  store.SetFailing(true);
  EXPECT_EQ((*core)->RegisterAgent(OneGpuNode(40 * kGiB), &second).code(),
            absl::StatusCode::kUnavailable);
  const std::vector<v1::NodeView> nodes = (*core)->ListNodes();
  ASSERT_EQ(nodes.size(), 1u);
  ASSERT_EQ(nodes[0].node().gpus_size(), 1);
  EXPECT_EQ(nodes[0].node().gpus(0).memory_total_bytes(), 80 * kGiB)
      << "the failed registration's inventory was applied";
}

// FIXED BUG, zero reservation (a regression test now), found by the fuzzer
// (classified as
// tiny_gpu_fraction_reserves_zero_bytes). ValidateJobSpec accepts any
// gpu_fraction in (0, 1]; sched::ReservationBytes
// (coordinator/sched/scheduler.cc, the kTolerance rounding) rounds
// fraction x memory to the nearest whole byte when within 1e-3 of it, so
// gpu_fraction 1e-15 on an 80 GiB GPU (8.6e-5 bytes) reserves 0 bytes, where
// scheduler.h promises ceil(gpu_fraction * T) (>= 1). The experiment is placed
// with reserved_bytes_per_gpu 0. No overlap follows today (IsWholeFree also
// needs task_count == 0, so the gang below waits), but the job's memory is not
// accounted and scheduler.h's "reserved_bytes == 0 is whole and free" no
// longer holds. (A floor of 1 byte, or a minimum fraction in ValidateJobSpec.)
TEST(RequestFuzzKnownIssueTest, FixedIssue_TinyGpuFraction_RejectedAndNeverZeroBytes) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  v1::JobSpec tiny;
  tiny.add_command("python");
  tiny.set_gpu_fraction(1e-15);
  const absl::Status s = coord::ValidateJobSpec(tiny);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("spec.gpu_fraction"), absl::string_view::npos) << s;
  tiny.set_gpu_fraction(coord::kMinGpuFraction);
  EXPECT_TRUE(coord::ValidateJobSpec(tiny).ok());
  // The scheduler charges at least one byte for any share, whatever it is
  // given.
  sched::JobRequest req;
  req.gpu_fraction = 1e-15;
  EXPECT_EQ(sched::ReservationBytes(req, 80 * kGiB), 1);
}

// FIXED BUG, INT32_MIN priority (a regression test now), found by the fuzzer
// under UBSan (build with -fsanitize=address,undefined;
// "coordinator/job_spec.cc: runtime error: negation of -2147483648 cannot be
// represented in type 'int'"), classified as
// priority_int32_min_passes_validation. ValidateJobSpec checks
// `std::abs(spec.priority()) > kMaxPriority`; std::abs(INT32_MIN) is undefined
// and returns INT32_MIN in practice, so priority -2147483648 is accepted (the
// queue then orders on it). Compare in int64, or check both bounds.
TEST(RequestFuzzKnownIssueTest, FixedIssue_PriorityInt32Min_Rejected) {
  v1::JobSpec spec;
  spec.add_command("python");
  spec.set_priority(std::numeric_limits<int32_t>::min());
  const absl::Status s = coord::ValidateJobSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace trainctl::fuzz
