#include "coordinator/job_spec.h"

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "coordinator/launch_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::trainctl::testing::StatusIs;

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.add_command("python");
  spec.add_command("train.py");
  return spec;
}

// Each bad spec must be refused with the field it is about.
TEST(ValidateJobSpecTest, ValidateJobSpec_BadFields_NameTheField) {
  struct Case {
    std::function<void(v1::JobSpec&)> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::JobSpec& s) { s.clear_command(); }, "spec.command"},
      {[](v1::JobSpec& s) { s.set_command(0, ""); }, "spec.command[0]"},
      {[](v1::JobSpec& s) { s.set_gpus(-1); }, "spec.gpus"},
      {[](v1::JobSpec& s) { s.set_gpu_fraction(1.5); }, "spec.gpu_fraction"},
      {[](v1::JobSpec& s) { s.set_gpu_fraction(std::nan("")); }, "spec.gpu_fraction"},
      {[](v1::JobSpec& s) {
         s.set_gpu_fraction(0.5);
         s.set_gpu_memory_bytes(1);
       },
       "spec.gpu_fraction"},
      {[](v1::JobSpec& s) {
         s.set_gpu_fraction(0.5);
         s.set_gpus(2);
       },
       "spec.gpus"},
      {[](v1::JobSpec& s) { s.set_gpu_memory_bytes(-5); }, "spec.gpu_memory_bytes"},
      // An idle timeout only for interactive jobs; -1 is "never", below it
      // nothing.
      {[](v1::JobSpec& s) { s.set_idle_timeout_ms(60000); }, "spec.idle_timeout_ms"},
      {[](v1::JobSpec& s) {
         s.set_interactive(true);
         s.set_idle_timeout_ms(-2);
       },
       "spec.idle_timeout_ms"},
      {[](v1::JobSpec& s) { s.set_nodes(2); }, "spec.gpus_per_node"},
      {[](v1::JobSpec& s) { s.set_gpus_per_node(2); }, "spec.nodes"},
      {[](v1::JobSpec& s) {
         s.set_nodes(2);
         s.set_gpus_per_node(2);
         s.set_gpus(3);
       },
       "spec.gpus"},
      {[](v1::JobSpec& s) {
         s.set_nodes(1);
         s.set_gpus_per_node(4);
         s.set_tasks_per_node(2);
       },
       "spec.tasks_per_node"},
      {[](v1::JobSpec& s) { (*s.mutable_env())["RANK"] = "3"; }, "spec.env[RANK]"},
      {[](v1::JobSpec& s) { (*s.mutable_env())["1BAD"] = "x"; }, "spec.env[1BAD]"},
      {[](v1::JobSpec& s) { s.set_workdir("relative/dir"); }, "spec.workdir"},
      {[](v1::JobSpec& s) { s.set_priority(5000); }, "spec.priority"},
      {[](v1::JobSpec& s) { s.set_max_restarts(-1); }, "spec.max_restarts"},
      {[](v1::JobSpec& s) { s.set_name(std::string(200, 'n')); }, "spec.name"},
      {[](v1::JobSpec& s) { s.set_command(1, std::string(5000, 'x')); },
       "spec.command[1]"},
      {[](v1::JobSpec& s) { (*s.mutable_exported_env())["BASH_FUNC_x%%"] = "() {"; },
       "spec.exported_env[BASH_FUNC_x%%]"},
      // The launch contract's names may not come from the submitter's shell
      // either: the agent (root) acted on TRAINCTL_CHECKPOINT_DIR.
      {[](v1::JobSpec& s) { (*s.mutable_exported_env())["TRAINCTL_CHECKPOINT_DIR"] = "/etc"; },
       "spec.exported_env[TRAINCTL_CHECKPOINT_DIR]"},
      {[](v1::JobSpec& s) { (*s.mutable_exported_env())["CUDA_VISIBLE_DEVICES"] = "0"; },
       "spec.exported_env[CUDA_VISIBLE_DEVICES]"},
      {[](v1::JobSpec& s) {
         for (int i = 0; i < 300; ++i) {
           (*s.mutable_exported_env())[absl::StrCat("V", i)] = std::string(4000, 'x');
         }
       },
       "spec.exported_env"},
      {[](v1::JobSpec& s) { s.set_image("ubuntu:24.04 --privileged"); }, "spec.image"},
      {[](v1::JobSpec& s) { s.set_image("--privileged"); }, "spec.image"},
      {[](v1::JobSpec& s) { s.set_cpus(-1); }, "spec.cpus"},
      {[](v1::JobSpec& s) { s.set_cpus(std::nan("")); }, "spec.cpus"},
      {[](v1::JobSpec& s) { s.set_memory_bytes(-1); }, "spec.memory_bytes"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = Spec();
    c.mutate(spec);
    EXPECT_THAT(ValidateJobSpec(spec),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.field + ":")))
        << spec.ShortDebugString();
  }
}

// Strings that are not UTF-8 (proto3 cannot carry them) are refused naming
// the field, wherever they sit.
TEST(ValidateJobSpecTest, ValidateJobSpec_InvalidUtf8_NamesTheField) {
  auto check = [](void (*mutate)(v1::JobSpec&), const char* field) {
    v1::JobSpec spec;
    spec.add_command("python");
    mutate(spec);
    EXPECT_THAT(ValidateJobSpec(spec, {}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("spec.", field, ": is not valid UTF-8"))));
  };
  check([](v1::JobSpec& s) { s.set_name("caf\xc3"); }, "name");
  check([](v1::JobSpec& s) { s.add_command("--lr=\xff"); }, "command[1]");
  check([](v1::JobSpec& s) { (*s.mutable_env())["X"] = "\xe2\x82"; }, "env[X]");
  check([](v1::JobSpec& s) { (*s.mutable_exported_env())["Y"] = "\xff"; }, "exported_env[Y]");
  check([](v1::JobSpec& s) { (*s.mutable_params())["lr"] = "\xc3"; }, "params[lr]");
  v1::JobSpec ok;
  ok.add_command("python");
  ok.set_name("café ☕");
  TC_EXPECT_OK(ValidateJobSpec(ok, {}));
}

TEST(ValidateJobSpecTest, ValidateJobSpec_GoodShapes_Ok) {
  v1::JobSpec spec = Spec();
  TC_EXPECT_OK(ValidateJobSpec(spec));
  spec.set_gpu_fraction(0.25);
  TC_EXPECT_OK(ValidateJobSpec(spec));
  spec = Spec();
  spec.set_nodes(2);
  spec.set_gpus_per_node(8);
  spec.set_tasks_per_node(1);
  TC_EXPECT_OK(ValidateJobSpec(spec));
  spec.set_tasks_per_node(8);
  TC_EXPECT_OK(ValidateJobSpec(spec));
}

TEST(ValidateJobSpecTest, Env_NcclUniqueIdsIsTheUsers_OtherTrainctlNamesReserved) {
  // A gang asks for several ncclUniqueIds (ncclCommInitRankScalable) with
  // --env TRAINCTL_NCCL_UNIQUE_IDS=2; trainctl's own variables stay refused.
  v1::JobSpec spec = Spec();
  spec.set_nodes(2);
  spec.set_gpus_per_node(8);
  (*spec.mutable_env())["TRAINCTL_NCCL_UNIQUE_IDS"] = "2";
  TC_EXPECT_OK(ValidateJobSpec(spec));
  (*spec.mutable_env())["TRAINCTL_TOKEN"] = "x";
  absl::Status s = ValidateJobSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("spec.env[TRAINCTL_TOKEN]"));
}

// The job's own timeout wins, then its queue's, then 1 h; -1 and batch
// jobs never idle out.
TEST(JobSpecTest, IdleTimeoutOf_JobThenQueueThenDefault) {
  sched::PolicyConfig policy;
  policy.queues = {{"default", 1.0, 0}, {"interactive", 1.0, 15 * 60 * 1000}};
  v1::JobSpec spec;
  spec.set_interactive(true);
  EXPECT_EQ(IdleTimeoutOf(spec, policy), absl::Hours(1));
  spec.set_queue("interactive");
  EXPECT_EQ(IdleTimeoutOf(spec, policy), absl::Minutes(15));
  spec.set_idle_timeout_ms(2 * 3600 * 1000);
  EXPECT_EQ(IdleTimeoutOf(spec, policy), absl::Hours(2));
  spec.set_idle_timeout_ms(-1);
  EXPECT_EQ(IdleTimeoutOf(spec, policy), absl::InfiniteDuration());
  spec.set_idle_timeout_ms(0);
  spec.set_interactive(false);
  EXPECT_EQ(IdleTimeoutOf(spec, policy), absl::InfiniteDuration());
  // "" is the queue named "default" where the config lists one.
  policy.queues[0].interactive_idle_timeout_ms = 5 * 60 * 1000;
  spec.set_interactive(true);
  spec.set_queue("");
  EXPECT_EQ(IdleTimeoutOf(spec, policy), absl::Minutes(5));
}

TEST(JobSpecTest, KindOf_GpusAndNodes_ExperimentOrGang) {
  v1::JobSpec spec = Spec();
  EXPECT_EQ(KindOf(spec), v1::JOB_KIND_EXPERIMENT);
  spec.set_gpus(1);
  EXPECT_EQ(KindOf(spec), v1::JOB_KIND_EXPERIMENT);
  spec.set_gpus(2);
  EXPECT_EQ(KindOf(spec), v1::JOB_KIND_GANG);
  spec = Spec();
  spec.set_nodes(1);
  spec.set_gpus_per_node(1);
  EXPECT_EQ(KindOf(spec), v1::JOB_KIND_GANG);
}

TEST(JobSpecTest, TasksPerNode_OneProcessMode_AllGpusInOneTask) {
  v1::JobSpec spec = Spec();
  spec.set_gpus(8);
  EXPECT_EQ(TasksPerNode(spec, 8), 8);
  spec.set_tasks_per_node(1);
  EXPECT_EQ(TasksPerNode(spec, 8), 1);
}

TEST(LaunchEnvTest, BuildLaunchEnv_SecondNodeRank_TorchrunCompatible) {
  v1::Job job;
  job.set_id(7);
  job.set_attempt(2);
  job.set_world_size(8);
  job.set_master_addr("10.0.0.1");
  job.set_master_port(29501);
  job.set_attempt_token("tok");
  job.mutable_spec()->set_max_restarts(3);
  (*job.mutable_spec()->mutable_env())["WANDB_MODE"] = "offline";
  (*job.mutable_spec()->mutable_params())["lr"] = "3e-4";
  v1::Task task;
  task.set_rank(5);
  task.set_local_rank(1);
  task.set_node_rank(1);
  task.add_gpu_uuids("GPU-a");
  task.add_gpu_uuids("GPU-b");
  task.add_gpu_uuids("GPU-c");
  task.add_gpu_uuids("GPU-d");
  LaunchContext ctx{"coord:50051", 2, 4, 64};
  auto env = BuildLaunchEnv(job, task, ctx);
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "GPU-a,GPU-b,GPU-c,GPU-d");
  EXPECT_EQ(env["RANK"], "5");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["NODE_RANK"], "1");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
  EXPECT_EQ(env["ROLE_RANK"], "5");
  EXPECT_EQ(env["ROLE_WORLD_SIZE"], "8");
  EXPECT_EQ(env["ROLE_NAME"], "default");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "7");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "3");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");  // torchrun's: 4 processes on the node
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29501");
  EXPECT_EQ(env["TRAINCTL_TOKEN"], "tok");
  EXPECT_EQ(env["TRAINCTL_ATTEMPT"], "2");
  EXPECT_EQ(env["WANDB_MODE"], "offline");
  EXPECT_EQ(env["TRAINCTL_PARAM_LR"], "3e-4");
}

// A gang of 2 nodes x 2 processes, one GPU each, placed on "n-a" and "n-b";
// `rank` is the task asked about.
v1::Job TwoByTwo(v1::Task* task, int rank) {
  v1::Job job;
  job.set_id(42);
  job.set_attempt(1);
  job.set_world_size(4);
  job.set_master_addr("10.0.0.1");
  job.set_master_port(29500);
  job.set_jax_port(29501);
  job.mutable_spec()->set_name("train");
  job.mutable_spec()->set_user("ann");
  job.mutable_spec()->add_command("python3");
  for (int r = 0; r < 4; ++r) {
    v1::Task* t = job.add_tasks();
    t->set_rank(r);
    t->set_local_rank(r % 2);
    t->set_node_rank(r / 2);
    t->set_node(r < 2 ? "n-a" : "n-b");
    t->set_local_world_size(2);
    t->add_gpu_uuids("GPU-0");
    t->add_gpu_uuids("GPU-1");
  }
  *task = job.tasks(rank);
  return job;
}

TEST(LaunchEnvTest, OmpNumThreads_TorchrunsRule_AndTheJobsOwnValueWins) {
  v1::Task task;
  v1::Job job = TwoByTwo(&task, 3);
  EXPECT_EQ(BuildLaunchEnv(job, task, {"c:1", 2, 2, 64})["OMP_NUM_THREADS"], "1");
  // One process on its node: unset, as torchrun leaves it (the library's
  // own default then).
  EXPECT_EQ(BuildLaunchEnv(job, task, {"c:1", 2, 1, 64}).count("OMP_NUM_THREADS"), 0u);
  // The job's --env, or its exported environment, is never overridden.
  (*job.mutable_spec()->mutable_env())["OMP_NUM_THREADS"] = "8";
  EXPECT_EQ(BuildLaunchEnv(job, task, {"c:1", 2, 2, 64})["OMP_NUM_THREADS"], "8");
  job.mutable_spec()->clear_env();
  (*job.mutable_spec()->mutable_exported_env())["OMP_NUM_THREADS"] = "4";
  EXPECT_EQ(BuildLaunchEnv(job, task, {"c:1", 2, 2, 64})["OMP_NUM_THREADS"], "4");
}

TEST(LaunchEnvTest, Jax_CoordinatorAddressAndTheProcesssDevices) {
  v1::Task task;
  v1::Job job = TwoByTwo(&task, 3);
  auto env = BuildLaunchEnv(job, task, {"c:1", 2, 2, 64});
  EXPECT_EQ(env["JAX_COORDINATOR_ADDRESS"], "10.0.0.1:29501");
  EXPECT_EQ(env["JAX_LOCAL_DEVICE_IDS"], "1");  // its GPU in CUDA_VISIBLE_DEVICES
  // One process driving both GPUs of its node (--tasks-per-node 1).
  EXPECT_EQ(BuildLaunchEnv(job, task, {"c:1", 2, 1, 64})["JAX_LOCAL_DEVICE_IDS"], "0,1");
  // A one-process job has no JAX port: no address to give.
  job.set_jax_port(0);
  EXPECT_EQ(BuildLaunchEnv(job, task, {"c:1", 2, 2, 64}).count("JAX_COORDINATOR_ADDRESS"), 0u);
}

TEST(LaunchEnvTest, SlurmEnv_SrunsVariablesWithSlurmsMeanings) {
  v1::Task task;
  v1::Job job = TwoByTwo(&task, 3);
  LaunchContext ctx{"c:1", 2, 2, 64};
  auto plain = BuildLaunchEnv(job, task, ctx);
  EXPECT_EQ(plain.count("SLURM_PROCID"), 0u);  // only when asked for
  EXPECT_EQ(plain["TORCHELASTIC_RUN_ID"], "42");
  ctx.slurm_env = true;
  auto env = BuildLaunchEnv(job, task, ctx);
  // As under srun, not torchrun: Lightning then picks SLURMEnvironment.
  EXPECT_EQ(env.count("TORCHELASTIC_RUN_ID"), 0u);
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "1");
  EXPECT_EQ(env["SLURM_JOB_ID"], "42");
  EXPECT_EQ(env["SLURM_JOBID"], "42");
  EXPECT_EQ(env["SLURM_JOB_NAME"], "train");
  EXPECT_EQ(env["SLURM_PROCID"], "3");
  EXPECT_EQ(env["SLURM_LOCALID"], "1");
  EXPECT_EQ(env["SLURM_NODEID"], "1");
  EXPECT_EQ(env["SLURM_NTASKS"], "4");
  EXPECT_EQ(env["SLURM_NPROCS"], "4");
  EXPECT_EQ(env["SLURM_NNODES"], "2");
  EXPECT_EQ(env["SLURM_JOB_NUM_NODES"], "2");
  EXPECT_EQ(env["SLURM_TASKS_PER_NODE"], "2(x2)");
  EXPECT_EQ(env["SLURM_NTASKS_PER_NODE"], "2");
  EXPECT_EQ(env["SLURM_STEP_NODELIST"], "n-a,n-b");
  EXPECT_EQ(env["SLURM_JOB_NODELIST"], "n-a,n-b");
  EXPECT_EQ(env["SLURMD_NODENAME"], "n-b");
  EXPECT_EQ(env["SLURM_STEP_ID"], "0");
  EXPECT_EQ(env["SLURM_CPUS_ON_NODE"], "64");
  EXPECT_EQ(env["SLURM_GPUS_ON_NODE"], "2");
  EXPECT_EQ(env["SLURM_RESTART_COUNT"], "1");
  EXPECT_EQ(env["SLURM_JOB_USER"], "ann");
  // Uneven nodes: Slurm's compressed counts, and no SLURM_NTASKS_PER_NODE.
  job.mutable_tasks(3)->set_node_rank(2);
  job.mutable_tasks(3)->set_node("n-c");
  job.set_world_size(4);
  env = BuildLaunchEnv(job, job.tasks(3), ctx);
  EXPECT_EQ(env["SLURM_TASKS_PER_NODE"], "2,1(x2)");
  EXPECT_EQ(env.count("SLURM_NTASKS_PER_NODE"), 0u);
  EXPECT_EQ(env["SLURM_NODELIST"], "n-a,n-b,n-c");
  // No name: the program's base name, as sbatch names a job after its script.
  job.mutable_spec()->clear_name();
  job.mutable_spec()->set_command(0, "/usr/bin/python3");
  EXPECT_EQ(BuildLaunchEnv(job, task, ctx)["SLURM_JOB_NAME"], "python3");
}

TEST(ValidateJobSpecTest, ValidateJobSpec_SweepTrial_Accepted) {
  v1::JobSpec spec = Spec();
  spec.set_sweep_id("sw-0123abcd.v2_x");
  (*spec.mutable_params())["lr"] = "0.001";
  (*spec.mutable_params())["batch_size"] = "64";
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  // Exactly at the limits.
  spec.set_sweep_id(std::string(kMaxSweepIdBytes, 'a'));
  (*spec.mutable_params())[std::string(kMaxParamNameBytes, 'p')] =
      std::string(kMaxParamValueBytes, 'v');
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
}

TEST(ValidateJobSpecTest, ValidateJobSpec_BadSweepFields_NameTheField) {
  struct Case {
    std::function<void(v1::JobSpec&)> mutate;
    std::string prefix;
  };
  const std::vector<Case> cases = {
      {[](v1::JobSpec& s) { s.set_sweep_id(std::string(kMaxSweepIdBytes + 1, 'a')); },
       "spec.sweep_id: at most 64 bytes"},
      {[](v1::JobSpec& s) { s.set_sweep_id("sw 1"); }, "spec.sweep_id: only"},
      {[](v1::JobSpec& s) { s.set_sweep_id("sw/1"); }, "spec.sweep_id: only"},
      {[](v1::JobSpec& s) {
         for (int i = 0; i <= kMaxParams; ++i) {
           (*s.mutable_params())[absl::StrCat("p", i)] = "1";
         }
       },
       "spec.params: at most 64"},
      {[](v1::JobSpec& s) { (*s.mutable_params())["1lr"] = "1"; },
       "spec.params[1lr]: not a valid parameter name"},
      {[](v1::JobSpec& s) { (*s.mutable_params())["l-r"] = "1"; },
       "spec.params[l-r]: not a valid parameter name"},
      {[](v1::JobSpec& s) { (*s.mutable_params())[""] = "1"; },
       "spec.params[]: not a valid parameter name"},
      {[](v1::JobSpec& s) {
         (*s.mutable_params())[std::string(kMaxParamNameBytes + 1, 'p')] = "1";
       },
       "spec.params["},
      {[](v1::JobSpec& s) {
         (*s.mutable_params())["lr"] = std::string(kMaxParamValueBytes + 1, 'v');
       },
       "spec.params[lr]: value must be at most 1024 bytes"},
      {[](v1::JobSpec& s) { (*s.mutable_params())["lr"] = std::string("a\0b", 3); },
       "spec.params[lr]: value contains a NUL byte"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::JobSpec spec = Spec();
    cases[i].mutate(spec);
    absl::Status status = ValidateJobSpec(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "case " << i;
    EXPECT_THAT(std::string(status.message()), ::testing::StartsWith(cases[i].prefix))
        << "case " << i << ": " << status;
  }
}

TEST(ValidateJobSpecTest, SchedulingFields_BadValues_InvalidArgumentNamingField) {
  v1::JobSpec spec;
  spec.add_command("python");
  spec.set_queue("no spaces");
  EXPECT_THAT(ValidateJobSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("spec.queue:")));
  // A well-formed name this coordinator (default policy) does not have.
  spec.set_queue("prod");
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("spec.queue: no queue \"prod\"")));
  sched::PolicyConfig policy;
  policy.queues = {{"prod", 1}};
  EXPECT_TRUE(ValidateJobSpec(spec, policy).ok());
  spec.set_queue("");
  spec.set_time_limit_ms(-1);
  EXPECT_THAT(ValidateJobSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("spec.time_limit_ms:")));
  spec.set_time_limit_ms(3'600'000);
  // --spread places the ranks of a gang; a one-process job has none.
  spec.set_placement(v1::GANG_PLACEMENT_SPREAD);
  EXPECT_THAT(ValidateJobSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("spec.placement:")));
  spec.set_gpus(4);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_user(std::string(200, 'u'));
  EXPECT_THAT(ValidateJobSpec(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("spec.user:")));
}

// A node selection that can be judged from the spec alone is refused at
// submit, naming the field and saying what is wrong.
TEST(ValidateJobSpecTest, NodeSelection_BadFields_NameTheFieldAndWhy) {
  struct Case {
    std::function<void(v1::JobSpec&)> mutate;
    std::string field;
    std::string why;
  };
  const std::vector<Case> cases = {
      {[](v1::JobSpec& s) { s.add_gpu_types("H100"); }, "spec.gpu_types", "not a GPU type"},
      {[](v1::JobSpec& s) { s.add_gpu_types(""); }, "spec.gpu_types", "not a GPU type"},
      {[](v1::JobSpec& s) {
         s.add_gpu_types("h100");
         s.add_gpu_types("h100");
       },
       "spec.gpu_types", "given twice"},
      {[](v1::JobSpec& s) { s.set_constraint("ib&nvlink|a"); }, "spec.constraint",
       "mixes & and |"},
      {[](v1::JobSpec& s) { s.set_constraint("ib&"); }, "spec.constraint", "empty term"},
      {[](v1::JobSpec& s) { s.set_constraint("i$b"); }, "spec.constraint", "a-z, 0-9"},
      {[](v1::JobSpec& s) { s.add_nodelist("a b"); }, "spec.nodelist", "not a node name"},
      {[](v1::JobSpec& s) {
         s.add_nodelist("a");
         s.add_exclude_nodes("a");
       },
       "spec.exclude_nodes", "both in --nodelist and --exclude"},
      {[](v1::JobSpec& s) {
         s.set_nodes(1);
         s.set_gpus_per_node(2);
         s.add_nodelist("a");
         s.add_nodelist("b");
       },
       "spec.nodelist", "names 2 nodes but the gang runs on 1"},
      {[](v1::JobSpec& s) {
         s.set_gpus(3);
         s.add_nodelist("a");
         s.add_nodelist("b");
       },
       "spec.nodelist", "do not split evenly"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = Spec();
    c.mutate(spec);
    EXPECT_THAT(ValidateJobSpec(spec),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(c.field + ":"), HasSubstr(c.why))))
        << spec.ShortDebugString();
  }
}

TEST(ValidateJobSpecTest, Dependency_BadSyntax_NamesTheFieldAndWhy) {
  v1::JobSpec spec = Spec();
  spec.set_dependency("afterok:1?afterany:2,after:3");
  EXPECT_THAT(ValidateJobSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("spec.dependency:"), HasSubstr("mixes ','"))));
  spec.set_dependency("afterok:12:13,singleton");
  TC_EXPECT_OK(ValidateJobSpec(spec));
}

TEST(ValidateJobSpecTest, NodeSelection_ReachesTheScheduler) {
  v1::JobSpec spec = Spec();
  spec.set_nodes(2);
  spec.set_gpus_per_node(4);
  spec.add_gpu_types("h100");
  spec.add_gpu_types("a100");
  spec.set_constraint("ib|roce");
  spec.add_nodelist("n1");
  spec.add_nodelist("n2");
  spec.add_exclude_nodes("n3");
  spec.set_allow_mixed_gpu_types(true);
  TC_EXPECT_OK(ValidateJobSpec(spec));
  v1::Job job;
  job.set_id(7);
  *job.mutable_spec() = spec;
  const sched::JobRequest r = ToJobRequest(job);
  EXPECT_EQ(r.constraints.gpu_types, (std::vector<std::string>{"h100", "a100"}));
  EXPECT_EQ(r.constraints.features.op, sched::FeatureConstraint::Op::kAny);
  EXPECT_EQ(r.constraints.features.ToString(), "ib|roce");
  EXPECT_EQ(r.constraints.nodelist, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(r.constraints.exclude, (std::vector<std::string>{"n3"}));
  EXPECT_TRUE(r.constraints.allow_mixed_gpu_types);
}

}  // namespace
}  // namespace trainctl::coord
