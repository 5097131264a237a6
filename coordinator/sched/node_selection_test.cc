// A job's node selection: the --constraint syntax, and what the scheduler
// does with GPU types, features, nodelists and exclusions (where jobs land,
// that a gang never mixes GPU types, what `why` names).

#include "coordinator/sched/node_selection.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/sched/testing/decision_of.h"
#include "coordinator/sched/testing/pass_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sched {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::trainctl::sched::testing::Experiment;
using ::trainctl::sched::testing::Gang;
using ::trainctl::sched::testing::GangOn;
using ::trainctl::sched::testing::NodeNames;
using ::trainctl::sched::testing::Of;

// Node `name` with `count` GPUs of `type` and `features`.
NodeState Typed(std::string name, int count, const std::string& type,
                std::vector<std::string> features = {}) {
  NodeState node = testing::Node(std::move(name), count);
  for (GpuState& gpu : node.gpus) gpu.gpu_type = type;
  node.features = std::move(features);
  return node;
}

FeatureConstraint Constraint(const std::string& text) {
  absl::StatusOr<FeatureConstraint> c = ParseFeatureConstraint(text);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.value_or(FeatureConstraint{});
}

// Both the indexed and the linear search must decide the same.
std::vector<SchedulerConfig> Configs() {
  SchedulerConfig indexed;
  SchedulerConfig linear;
  linear.linear_search = true;
  return {indexed, linear};
}

TEST(ParseFeatureConstraintTest, AcceptsAllOfAndAnyOf) {
  FeatureConstraint all = Constraint("ib&nvlink");
  EXPECT_EQ(all.op, FeatureConstraint::Op::kAll);
  EXPECT_THAT(all.features, ElementsAre("ib", "nvlink"));
  EXPECT_TRUE(all.SatisfiedBy({"nvlink", "ib", "ssd"}));
  EXPECT_FALSE(all.SatisfiedBy({"ib"}));

  FeatureConstraint any = Constraint(" a | b ");
  EXPECT_EQ(any.op, FeatureConstraint::Op::kAny);
  EXPECT_TRUE(any.SatisfiedBy({"b"}));
  EXPECT_FALSE(any.SatisfiedBy({"c"}));
  EXPECT_EQ(any.ToString(), "a|b");

  EXPECT_TRUE(Constraint("").empty());
  EXPECT_TRUE(Constraint("").SatisfiedBy({}));
}

TEST(ParseFeatureConstraintTest, RefusesMixedOperatorsEmptyTermsAndBadNames) {
  for (const char* bad : {"a&b|c", "ib&", "&&", "a||b", "IB", "a b", "x;y"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<FeatureConstraint> c = ParseFeatureConstraint(bad);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_THAT(ParseFeatureConstraint("a&b|c").status().message(),
              HasSubstr("mixes & and |"));
}

TEST(NodeSelectionSchedulerTest, GpuTypeLandsOnlyOnThatType) {
  ClusterSnapshot cluster;
  cluster.nodes = {Typed("a", 4, "a100"), Typed("h", 4, "h100")};
  for (const SchedulerConfig& config : Configs()) {
    SCOPED_TRACE(config.linear_search);
    JobRequest job = Gang(1, 2);
    job.constraints.gpu_types = {"h100"};
    JobRequest exp = Experiment(2, 0.5);
    exp.constraints.gpu_types = {"a100"};
    std::vector<Decision> d = Scheduler(config).Schedule(cluster, {job, exp});
    ASSERT_EQ(Of(d, 1).outcome, Outcome::kPlaced);
    EXPECT_THAT(NodeNames(Of(d, 1).placement), ElementsAre("h"));
    ASSERT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
    EXPECT_THAT(NodeNames(Of(d, 2).placement), ElementsAre("a"));
  }
}

TEST(NodeSelectionSchedulerTest, WaitsForItsTypeWhileAnotherTypeIsFree) {
  ClusterSnapshot cluster;
  cluster.nodes = {Typed("a", 4, "a100"), Typed("h", 4, "h100")};
  testing::AddRunning(cluster, 1, {0, 1, 2, 3}, 100);
  JobRequest job = Gang(1, 4);
  job.constraints.gpu_types = {"h100"};
  Scheduler scheduler;
  std::vector<Decision> d = scheduler.Schedule(cluster, {job});
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kRetryLater);
  EXPECT_THAT(Of(d, 1).reason, HasSubstr("node selection rules out 1 of 2"));

  std::optional<Explanation> e = scheduler.Explain(cluster, {job}, 1);
  ASSERT_TRUE(e.has_value());
  EXPECT_THAT(e->constraints,
              ElementsAre("--gpu-type h100: rules out a (a100)"));
  EXPECT_THAT(e->nodes, ::testing::Contains(HasSubstr(
                            "a: ruled out by --gpu-type h100 (has a100)")));
}

TEST(NodeSelectionSchedulerTest, PreferenceOrderTriesTheFirstTypeFirst) {
  ClusterSnapshot cluster;
  cluster.nodes = {Typed("a", 4, "a100"), Typed("h", 4, "h100")};
  for (const SchedulerConfig& config : Configs()) {
    JobRequest job = Gang(1, 4);
    job.constraints.gpu_types = {"h100", "a100"};
    std::vector<Decision> d = Scheduler(config).Schedule(cluster, {job});
    EXPECT_THAT(NodeNames(Of(d, 1).placement), ElementsAre("h"));
  }
  // The h100 node busy: the next type.
  testing::AddRunning(cluster, 1, {0}, 100);
  JobRequest job = Gang(1, 4);
  job.constraints.gpu_types = {"h100", "a100"};
  std::vector<Decision> d = Scheduler().Schedule(cluster, {job});
  ASSERT_EQ(Of(d, 1).outcome, Outcome::kPlaced);
  EXPECT_THAT(NodeNames(Of(d, 1).placement), ElementsAre("a"));
}

TEST(NodeSelectionSchedulerTest, GangNeverMixesTypesUnlessAllowed) {
  // 2 free a100 (a) and 2 free h100 (h; h2 is busy): a gang of 2 x 2
  // fits only if mixed.
  ClusterSnapshot cluster;
  cluster.nodes = {Typed("a", 2, "a100"), Typed("h", 2, "h100"),
                   Typed("h2", 2, "h100")};
  testing::AddRunning(cluster, 2, {0, 1}, 100);
  for (const SchedulerConfig& config : Configs()) {
    SCOPED_TRACE(config.linear_search);
    std::vector<Decision> d =
        Scheduler(config).Schedule(cluster, {GangOn(1, 2, 2)});
    EXPECT_EQ(Of(d, 1).outcome, Outcome::kRetryLater);

    JobRequest mixed = GangOn(1, 2, 2);
    mixed.constraints.allow_mixed_gpu_types = true;
    d = Scheduler(config).Schedule(cluster, {mixed});
    ASSERT_EQ(Of(d, 1).outcome, Outcome::kPlaced);
    EXPECT_THAT(NodeNames(Of(d, 1).placement), ElementsAre("a", "h"));
  }
  // Bigger than either type alone: infeasible, with the way out named.
  ClusterSnapshot two;
  two.nodes = {Typed("a", 2, "a100"), Typed("h", 2, "h100")};
  std::vector<Decision> d = Scheduler().Schedule(two, {GangOn(1, 2, 2)});
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kInfeasible);
  EXPECT_THAT(Of(d, 1).reason, HasSubstr("--allow-mixed-gpu-types"));
  EXPECT_THAT(Scheduler().WhyNeverFits(two, GangOn(1, 2, 2)).value_or(""),
              HasSubstr("GPUs of one type"));
}

TEST(NodeSelectionSchedulerTest, ConstraintAllOfAndAnyOf) {
  ClusterSnapshot cluster;
  cluster.nodes = {Typed("a", 2, "h100", {"ib"}),
                   Typed("b", 2, "h100", {"ib", "nvlink"}),
                   Typed("c", 2, "h100", {"ssd"})};
  for (const SchedulerConfig& config : Configs()) {
    SCOPED_TRACE(config.linear_search);
    JobRequest both = Gang(1, 2);
    both.constraints.features = Constraint("ib&nvlink");
    JobRequest either = Gang(2, 2);
    either.constraints.features = Constraint("nvlink|ssd");
    JobRequest ib = Gang(3, 2);
    ib.constraints.features = Constraint("ib");
    std::vector<Decision> d =
        Scheduler(config).Schedule(cluster, {both, either, ib});
    EXPECT_THAT(NodeNames(Of(d, 1).placement), ElementsAre("b"));
    EXPECT_THAT(NodeNames(Of(d, 2).placement), ElementsAre("c"));
    EXPECT_THAT(NodeNames(Of(d, 3).placement), ElementsAre("a"));
  }
  JobRequest none = Gang(1, 1);
  none.constraints.features = Constraint("gds");
  EXPECT_THAT(Scheduler().WhyNeverFits(cluster, none).value_or(""),
              HasSubstr("no node satisfies --constraint gds"));
}

TEST(NodeSelectionSchedulerTest, NodelistUsesEveryListedNodeExcludeNone) {
  ClusterSnapshot cluster;
  cluster.nodes = {Typed("a", 4, "h100"), Typed("b", 4, "h100"),
                   Typed("c", 4, "h100")};
  for (const SchedulerConfig& config : Configs()) {
    SCOPED_TRACE(config.linear_search);
    JobRequest listed = Gang(1, 4);  // would pack on one node otherwise
    listed.constraints.nodelist = {"c", "a"};
    JobRequest excluded = Gang(2, 4);
    excluded.constraints.exclude = {"a", "c"};
    std::vector<Decision> d =
        Scheduler(config).Schedule(cluster, {listed, excluded});
    ASSERT_EQ(Of(d, 1).outcome, Outcome::kPlaced);
    EXPECT_THAT(NodeNames(Of(d, 1).placement),
                ::testing::UnorderedElementsAre("a", "c"));
    ASSERT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
    EXPECT_THAT(NodeNames(Of(d, 2).placement), ElementsAre("b"));
  }
  JobRequest wrong = GangOn(1, 1, 2);
  wrong.constraints.nodelist = {"a", "b"};
  EXPECT_THAT(Scheduler().WhyNeverFits(cluster, wrong).value_or(""),
              HasSubstr("--nodelist names 2"));
  JobRequest unknown = Gang(1, 1);
  unknown.constraints.nodelist = {"zz"};
  EXPECT_THAT(Scheduler().WhyNeverFits(cluster, unknown).value_or(""),
              HasSubstr("zz, which is not registered"));
}

TEST(NodeSelectionSchedulerTest, UnknownTypeIsInfeasibleNamingWhatTheClusterHas) {
  ClusterSnapshot cluster;
  cluster.nodes = {Typed("a", 4, "a100"), Typed("h", 2, "h100")};
  JobRequest job = Gang(1, 1);
  job.constraints.gpu_types = {"b200"};
  std::vector<Decision> d = Scheduler().Schedule(cluster, {job});
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kInfeasible);
  EXPECT_EQ(Of(d, 1).reason,
            "no node satisfies --gpu-type b200 (the cluster has a100 x4, "
            "h100 x2)");
  JobRequest big = Gang(2, 4);
  big.constraints.gpu_types = {"h100"};
  EXPECT_THAT(Scheduler().WhyNeverFits(cluster, big).value_or(""),
              HasSubstr("with --gpu-type h100: needs 4 GPUs but the cluster "
                        "has 2"));
}

TEST(NodeSelectionSchedulerTest, MixedTypeNodeGivesAGangOneType) {
  // One node with 2 a100 and 2 h100: a gang of 2 takes two of one type.
  ClusterSnapshot cluster;
  cluster.nodes = {testing::Node("m", 4)};
  cluster.nodes[0].gpus[0].gpu_type = "a100";
  cluster.nodes[0].gpus[1].gpu_type = "h100";
  cluster.nodes[0].gpus[2].gpu_type = "a100";
  cluster.nodes[0].gpus[3].gpu_type = "h100";
  for (const SchedulerConfig& config : Configs()) {
    SCOPED_TRACE(config.linear_search);
    std::vector<Decision> d =
        Scheduler(config).Schedule(cluster, {Gang(1, 2), Gang(2, 2)});
    ASSERT_EQ(Of(d, 1).outcome, Outcome::kPlaced);
    ASSERT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
    EXPECT_THAT(Of(d, 1).placement.nodes[0].gpu_indices, ElementsAre(0, 2));
    EXPECT_THAT(Of(d, 2).placement.nodes[0].gpu_indices, ElementsAre(1, 3));
  }
}

TEST(NodeSelectionSchedulerTest, NoSelectionExplainsNoConstraints) {
  ClusterSnapshot cluster;
  cluster.nodes = {Typed("a", 1, "a100")};
  testing::AddRunning(cluster, 0, {0}, 100);
  std::optional<Explanation> e = Scheduler().Explain(cluster, {Gang(1, 1)}, 1);
  ASSERT_TRUE(e.has_value());
  EXPECT_THAT(e->constraints, IsEmpty());
}

}  // namespace
}  // namespace trainctl::sched
