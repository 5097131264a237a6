#include "coordinator/node_admin.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

v1::UpdateNodesRequest Req(v1::NodeAction action, const std::string& reason = "disk swap",
                           int64_t deadline_s = 0) {
  v1::UpdateNodesRequest r;
  r.add_nodes("node-a");
  r.set_action(action);
  r.set_reason(reason);
  r.set_deadline_s(deadline_s);
  return r;
}

TEST(NodeAdminTest, Validate_NamesTheFieldOfEachMistake) {
  EXPECT_TRUE(ValidateUpdateNodes(Req(v1::NODE_ACTION_DRAIN)).ok());
  v1::UpdateNodesRequest none = Req(v1::NODE_ACTION_DRAIN);
  none.clear_nodes();
  EXPECT_THAT(ValidateUpdateNodes(none).message(), HasSubstr("nodes:"));
  v1::UpdateNodesRequest twice = Req(v1::NODE_ACTION_DRAIN);
  twice.add_nodes("node-a");
  EXPECT_THAT(ValidateUpdateNodes(twice).message(), HasSubstr("nodes[1]: node node-a is named twice"));
  EXPECT_THAT(ValidateUpdateNodes(Req(v1::NODE_ACTION_UNSPECIFIED)).message(), HasSubstr("action:"));
  // A drain or down says why; a resume need not.
  EXPECT_THAT(ValidateUpdateNodes(Req(v1::NODE_ACTION_DRAIN, "")).message(), HasSubstr("reason:"));
  EXPECT_THAT(ValidateUpdateNodes(Req(v1::NODE_ACTION_DOWN, "")).message(), HasSubstr("reason:"));
  EXPECT_TRUE(ValidateUpdateNodes(Req(v1::NODE_ACTION_RESUME, "")).ok());
  EXPECT_THAT(ValidateUpdateNodes(Req(v1::NODE_ACTION_DRAIN, "x", -1)).message(),
              HasSubstr("deadline_s: -1"));
  EXPECT_THAT(ValidateUpdateNodes(Req(v1::NODE_ACTION_DOWN, "x", 60)).message(),
              HasSubstr("deadline_s: only a drain"));
  v1::UpdateNodesRequest verify = Req(v1::NODE_ACTION_DRAIN);
  verify.set_verify(true);
  EXPECT_THAT(ValidateUpdateNodes(verify).message(), HasSubstr("verify:"));
  for (const auto& r : {none, twice, verify}) {
    EXPECT_EQ(ValidateUpdateNodes(r).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(NodeAdminTest, DrainWithDeadline_DrainingUntilEmpty_DeadlinePassesOnTime) {
  v1::Node n;
  n.set_name("node-a");
  *n.mutable_admin() = AdminAfter(Req(v1::NODE_ACTION_DRAIN, "disk swap", 1800), "alice", kT0);
  EXPECT_FALSE(InService(n));
  EXPECT_EQ(n.admin().by(), "alice");
  EXPECT_EQ(ServiceStateOf(n, /*holds_tasks=*/true), v1::NODE_SERVICE_STATE_DRAINING);
  EXPECT_EQ(ServiceStateOf(n, /*holds_tasks=*/false), v1::NODE_SERVICE_STATE_DRAINED);
  EXPECT_FALSE(DrainDeadlinePassed(n, kT0 + absl::Seconds(1799)));
  EXPECT_TRUE(DrainDeadlinePassed(n, kT0 + absl::Seconds(1800)));
  EXPECT_EQ(DescribeAdmin(n, kT0 + absl::Minutes(10)),
            "DRAIN by alice 10m ago: disk swap, deadline in 20m");
  EXPECT_EQ(DescribeAdmin(n, kT0 + absl::Hours(1)),
            "DRAIN by alice 1h ago: disk swap, deadline passed");
  EXPECT_THAT(RequeueReason(n), HasSubstr("node node-a was drained by alice (disk swap) and "
                                          "its drain deadline passed"));
  EXPECT_THAT(RequeueReason(n), HasSubstr("no restart used"));
}

TEST(NodeAdminTest, DrainWithoutDeadline_NeverPasses_ResumeClears_DownIsDown) {
  v1::Node n;
  n.set_name("node-a");
  *n.mutable_admin() = AdminAfter(Req(v1::NODE_ACTION_DRAIN), "", kT0);
  EXPECT_EQ(n.admin().by(), "anonymous");
  EXPECT_FALSE(DrainDeadlinePassed(n, kT0 + absl::Hours(24 * 365)));
  *n.mutable_admin() = AdminAfter(Req(v1::NODE_ACTION_RESUME, ""), "ops", kT0);
  EXPECT_TRUE(InService(n));
  EXPECT_EQ(ServiceStateOf(n, true), v1::NODE_SERVICE_STATE_IN_SERVICE);
  EXPECT_EQ(DescribeAdmin(n, kT0), "");
  *n.mutable_admin() = AdminAfter(Req(v1::NODE_ACTION_DOWN, "PSU"), "ops", kT0);
  EXPECT_EQ(ServiceStateOf(n, false), v1::NODE_SERVICE_STATE_DOWN);
  EXPECT_FALSE(DrainDeadlinePassed(n, kT0 + absl::Hours(1)));
  EXPECT_EQ(DescribeAdmin(n, kT0 + absl::Seconds(5)), "DOWN by ops 5s ago: PSU");
  EXPECT_THAT(RequeueReason(n), HasSubstr("node node-a was set DOWN by ops (PSU)"));
}

TEST(NodeAdminTest, AutoDrain_DrainsOnTheNthExclusionWithinTheWindowOnly) {
  AutoDrain auto_drain(3, absl::Hours(1));
  EXPECT_FALSE(auto_drain.OnExclusion("b", "rank 1 errored", kT0).has_value());
  EXPECT_FALSE(auto_drain.OnExclusion("b", "rank 1 errored", kT0 + absl::Minutes(10)).has_value());
  // The first one falls out of the window: two within the hour, no drain.
  EXPECT_FALSE(auto_drain.OnExclusion("b", "slow", kT0 + absl::Minutes(61)).has_value());
  EXPECT_EQ(auto_drain.Count("b", kT0 + absl::Minutes(61)), 2);
  // Another node's exclusions do not count for b.
  EXPECT_FALSE(auto_drain.OnExclusion("c", "slow", kT0 + absl::Minutes(62)).has_value());
  std::optional<std::string> why = auto_drain.OnExclusion("b", "rank 0 slow", kT0 + absl::Minutes(63));
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(*why, HasSubstr("excluded by pre-flights 3 times within 1h; last: rank 0 slow"));
  // Counting starts over after a drain.
  EXPECT_EQ(auto_drain.Count("b", kT0 + absl::Minutes(63)), 0);
  const v1::NodeAdmin a = AutomaticDrain(*why, kT0);
  EXPECT_TRUE(a.automatic());
  EXPECT_EQ(a.by(), "trainctl");
  EXPECT_EQ(a.state(), v1::NODE_ADMIN_STATE_DRAIN);
}

TEST(NodeAdminTest, MissingGpus_NamesTheGpusANodeNoLongerOffers) {
  v1::Node before;
  for (int i = 0; i < 3; ++i) {
    v1::Gpu* g = before.add_gpus();
    g->set_index(i);
    g->set_uuid(absl::StrCat("GPU-", i));
  }
  v1::Node after = before;
  EXPECT_EQ(MissingGpus(before, after), "");
  after.mutable_gpus()->DeleteSubrange(1, 1);
  EXPECT_EQ(MissingGpus(before, after), "GPU 1 (GPU-1)");
  // A new GPU is not a loss.
  EXPECT_EQ(MissingGpus(after, before), "");
}

TEST(NodeAdminTest, CanVerify_SaysWhatKeepsANodeFromBeingVerified) {
  v1::Node n;
  n.set_name("a");
  n.set_state(v1::NODE_STATE_READY);
  n.add_gpus()->set_index(0);
  VerifyFacts ok{/*connected=*/true, /*runs_probes=*/true, /*busy=*/false, 0};
  EXPECT_TRUE(CanVerify(n, ok).ok());
  VerifyFacts f = ok;
  f.connected = false;
  EXPECT_THAT(CanVerify(n, f).message(), HasSubstr("verify: node a is not connected"));
  f = ok;
  f.runs_probes = false;
  EXPECT_THAT(CanVerify(n, f).message(), HasSubstr("older than probe tasks"));
  v1::Node no_probe = n;
  no_probe.set_preflight_probe_error("program /x does not exist");
  EXPECT_THAT(CanVerify(no_probe, ok).message(), HasSubstr("cannot run its pre-flight probe: "
                                                           "program /x does not exist"));
  v1::Node verifying = n;
  verifying.mutable_admin()->set_verify_job_id(12);
  EXPECT_THAT(CanVerify(verifying, ok).message(), HasSubstr("verified already by job 12"));
  f = ok;
  f.busy = true;
  f.jobs_running = 2;
  EXPECT_EQ(CanVerify(n, f).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(CanVerify(n, f).message(), HasSubstr("still runs 2 job(s)"));
}

TEST(NodeAdminTest, AutoDrain_ZeroTurnsItOff) {
  AutoDrain off(0, absl::Hours(1));
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(off.OnExclusion("b", "x", kT0).has_value());
}

}  // namespace
}  // namespace trainctl::coord
