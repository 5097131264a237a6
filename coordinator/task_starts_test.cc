#include "coordinator/task_starts.h"

#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

constexpr int64_t kGiB = 1LL << 30;

v1::Job Experiment(int64_t reserved) {
  v1::Job job;
  job.set_id(5);
  job.set_attempt(2);
  job.set_world_size(1);
  job.mutable_spec()->set_user("ann");
  job.mutable_spec()->add_command("python");
  job.mutable_spec()->add_command("train.py");
  v1::Task* t = job.add_tasks();
  t->set_rank(0);
  t->set_node("a");
  t->add_gpu_indices(1);
  t->set_local_world_size(1);
  t->set_reserved_bytes_per_gpu(reserved);
  return job;
}

v1::Node Node() {
  v1::Node n;
  n.set_name("a");
  n.set_cpu_count(32);
  for (int i = 0; i < 2; ++i) {
    v1::Gpu* g = n.add_gpus();
    g->set_index(i);
    g->set_memory_total_bytes(80 * kGiB);
  }
  return n;
}

TEST(TaskStartsTest, AnExperimentSharingItsGpu_GetsItsMemoryLimitAndIdentity) {
  TaskStarts starts({"10.0.0.9:7000", /*run_as_user=*/true, /*allow_root=*/false, 0.05});
  const v1::Job job = Experiment(20 * kGiB);
  const v1::Node node = Node();
  TaskStarts::Env exported;
  exported["WANDB_PROJECT"] = "p";
  const v1::StartTask s = starts.Build(job, job.tasks(0), &node, &exported, false).start_task();
  EXPECT_EQ(s.task().job_id(), 5);
  EXPECT_EQ(s.task().attempt(), 2);
  EXPECT_EQ(s.argv_size(), 2);
  EXPECT_EQ(s.run_as_user(), "ann");
  EXPECT_FALSE(s.allow_root());
  EXPECT_TRUE(s.shared_gpu());
  EXPECT_EQ(s.shared_gpu_index(), 1);
  EXPECT_EQ(s.shared_gpu_memory_limit_bytes(), 20 * kGiB);
  EXPECT_EQ(s.env().at("TRAINCTL_COORDINATOR"), "10.0.0.9:7000");
  EXPECT_EQ(s.env().at("WANDB_PROJECT"), "p");
  EXPECT_EQ(s.env().count("OMP_NUM_THREADS"), 0u);  // one process: torchrun's rule
  EXPECT_EQ(s.env().count("SLURM_PROCID"), 0u);
}

TEST(TaskStartsTest, SlurmEnv_PerJobOrForEveryJob) {
  const v1::Job plain = Experiment(20 * kGiB);
  v1::Job asked = plain;
  asked.mutable_spec()->set_slurm_env(true);
  const v1::Node node = Node();
  TaskStarts per_job({"c:1", false, false, 0.05});
  EXPECT_EQ(per_job.Build(plain, plain.tasks(0), &node, nullptr, false)
                .start_task().env().count("SLURM_PROCID"), 0u);
  EXPECT_EQ(per_job.Build(asked, asked.tasks(0), &node, nullptr, false)
                .start_task().env().at("SLURM_PROCID"), "0");
  // The coordinator's --slurm-env: every job.
  TaskStarts every({"c:1", false, false, 0.05, /*slurm_env=*/true});
  const v1::StartTask s = every.Build(plain, plain.tasks(0), &node, nullptr, false).start_task();
  EXPECT_EQ(s.env().at("SLURM_NTASKS"), "1");
  EXPECT_EQ(s.env().at("SLURMD_NODENAME"), "a");
  EXPECT_EQ(s.env().at("SLURM_CPUS_ON_NODE"), "32");
}

TEST(TaskStartsTest, AWholeGpuTask_IsNotShared_AndTheAddressCanChange) {
  TaskStarts starts({"", false, false, 0.05});
  starts.set_coordinator_address("10.0.0.9:7001");
  v1::Job job = Experiment(80 * kGiB);
  job.mutable_tasks(0)->set_whole_gpus(true);
  const v1::Node node = Node();
  const v1::StartTask s = starts.Build(job, job.tasks(0), &node, nullptr, false).start_task();
  EXPECT_FALSE(s.shared_gpu());
  EXPECT_EQ(s.run_as_user(), "");
  EXPECT_EQ(s.env().at("TRAINCTL_COORDINATOR"), "10.0.0.9:7001");
}

}  // namespace
}  // namespace trainctl::coord
