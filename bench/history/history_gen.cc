// trainctl-bench-history-gen: writes a history of finished jobs into a
// SqliteStateStore file, to measure the coordinator's memory per job.
//
// The job written is what the coordinator itself stores for a finished
// one-GPU experiment: one is run through the core first (a MemoryStateStore,
// one in-process fake agent with 8 GPUs: SubmitJob, then the agent reports
// RUNNING and EXITED 0) and the stored record is the template; the file then
// gets --jobs copies of it with ids 1..N (submit/start/end times spread one
// second apart, a fresh attempt token each) and the fake node, all through
// StateStore::PutJob / PutNode. Every Put is a durable SQLite transaction,
// so put --db on a tmpfs to write a million in under a minute, then copy the
// file where it is measured (bench/history/run.sh does).
//
// Example: trainctl-bench-history-gen --jobs 1000000 --db /dev/shm/h/trainctl.db

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/logging.h"
#include "coordinator/coordinator.h"
#include "coordinator/state_store.h"

namespace trainctl::bench {
namespace {

// Remembers the StartTask it receives. Single-threaded use.
class Catcher : public coord::AgentConnection {
 public:
  void Send(v1::CoordinatorMessage msg) override {
    if (msg.has_start_task()) started = msg.start_task().task();
  }
  void Close(const absl::Status&) override {}
  v1::TaskRef started;
};

v1::Node FakeNode() {
  v1::Node node;
  node.set_name("history-node-0");
  node.set_address("10.0.0.1");
  node.set_cpu_count(64);
  node.set_port_min(29500);
  node.set_port_max(29999);
  node.set_fake_gpus(true);
  for (int g = 0; g < 8; ++g) {
    v1::Gpu* gpu = node.add_gpus();
    gpu->set_index(g);
    gpu->set_uuid(absl::StrFormat("GPU-0000%04x-0000-0000-0000-00000000000%d", g, g));
    gpu->set_name("NVIDIA H100 80GB HBM3");
    gpu->set_memory_total_bytes(int64_t{80} << 30);
  }
  return node;
}

// A finished one-GPU experiment as the core stores it.
absl::StatusOr<v1::Job> TemplateJob() {
  RealClock clock;
  coord::MemoryStateStore store;
  coord::CoordinatorConfig config;
  auto core = coord::Coordinator::Create(config, &store, &clock);
  if (!core.ok()) return core.status();
  Catcher agent;
  v1::RegisterNode reg;
  *reg.mutable_node() = FakeNode();
  if (absl::Status s = (*core)->RegisterAgent(reg, &agent); !s.ok()) return s;
  v1::JobSpec spec;
  spec.set_name("resnet50-lr-sweep");
  for (const char* arg : {"python", "train.py", "--lr", "3e-4", "--batch-size", "256"}) {
    spec.add_command(arg);
  }
  (*spec.mutable_env())["WANDB_PROJECT"] = "vision";
  spec.set_gpus(1);
  spec.set_user("alice");
  absl::StatusOr<int64_t> id = (*core)->SubmitJob(spec, "");
  if (!id.ok()) return id.status();
  for (v1::TaskState state : {v1::TASK_STATE_RUNNING, v1::TASK_STATE_EXITED}) {
    v1::AgentMessage msg;
    *msg.mutable_task_status()->mutable_task() = agent.started;
    msg.mutable_task_status()->mutable_task()->set_pid(4242);
    msg.mutable_task_status()->set_state(state);
    msg.mutable_task_status()->set_log_path(
        "/var/lib/trainctl/logs/job-1/attempt-0/rank-0.log");
    if (absl::Status s = (*core)->HandleAgentMessage("history-node-0", &agent, msg);
        !s.ok()) {
      return s;
    }
  }
  auto stored = store.Load();
  if (!stored.ok()) return stored.status();
  if (stored->jobs.size() != 1 || stored->jobs[0].state() != v1::JOB_STATE_SUCCEEDED) {
    return absl::InternalError("the template job did not succeed");
  }
  return stored->jobs[0];
}

int Run(int64_t jobs, const std::string& db) {
  auto tmpl = TemplateJob();
  if (!tmpl.ok()) {
    std::fprintf(stderr, "template job: %s\n", tmpl.status().ToString().c_str());
    return 1;
  }
  std::printf("template job: %zu bytes serialized\n", tmpl->ByteSizeLong());
  auto store = coord::SqliteStateStore::Open(db);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  if (absl::Status s = (*store)->PutNode(FakeNode()); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t base_ms = tmpl->submit_time_ms() - jobs * 1000;
  v1::Job job = *tmpl;
  for (int64_t i = 1; i <= jobs; ++i) {
    job.set_id(i);
    const int64_t submit = base_ms + i * 1000;
    job.set_submit_time_ms(submit);
    job.set_start_time_ms(submit + 3);
    job.set_end_time_ms(submit + 900);
    job.mutable_tasks(0)->set_start_time_ms(submit + 3);
    job.mutable_tasks(0)->set_end_time_ms(submit + 900);
    job.mutable_tasks(0)->set_log_path(
        absl::StrCat("/var/lib/trainctl/logs/job-", i, "/attempt-0/rank-0.log"));
    job.set_attempt_token(absl::StrFormat("%016x%016x", i * 0x9e3779b97f4a7c15ULL,
                                          i ^ 0x5bd1e995ULL));
    if (absl::Status s = (*store)->PutJob(job); !s.ok()) {
      std::fprintf(stderr, "job %lld: %s\n", static_cast<long long>(i),
                   s.ToString().c_str());
      return 1;
    }
    if (i % 100000 == 0) {
      std::printf("%lld jobs written\n", static_cast<long long>(i));
      std::fflush(stdout);
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %lld finished jobs to %s in %.1f s (%.0f PutJob/s)\n",
              static_cast<long long>(jobs), db.c_str(), secs, jobs / secs);
  return 0;
}

}  // namespace
}  // namespace trainctl::bench

int main(int argc, char** argv) {
  int64_t jobs = 1000000;
  std::string db;
  CLI::App app{"trainctl-bench-history-gen: writes N finished jobs (copies of one "
               "run through the coordinator core) into a SQLite state file.\n"
               "Example: trainctl-bench-history-gen --jobs 1000000 --db /dev/shm/h/trainctl.db"};
  app.add_option("--jobs", jobs, "finished jobs to write")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}))->capture_default_str();
  app.add_option("--db", db, "SQLite file to create (its directory must exist)")
      ->required();
  CLI11_PARSE(app, argc, argv);
  trainctl::InitLogging("bench-history-gen", "warn");
  return trainctl::bench::Run(jobs, db);
}
