#include "coordinator/submit_checks.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Spec(const std::string& user = "ann") {
  v1::JobSpec s;
  s.set_user(user);
  s.add_command("true");
  s.set_gpus(1);
  return s;
}

TEST(SubmitChecksTest, CheckSubmit_NamesTheSpecAndField) {
  const sched::PolicyConfig policy;
  EXPECT_THAT(CheckSubmit({}, true, "", policy, false).message(), HasSubstr("specs: empty"));
  std::vector<v1::JobSpec> specs = {Spec(), Spec()};
  specs[1].clear_command();
  absl::Status s = CheckSubmit(specs, /*batch=*/true, "", policy, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("specs[1].command"));
  specs[1] = Spec("root");
  EXPECT_EQ(CheckSubmit(specs, true, "", policy, /*refuse_root=*/true).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckSubmit(specs, true, "", policy, /*refuse_root=*/false).ok());
  EXPECT_THAT(CheckSubmit({Spec()}, false, std::string(kMaxRequestIdBytes + 1, 'r'), policy,
                          false)
                  .message(),
              HasSubstr("request_id"));
}

TEST(SubmitChecksTest, ValidateArray_EveryOrNoSpecCarriesIt) {
  std::vector<v1::JobSpec> specs = {Spec(), Spec()};
  EXPECT_TRUE(ValidateArray(specs).ok());
  specs[1].mutable_array()->set_task_count(2);
  EXPECT_THAT(ValidateArray(specs).message(), HasSubstr("specs[1].array: set"));
  specs[0].mutable_array()->set_task_count(2);
  specs[0].mutable_array()->set_task_id(4);
  specs[1].mutable_array()->set_task_id(4);
  EXPECT_THAT(ValidateArray(specs).message(), HasSubstr("specs[1].array.task_id: 4"));
}

TEST(SubmitChecksTest, ExpandArray_OneSpecPerTaskIdAndTheEnvironmentOnce) {
  v1::JobSpec spec = Spec();
  (*spec.mutable_exported_env())["HF_TOKEN"] = "x";
  absl::StatusOr<std::vector<v1::JobSpec>> specs =
      ExpandArray(spec, {3, 1, 2}, /*max_running=*/2, sched::PolicyConfig());
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[1].array().task_id(), 1);
  EXPECT_EQ((*specs)[1].array().task_count(), 3);
  EXPECT_EQ((*specs)[1].array().max_running(), 2);
  EXPECT_EQ((*specs)[0].exported_env().size(), 1u);
  EXPECT_TRUE((*specs)[1].exported_env().empty());
  std::vector<bool> shares = ShareExportedEnv(*specs, /*from_first=*/true);
  EXPECT_EQ(shares, (std::vector<bool>{false, true, true}));
  EXPECT_THAT(ExpandArray(spec, {1, 1}, 0, sched::PolicyConfig()).status().message(),
              HasSubstr("task_ids[1]: 1 appears twice"));
  EXPECT_THAT(ExpandArray(spec, {}, 0, sched::PolicyConfig()).status().message(),
              HasSubstr("task_ids: empty"));
  EXPECT_THAT(ExpandArray(spec, {1}, -1, sched::PolicyConfig()).status().message(),
              HasSubstr("max_running"));
}

TEST(SubmitChecksTest, ShareExportedEnv_OnlyCopiesEqualToTheFirstAreShared) {
  std::vector<v1::JobSpec> specs = {Spec(), Spec(), Spec()};
  for (v1::JobSpec& s : specs) (*s.mutable_exported_env())["A"] = "1";
  (*specs[2].mutable_exported_env())["A"] = "2";
  std::vector<bool> shares = ShareExportedEnv(specs, /*from_first=*/false);
  EXPECT_EQ(shares, (std::vector<bool>{false, true, false}));
  EXPECT_TRUE(specs[1].exported_env().empty());
  EXPECT_EQ(specs[2].exported_env().at("A"), "2");
  std::vector<v1::JobSpec> none;
  EXPECT_TRUE(ShareExportedEnv(none, false).empty());
}

}  // namespace
}  // namespace trainctl::coord

namespace trainctl::coord {
namespace {

// Node `name` with `count` 80 GiB GPUs of `type`.
sched::NodeState TypedNode(const std::string& name, int count, const std::string& type,
                           std::vector<std::string> features = {}) {
  sched::NodeState n;
  n.name = name;
  n.features = std::move(features);
  for (int i = 0; i < count; ++i) {
    sched::GpuState& g = n.gpus.emplace_back();
    g.index = i;
    g.memory_total_bytes = int64_t{80} << 30;
    g.gpu_type = type;
  }
  return n;
}

TEST(SubmitChecksTest, CheckEverFits_RefusesASelectionNoNodeCouldSatisfy) {
  sched::ClusterSnapshot cluster;
  cluster.nodes = {TypedNode("a", 2, "a100"), TypedNode("h", 2, "h100", {"ib"})};
  const sched::Scheduler scheduler;
  v1::JobSpec b200 = Spec();
  b200.add_gpu_types("b200");
  std::vector<v1::JobSpec> specs = {b200};
  absl::Status s = CheckEverFits(scheduler, cluster, specs, /*batch=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("no node satisfies --gpu-type b200 (the cluster has "
                                     "a100 x2, h100 x2)"));

  v1::JobSpec nvlink = Spec();
  nvlink.set_constraint("ib&nvlink");
  specs = {nvlink};
  EXPECT_THAT(CheckEverFits(scheduler, cluster, specs, false).message(),
              HasSubstr("--constraint ib&nvlink"));

  v1::JobSpec ok = Spec();
  ok.add_gpu_types("h100");
  ok.set_constraint("ib");
  specs = {ok};
  EXPECT_TRUE(CheckEverFits(scheduler, cluster, specs, false).ok());

  v1::JobSpec too_big = Spec();
  too_big.set_gpus(4);
  too_big.add_gpu_types("h100");
  specs = {too_big};
  EXPECT_THAT(CheckEverFits(scheduler, cluster, specs, false).message(),
              HasSubstr("with --gpu-type h100: needs 4 GPUs but the cluster has 2"));
}

}  // namespace
}  // namespace trainctl::coord
