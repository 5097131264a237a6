#include "worker/hw/container_runtime.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;
using ::trainctl::testing::IsOk;
using ::trainctl::testing::StatusIs;

// A task as the agent would hand it over: a token among the variables.
ContainerLaunch Task() {
  ContainerLaunch c;
  c.image = "nvcr.io/nvidia/pytorch:24.05-py3";
  c.argv = {"torchrun", "--nproc-per-node=2", "train.py"};
  c.env = {{"HF_TOKEN", "hf_s3cr3t-value"},
           {"CUDA_VISIBLE_DEVICES", "GPU-aaaa-1111,GPU-bbbb-2222"},
           {"MASTER_ADDR", "10.0.0.7"},
           {"PATH", "/usr/bin:/bin"},
           {"EMPTY", ""}};
  c.workdir = "/home/ada/proj";
  c.mounts = {"/home/ada/proj", "/ckpt/job7"};
  c.gpu_uuids = {"GPU-aaaa-1111", "GPU-bbbb-2222"};
  c.uid = 1000;
  c.gid = 1000;
  c.name = "trainctl-j7-a0-r3";
  c.env_file = "/var/lib/trainctl/containers/trainctl-j7-a0-r3.env";
  return c;
}

// podman with trainctl-container-env, as the agent configures it.
ContainerRuntime::Options PodmanOptions() {
  ContainerRuntime::Options o;
  o.env_exec = "/usr/bin/trainctl-container-env";
  return o;
}

// No value of `env` is in any argv element (empty values excepted).
void ExpectNoValueInArgv(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env) {
  for (const auto& [name, value] : env) {
    if (value.empty()) continue;
    for (const std::string& arg : argv) {
      EXPECT_FALSE(absl::StrContains(arg, value))
          << "value of " << name << " appears in argv element \"" << arg << "\"";
    }
  }
}

TEST(ContainerRuntimeTest, WrapArgv_PodmanAsRoot_FullCommandAndEnvOutOfArgvAndPodman) {
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1",
                          /*rootless=*/false, PodmanOptions());
  ContainerLaunch task = Task();
  // What would run as root inside podman if it reached podman's environment.
  task.env["LD_PRELOAD"] = "/home/ada/evil.so";
  task.env["CONTAINERS_CONF"] = "/home/ada/containers.conf";
  auto w = podman.WrapArgv(task);
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT(w->argv,
              ElementsAreArray<std::string>(
                  {"/usr/bin/podman", "run", "--rm", "--init", "--replace", "--name",
                   "trainctl-j7-a0-r3", "--network=host", "--ipc=host", "--pids-limit=-1",
                   "--log-driver=passthrough", "--security-opt=label=disable", "--user",
                   "1000:1000", "--device", "nvidia.com/gpu=GPU-aaaa-1111", "--device",
                   "nvidia.com/gpu=GPU-bbbb-2222", "-v", "/home/ada/proj:/home/ada/proj",
                   "-v", "/ckpt/job7:/ckpt/job7", "-w", "/home/ada/proj",
                   // The variables: a file read inside by env-exec.
                   "-v", "/usr/bin/trainctl-container-env:/.trainctl/env-exec:ro", "-v",
                   "/var/lib/trainctl/containers/trainctl-j7-a0-r3.env:/.trainctl/env:ro",
                   "nvcr.io/nvidia/pytorch:24.05-py3", "/.trainctl/env-exec",
                   "/.trainctl/env", "torchrun", "--nproc-per-node=2", "train.py"}));
  // podman's environment is its own fixed one: nothing of the task's.
  EXPECT_THAT(w->env, ElementsAre(Pair("PATH", HasSubstr("/usr/sbin"))));
  ExpectNoValueInArgv(w->argv, task.env);
  // The file: every variable but those the image sets (PATH), in name order.
  auto file = podman.EnvFileContent(task);
  ASSERT_THAT(file, IsOk());
  EXPECT_EQ(*file, std::string("CONTAINERS_CONF=/home/ada/containers.conf\0"
                               "CUDA_VISIBLE_DEVICES=GPU-aaaa-1111,GPU-bbbb-2222\0"
                               "EMPTY=\0"
                               "HF_TOKEN=hf_s3cr3t-value\0"
                               "LD_PRELOAD=/home/ada/evil.so\0"
                               "MASTER_ADDR=10.0.0.7\0",
                               173));
}

// A mount's source may be another host directory (the stage where the shim
// bound what the job's account opened); the path inside stays the job's.
TEST(ContainerRuntimeTest, WrapArgv_MountSources_MountedAtTheJobsPaths) {
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false,
                          PodmanOptions());
  ContainerLaunch c = Task();
  c.mount_sources["/home/ada/proj"] = "/var/lib/trainctl/containers/x.mnt/0";
  auto w = podman.WrapArgv(c);
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT(w->argv, Contains("/var/lib/trainctl/containers/x.mnt/0:/home/ada/proj"));
  EXPECT_THAT(w->argv, Contains("/ckpt/job7:/ckpt/job7"));
  EXPECT_THAT(w->argv, Not(Contains("/home/ada/proj:/home/ada/proj")));
  c.mount_sources["/ckpt/job7"] = "relative";
  EXPECT_THAT(podman.WrapArgv(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("mount source")));
}

TEST(ContainerRuntimeTest, WrapArgv_PodmanWithoutEnvExecOrEnvFile_Refused) {
  ContainerRuntime bare(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false);
  EXPECT_THAT(bare.WrapArgv(Task()), StatusIs(absl::StatusCode::kFailedPrecondition,
                                              HasSubstr("trainctl-container-env")));
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false,
                          PodmanOptions());
  ContainerLaunch c = Task();
  c.env_file.clear();
  EXPECT_THAT(podman.WrapArgv(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("environment file")));
  c = Task();
  c.env["BAD"] = std::string("a\0b", 3);
  EXPECT_THAT(podman.EnvFileContent(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("BAD")));
}

TEST(ContainerRuntimeTest, WrapArgv_PodmanRootless_KeepsTheAgentsUser) {
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1",
                          /*rootless=*/true, PodmanOptions());
  auto w = podman.WrapArgv(Task());
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT(w->argv, Contains("--userns=keep-id"));
  EXPECT_THAT(w->argv, Not(Contains("--user")));
}

TEST(ContainerRuntimeTest, WrapArgv_PodmanMinimal_NoOptionalFlags) {
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false,
                          PodmanOptions());
  ContainerLaunch c;
  c.image = "localhost/trainctl-smoke";
  c.argv = {"/bin/busybox", "echo", "hi"};
  c.env_file = "/e";
  auto w = podman.WrapArgv(c);
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT(w->argv, ElementsAreArray<std::string>(
                           {"/usr/bin/podman", "run", "--rm", "--init", "--network=host", "--ipc=host",
                            "--pids-limit=-1", "--log-driver=passthrough",
                            "--security-opt=label=disable", "-v",
                            "/usr/bin/trainctl-container-env:/.trainctl/env-exec:ro", "-v",
                            "/e:/.trainctl/env:ro", "localhost/trainctl-smoke",
                            "/.trainctl/env-exec", "/.trainctl/env", "/bin/busybox", "echo",
                            "hi"}));
  // Root without a uid: the image's user; uid without gid: the uid alone.
  c.uid = 1001;
  EXPECT_THAT(podman.WrapArgv(c)->argv, Contains("1001"));
}

TEST(ContainerRuntimeTest, WrapArgv_PodmanOptionsAndCgroupParent_InTheirPlaces) {
  ContainerRuntime::Options o = PodmanOptions();
  o.env_exec = "/x";
  o.global_args = {"--runtime", "runc"};
  o.run_args = {"--ulimit", "nofile=20000:20000"};
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false, o);
  ContainerLaunch c;
  c.image = "img";
  c.argv = {"true"};
  c.env_file = "/e";
  c.cgroup_parent = "/system.slice/trainctl-agent.service/tasks/j7-a0-r3";
  auto w = podman.WrapArgv(c);
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT(w->argv,
              ElementsAreArray<std::string>(
                  {"/usr/bin/podman", "--runtime", "runc", "--cgroup-manager=cgroupfs", "run",
                   "--rm", "--init", "--network=host", "--ipc=host", "--pids-limit=-1",
                   "--log-driver=passthrough", "--security-opt=label=disable",
                   "--cgroup-parent=/system.slice/trainctl-agent.service/tasks/j7-a0-r3",
                   "-v", "/x:/.trainctl/env-exec:ro", "-v", "/e:/.trainctl/env:ro",
                   "--ulimit", "nofile=20000:20000", "img", "/.trainctl/env-exec",
                   "/.trainctl/env", "true"}));
  EXPECT_THAT(podman.CleanupCommands("trainctl-j7-a0-r3"),
              ElementsAre(ElementsAre("/usr/bin/podman", "--runtime", "runc", "stop",
                                      "--ignore", "--time=0", "trainctl-j7-a0-r3"),
                          ElementsAre("/usr/bin/podman", "--runtime", "runc", "rm", "--force",
                                      "--ignore", "trainctl-j7-a0-r3")));
  EXPECT_THAT(podman.CleanupCommands(""), IsEmpty());
}

TEST(ContainerRuntimeTest, WrapArgv_Apptainer_BindsNvAndPrefixedEnv) {
  ContainerRuntime apptainer(ContainerRuntimeKind::kApptainer, "/usr/bin/apptainer", "1.2.5",
                             /*rootless=*/true);
  ContainerLaunch c = Task();
  c.image = "/shared/images/pytorch-24.05.sif";
  auto w = apptainer.WrapArgv(c);
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT(w->argv, ElementsAreArray<std::string>(
                           {"/usr/bin/apptainer", "exec", "--cleanenv", "--nv", "--bind",
                            "/home/ada/proj", "--bind", "/ckpt/job7", "--pwd",
                            "/home/ada/proj", "/shared/images/pytorch-24.05.sif", "torchrun",
                            "--nproc-per-node=2", "train.py"}));
  EXPECT_THAT(w->env, Contains(Pair("APPTAINERENV_HF_TOKEN", "hf_s3cr3t-value")));
  EXPECT_THAT(w->env, Contains(Pair("APPTAINERENV_CUDA_VISIBLE_DEVICES",
                                    "GPU-aaaa-1111,GPU-bbbb-2222")));
  EXPECT_THAT(w->env, Contains(Pair("APPTAINERENV_EMPTY", "")));
  // PATH comes from the image: the runtime's own PATH only.
  EXPECT_FALSE(w->env.count("APPTAINERENV_PATH"));
  EXPECT_FALSE(w->env.count("HF_TOKEN"));
  ExpectNoValueInArgv(w->argv, c.env);
  EXPECT_THAT(apptainer.CleanupCommands("x"), IsEmpty());
}

TEST(ContainerRuntimeTest, WrapArgv_ApptainerGpusWithoutCudaVisibleDevices_SetsIt) {
  ContainerRuntime apptainer(ContainerRuntimeKind::kApptainer, "/opt/bin/singularity", "3.11.4",
                             false);
  ContainerLaunch c;
  c.image = "/img.sif";
  c.argv = {"python", "t.py"};
  c.gpu_uuids = {"GPU-aaaa-1111"};
  auto w = apptainer.WrapArgv(c);
  ASSERT_THAT(w, IsOk());
  // A `singularity` binary reads SINGULARITYENV_.
  EXPECT_THAT(w->env, Contains(Pair("SINGULARITYENV_CUDA_VISIBLE_DEVICES", "GPU-aaaa-1111")));
  c.gpu_uuids.clear();
  EXPECT_THAT(apptainer.WrapArgv(c)->argv, Not(Contains("--nv")));
}

TEST(ContainerRuntimeTest, WrapArgv_BadInput_InvalidArgumentWithoutValues) {
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false,
                          PodmanOptions());
  auto bad = [&](auto change, const std::string& what) {
    ContainerLaunch c = Task();
    change(c);
    auto w = podman.WrapArgv(c);
    EXPECT_THAT(w, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)));
    if (!w.ok()) {
      EXPECT_THAT(std::string(w.status().message()), Not(HasSubstr("hf_s3cr3t")));
    }
  };
  bad([](ContainerLaunch& c) { c.image = ""; }, "image");
  bad([](ContainerLaunch& c) { c.image = "--privileged"; }, "image");
  bad([](ContainerLaunch& c) { c.argv.clear(); }, "argv");
  bad([](ContainerLaunch& c) { c.env["TOKEN=hf_s3cr3t-value"] = "x"; }, "variable name");
  bad([](ContainerLaunch& c) { c.env["1X"] = "x"; }, "variable name");
  bad([](ContainerLaunch& c) { c.env["A*"] = "x"; }, "variable name");
  bad([](ContainerLaunch& c) { c.mounts.push_back("data"); }, "mount");
  bad([](ContainerLaunch& c) { c.mounts.push_back("/a:/etc"); }, "mount");
  bad([](ContainerLaunch& c) { c.mounts.push_back("/a,/b"); }, "mount");
  bad([](ContainerLaunch& c) { c.workdir = "proj"; }, "workdir");
  bad([](ContainerLaunch& c) { c.name = "-x"; }, "container name");
  bad([](ContainerLaunch& c) { c.name = "a b"; }, "container name");
  bad([](ContainerLaunch& c) { c.gpu_uuids.push_back("GPU-1 --privileged"); }, "GPU UUID");
  bad([](ContainerLaunch& c) { c.cgroup_parent = "tasks/x"; }, "cgroup parent");
  bad([](ContainerLaunch& c) { c.cgroup_parent = "/a/../b"; }, "cgroup parent");

  ContainerRuntime none(ContainerRuntimeKind::kNone, "", "", false);
  EXPECT_THAT(none.WrapArgv(Task()), StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
}

TEST(ContainerRuntimeTest, EnvFileContent_ImageEnvOption_ForwardsPathWhenAsked) {
  ContainerRuntime::Options o = PodmanOptions();
  o.image_env = {};
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false, o);
  auto file = podman.EnvFileContent(Task());
  ASSERT_THAT(file, IsOk());
  EXPECT_THAT(*file, HasSubstr(std::string("PATH=/usr/bin:/bin\0", 19)));
  // podman's own PATH stays its own.
  EXPECT_THAT(podman.WrapArgv(Task())->env.at("PATH"), HasSubstr("/usr/sbin"));
}

// The `podman exec` part of ExecArgv's podman command: what follows the
// waiting script's "/bin/sh -c SCRIPT trainctl-exec".
std::vector<std::string> PodmanExecPart(const std::vector<std::string>& argv) {
  if (argv.size() < 4 || argv[0] != "/bin/sh" || argv[1] != "-c" ||
      argv[3] != "trainctl-exec") {
    ADD_FAILURE() << "not the waiting script: " << (argv.empty() ? "" : argv[0]);
    return {};
  }
  return std::vector<std::string>(argv.begin() + 4, argv.end());
}

// A session into the running task: `podman exec` as the task's uid:gid, in
// its work dir, through env-exec and the task's file; podman's environment
// is its own.
TEST(ContainerRuntimeTest, ExecArgv_PodmanAsRoot_ExecAsTheTasksUserThroughEnvExec) {
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1",
                          /*rootless=*/false, PodmanOptions());
  ContainerLaunch task = Task();
  task.env["LD_PRELOAD"] = "/home/ada/evil.so";
  ContainerExec e;
  e.argv = {"sh", "-c", "echo $RANK"};
  e.stdin_open = true;
  e.tty = true;
  e.term = "xterm-256color";
  auto w = podman.ExecArgv(task, e);
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT(PodmanExecPart(w->argv), ElementsAreArray<std::string>(
                           {"/usr/bin/podman", "exec", "-i", "-t", "--detach-keys=", "--user",
                            "1000:1000", "-w", "/home/ada/proj", "--env",
                            "TERM=xterm-256color", "trainctl-j7-a0-r3", "/.trainctl/env-exec",
                            "/.trainctl/env", "sh", "-c", "echo $RANK"}));
  // Nothing of the task's in podman's environment or on its command line.
  EXPECT_THAT(w->env, ElementsAre(Pair("PATH", HasSubstr("/usr/sbin"))));
  ExpectNoValueInArgv(w->argv, task.env);
  EXPECT_THAT(w->argv, Not(Contains("0:0")));
  EXPECT_THAT(w->argv, Not(Contains("root")));
}

TEST(ContainerRuntimeTest, ExecArgv_PodmanPipesAndOptions_NoTtyFlagsNoTerm) {
  ContainerRuntime::Options o = PodmanOptions();
  o.global_args = {"--runtime", "runc"};
  o.run_args = {"--ulimit", "nofile=20000:20000"};  // run's, not exec's
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false, o);
  ContainerLaunch c = Task();
  c.cgroup_parent = "/tasks/j7";
  c.workdir.clear();
  ContainerExec e;
  e.argv = {"nvidia-smi"};
  e.term = "xterm";  // without a tty: no TERM
  auto w = podman.ExecArgv(c, e);
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT(PodmanExecPart(w->argv), ElementsAreArray<std::string>(
                           {"/usr/bin/podman", "--runtime", "runc", "--cgroup-manager=cgroupfs",
                            "exec", "--detach-keys=", "--user", "1000:1000",
                            "trainctl-j7-a0-r3", "/.trainctl/env-exec", "/.trainctl/env",
                            "nvidia-smi"}));
  // The wait for the container: podman with its global arguments, quoted.
  EXPECT_THAT(w->argv[2], AllOf(HasSubstr("'/usr/bin/podman' '--runtime' 'runc' container "
                                          "inspect --format '{{.State.Running}}' "
                                          "trainctl-j7-a0-r3"),
                                HasSubstr("exec \"$@\"")));
  // A task as root (no --user at run: the image's user) stays so; rootless
  // podman maps the agent's user (keep-id), named by uid.
  c.uid = c.gid = -1;
  EXPECT_THAT(podman.ExecArgv(c, e)->argv, Not(Contains("--user")));
  ContainerRuntime rootless(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1",
                            /*rootless=*/true, PodmanOptions());
  c.uid = c.gid = 1000;
  EXPECT_THAT(rootless.ExecArgv(c, e)->argv, Contains("1000:1000"));
}

TEST(ContainerRuntimeTest, ExecArgv_GlobalArgWithQuote_QuotedInTheWaitScript) {
  ContainerRuntime::Options o = PodmanOptions();
  o.global_args = {"--root", "/var/it's $(x)"};
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false, o);
  ContainerExec e;
  e.argv = {"true"};
  auto w = podman.ExecArgv(Task(), e);
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT(w->argv[2], HasSubstr("'--root' '/var/it'\\''s $(x)' container inspect"));
  EXPECT_THAT(PodmanExecPart(w->argv), Contains("/var/it's $(x)"));
}

TEST(ContainerRuntimeTest, ExecArgv_LoginShell_TheTasksShellWhenTheImageHasIt) {
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false,
                          PodmanOptions());
  ContainerExec e;
  e.login_shell = true;
  auto w = podman.ExecArgv(Task(), e);
  ASSERT_THAT(w, IsOk());
  ASSERT_GE(w->argv.size(), 3u);
  ASSERT_GE(PodmanExecPart(w->argv).size(), 3u);
  const std::vector<std::string> tail(w->argv.end() - 3, w->argv.end());
  EXPECT_THAT(tail, ElementsAre("/bin/sh", "-c", AllOf(HasSubstr("exec \"$SHELL\" -l"),
                                                        HasSubstr("exec /bin/sh -l"))));
}

TEST(ContainerRuntimeTest, ExecArgv_BadInput_InvalidArgumentNamingTheField) {
  ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false,
                          PodmanOptions());
  ContainerExec e;
  EXPECT_THAT(podman.ExecArgv(Task(), e),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("argv")));
  e.argv = {"sh"};
  e.tty = true;
  e.term = "xterm; rm -rf /";
  EXPECT_THAT(podman.ExecArgv(Task(), e),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("term")));
  e.term = "xterm";
  ContainerLaunch c = Task();
  c.name.clear();
  EXPECT_THAT(podman.ExecArgv(c, e),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name")));
  c = Task();
  c.env_file.clear();
  EXPECT_THAT(podman.ExecArgv(c, e),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("env_file")));
  c = Task();
  c.workdir = "rel";
  EXPECT_THAT(podman.ExecArgv(c, e),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("workdir")));
  ContainerRuntime bare(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false);
  EXPECT_THAT(bare.ExecArgv(Task(), e), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                 HasSubstr("trainctl-container-env")));
  ContainerRuntime none(ContainerRuntimeKind::kNone, "", "", false);
  EXPECT_THAT(none.ExecArgv(Task(), e),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
}

// Apptainer: one more `apptainer exec` of the task's image, binds and
// variables (through APPTAINERENV_, never argv), TERM with a tty.
TEST(ContainerRuntimeTest, ExecArgv_Apptainer_SameImageBindsAndVariables) {
  ContainerRuntime apptainer(ContainerRuntimeKind::kApptainer, "/usr/bin/apptainer", "1.2.5",
                             /*rootless=*/true);
  ContainerLaunch c = Task();
  c.image = "/shared/images/pytorch-24.05.sif";
  ContainerExec e;
  e.argv = {"bash"};
  e.stdin_open = e.tty = true;
  e.term = "xterm";
  auto w = apptainer.ExecArgv(c, e);
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT(w->argv, ElementsAreArray<std::string>(
                           {"/usr/bin/apptainer", "exec", "--cleanenv", "--nv", "--bind",
                            "/home/ada/proj", "--bind", "/ckpt/job7", "--pwd",
                            "/home/ada/proj", "/shared/images/pytorch-24.05.sif", "bash"}));
  EXPECT_THAT(w->env, Contains(Pair("APPTAINERENV_HF_TOKEN", "hf_s3cr3t-value")));
  EXPECT_THAT(w->env, Contains(Pair("APPTAINERENV_TERM", "xterm")));
  ExpectNoValueInArgv(w->argv, c.env);
}

TEST(ContainerRuntimeTest, SharesHostNetwork_UnlessRunArgsChooseAnother) {
  auto podman_with = [](std::vector<std::string> run_args) {
    ContainerRuntime::Options o = PodmanOptions();
    o.run_args = std::move(run_args);
    return ContainerRuntime(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1", false,
                            o);
  };
  EXPECT_TRUE(podman_with({}).SharesHostNetwork());
  EXPECT_TRUE(podman_with({"--network", "host"}).SharesHostNetwork());
  EXPECT_FALSE(podman_with({"--network=slirp4netns"}).SharesHostNetwork());
  EXPECT_FALSE(podman_with({"--net", "bridge"}).SharesHostNetwork());
  ContainerRuntime::Options o;
  EXPECT_TRUE(ContainerRuntime(ContainerRuntimeKind::kApptainer, "/usr/bin/apptainer", "1.2.5",
                               true, o)
                  .SharesHostNetwork());
  o.run_args = {"--net"};
  EXPECT_FALSE(ContainerRuntime(ContainerRuntimeKind::kApptainer, "/usr/bin/apptainer",
                                "1.2.5", true, o)
                   .SharesHostNetwork());
  EXPECT_FALSE(ContainerRuntime(ContainerRuntimeKind::kNone, "", "", false).SharesHostNetwork());
}

// Fake runtimes: shell scripts in temporary PATH directories.
class DetectTest : public ::testing::Test {
 protected:
  DetectTest() {
    root_ = ::testing::TempDir() + "/fake-runtimes-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
  }
  ~DetectTest() override { std::filesystem::remove_all(root_); }
  // Writes DIR/NAME printing `version_line` and exiting with `code`.
  std::string Fake(const std::string& dir, const std::string& name,
                   const std::string& version_line, int code = 0, bool executable = true) {
    std::filesystem::create_directories(root_ + "/" + dir);
    const std::string path = root_ + "/" + dir + "/" + name;
    std::ofstream(path) << "#!/bin/sh\necho '" << version_line << "'\nexit " << code << "\n";
    chmod(path.c_str(), executable ? 0755 : 0644);
    return path;
  }
  std::string Dir(const std::string& d) const { return root_ + "/" + d; }
  std::string root_;
};

TEST_F(DetectTest, Detect_BothPresent_PrefersPodmanWhateverThePathOrder) {
  Fake("a", "apptainer", "apptainer version 1.2.5");
  const std::string podman = Fake("b", "podman", "podman version 4.3.1");
  auto rt = ContainerRuntime::Detect(Dir("a") + ":" + Dir("b"));
  ASSERT_THAT(rt, IsOk());
  EXPECT_EQ(rt->kind(), ContainerRuntimeKind::kPodman);
  EXPECT_EQ(rt->binary(), podman);
  EXPECT_EQ(rt->version(), "4.3.1");
  EXPECT_EQ(rt->rootless(), geteuid() != 0);
  EXPECT_THAT(rt->Describe(), HasSubstr("podman 4.3.1 (" + podman));
}

TEST_F(DetectTest, Detect_WantApptainer_SkipsPodman) {
  Fake("a", "podman", "podman version 4.3.1");
  const std::string apptainer = Fake("b", "apptainer", "apptainer version 1.2.5");
  ContainerRuntime::Options o;
  o.want = ContainerRuntimeKind::kApptainer;
  auto rt = ContainerRuntime::Detect(Dir("a") + ":" + Dir("b"), o);
  ASSERT_THAT(rt, IsOk());
  EXPECT_EQ(rt->kind(), ContainerRuntimeKind::kApptainer);
  EXPECT_EQ(rt->binary(), apptainer);
}

TEST_F(DetectTest, Detect_OnlySingularity_IsAnApptainerKind) {
  const std::string s = Fake("a", "singularity", "singularity-ce version 3.11.4");
  auto rt = ContainerRuntime::Detect(Dir("a"));
  ASSERT_THAT(rt, IsOk());
  EXPECT_EQ(rt->kind(), ContainerRuntimeKind::kApptainer);
  EXPECT_EQ(rt->binary(), s);
  EXPECT_EQ(rt->version(), "3.11.4");
}

TEST_F(DetectTest, Detect_BrokenOrNotExecutable_NotFoundSaysWhy) {
  Fake("a", "podman", "podman version 4.3.1", /*code=*/1);
  Fake("b", "apptainer", "apptainer version 1.2.5", 0, /*executable=*/false);
  auto rt = ContainerRuntime::Detect(Dir("a") + ":" + Dir("b") + ":" + Dir("none"));
  EXPECT_THAT(rt, StatusIs(absl::StatusCode::kNotFound,
                           AllOf(HasSubstr("--version failed (exit 1)"),
                                 HasSubstr("is not an executable file"),
                                 HasSubstr("apt-get install podman"))));
}

TEST_F(DetectTest, Detect_Nothing_NotFoundNamesThePath) {
  EXPECT_THAT(ContainerRuntime::Detect("/nonexistent-dir:/also-not"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("PATH=/nonexistent-dir:/also-not")));
}

}  // namespace
}  // namespace trainctl::worker
