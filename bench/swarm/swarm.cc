// trainctl-swarm: a swarm of simulated agents against one running
// trainctl-coordinator.
//
// Opens N agent streams (AgentService.Connect) with fake inventories of
// --gpus-per-agent GPUs each, heartbeats every agent once a second (spread
// evenly over the second, 8 GPU samples each), and answers every StartTask
// like a real agent whose process exits at once: TaskStatus RUNNING, then
// EXITED with code 0 (StopTask: EXITED by SIGTERM; ReadLog: an empty chunk).
// Then, against the same coordinator process (--coordinator-pid):
//
//   phase heartbeat_only  --duration-s of heartbeats alone: coordinator CPU
//                         (/proc/PID/stat) and RSS, heartbeat latency;
//   phase submit          the same plus one-GPU no-op experiments submitted
//                         at --rate jobs/s (open loop, --submit-threads
//                         blocking clients): submit ack latency, submit ->
//                         StartTask at the agent p50/p99, jobs started/s.
//
// Heartbeat latency: the coordinator stamps a node's last_heartbeat_ms with
// its clock when it applies a heartbeat; after each phase ListNodes gives
// that stamp for every node, and the latency is the stamp minus the send
// time of the newest heartbeat sent at or before it (same host clock, 1 ms
// resolution).
//
// The transport floor (BenchPing, a no-op unary call served with the
// coordinator's server settings in this process) is measured in the same
// run; every latency is also given as a multiple of its p50.
//
// Example:
//   trainctl-swarm --coordinator 127.0.0.1:50051 --coordinator-pid 1234
//       --agents 1000 --duration-s 10 --rate 2000 --out swarm_1000.json

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/common/bench_util.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/bench.pb.h"
#include "trainctl/v1/service.grpc.pb.h"

namespace trainctl::bench {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

double MicrosBetween(SteadyTime a, SteadyTime b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

class Swarm;

// One simulated agent: a client bidi reactor on the agent stream. Writes are
// queued (one StartWrite outstanding, as gRPC requires); reads are handled in
// order on gRPC's callback threads.
class SimAgent : public grpc::ClientBidiReactor<v1::AgentMessage,
                                                v1::CoordinatorMessage> {
 public:
  SimAgent(Swarm* swarm, int index, int gpus) : swarm_(swarm), index_(index), gpus_(gpus) {}

  // Opens the stream and sends the registration.
  void Start(v1::AgentService::Stub* stub);
  // Sends one heartbeat and remembers its send time.
  void Heartbeat();
  // Cancels the stream (at the end of the run).
  void Cancel() { ctx_.TryCancel(); }
  // The newest heartbeat sent at or before `stamp_ms` (Unix ms), or -1.
  int64_t SentAtOrBefore(int64_t stamp_ms) const;
  std::string name() const { return absl::StrCat("swarm-", index_); }

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void Send(v1::AgentMessage msg);
  void ReportTask(const v1::TaskRef& ref, v1::TaskState state, int signal);

  Swarm* const swarm_;
  const int index_;
  const int gpus_;
  grpc::ClientContext ctx_;
  v1::CoordinatorMessage in_;
  mutable absl::Mutex mu_;
  std::deque<v1::AgentMessage> out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  // Send times of the last heartbeats, Unix ms, oldest first.
  std::deque<int64_t> sent_ms_ ABSL_GUARDED_BY(mu_);
};

// The swarm: agents, counters, and the job id -> StartTask arrival map.
class Swarm {
 public:
  void OnRegistered() {
    absl::MutexLock lock(&mu_);
    ++registered_;
  }
  void OnStreamDone(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    ++streams_done_;
    if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED &&
        first_stream_error_.empty()) {
      first_stream_error_ = status.error_message();
    }
  }
  void OnStartTask(int64_t job_id) {
    const SteadyTime now = std::chrono::steady_clock::now();
    absl::MutexLock lock(&mu_);
    started_.try_emplace(job_id, now);
  }
  // Waits until `n` agents are registered or `timeout` passes.
  bool WaitRegistered(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto cond = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return registered_ >= n || streams_done_ > 0;
    };
    mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
    return registered_ >= n;
  }
  // Waits until every id of `ids` has a StartTask, or `timeout` passes.
  void WaitStarted(const std::vector<int64_t>& ids, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto cond = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      for (int64_t id : ids) {
        if (!started_.contains(id)) return false;
      }
      return true;
    };
    mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
  }
  absl::flat_hash_map<int64_t, SteadyTime> Started() {
    absl::MutexLock lock(&mu_);
    return started_;
  }
  int registered() {
    absl::MutexLock lock(&mu_);
    return registered_;
  }
  std::string first_stream_error() {
    absl::MutexLock lock(&mu_);
    return first_stream_error_;
  }
  std::atomic<int64_t> heartbeats_sent{0};

 private:
  absl::Mutex mu_;
  int registered_ ABSL_GUARDED_BY(mu_) = 0;
  int streams_done_ ABSL_GUARDED_BY(mu_) = 0;
  std::string first_stream_error_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, SteadyTime> started_ ABSL_GUARDED_BY(mu_);
};

void SimAgent::Start(v1::AgentService::Stub* stub) {
  v1::AgentMessage reg;
  v1::Node* node = reg.mutable_register_()->mutable_node();
  node->set_name(name());
  node->set_address(absl::StrCat("10.", (index_ >> 16) & 255, ".", (index_ >> 8) & 255,
                                 ".", index_ & 255));
  node->set_cpu_count(64);
  node->set_port_min(29500);
  node->set_port_max(29999);
  node->set_fake_gpus(true);
  node->set_agent_version("trainctl-swarm");
  for (int g = 0; g < gpus_; ++g) {
    v1::Gpu* gpu = node->add_gpus();
    gpu->set_index(g);
    gpu->set_uuid(absl::StrFormat("GPU-5a4d%04x-%08x-0000-0000-%012x", g, index_, g));
    gpu->set_name("NVIDIA H100 80GB HBM3 (fake)");
    gpu->set_memory_total_bytes(int64_t{80} << 30);
    for (int p = 0; p < gpus_; ++p) {
      if (p != g) gpu->add_nvlink_peers(p);
    }
  }
  stub->async()->Connect(&ctx_, this);
  Send(std::move(reg));
  StartRead(&in_);
  StartCall();
}

void SimAgent::Send(v1::AgentMessage msg) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  out_.push_back(std::move(msg));
  if (!writing_) {
    writing_ = true;
    StartWrite(&out_.front());
  }
}

void SimAgent::Heartbeat() {
  v1::AgentMessage msg;
  v1::Heartbeat* hb = msg.mutable_heartbeat();
  for (int g = 0; g < gpus_; ++g) {
    v1::GpuSample* s = hb->add_gpus();
    s->set_index(g);
    s->set_memory_used_bytes(int64_t{1} << 30);
    s->set_utilization_pct(50);
    s->set_temperature_c(45);
    s->set_power_w(300);
  }
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    sent_ms_.push_back(absl::ToUnixMillis(absl::Now()));
    if (sent_ms_.size() > 8) sent_ms_.pop_front();
  }
  Send(std::move(msg));
  swarm_->heartbeats_sent.fetch_add(1, std::memory_order_relaxed);
}

int64_t SimAgent::SentAtOrBefore(int64_t stamp_ms) const {
  absl::MutexLock lock(&mu_);
  int64_t best = -1;
  for (int64_t s : sent_ms_) {
    if (s <= stamp_ms) best = s;
  }
  return best;
}

void SimAgent::ReportTask(const v1::TaskRef& ref, v1::TaskState state, int signal) {
  v1::AgentMessage msg;
  v1::TaskStatus* st = msg.mutable_task_status();
  *st->mutable_task() = ref;
  st->mutable_task()->set_pid(100000 + ref.rank());
  st->set_state(state);
  st->set_signal(signal);
  st->set_log_path("/dev/null");
  Send(std::move(msg));
}

void SimAgent::OnReadDone(bool ok) {
  if (!ok) return;  // The stream is ending; OnDone follows.
  switch (in_.msg_case()) {
    case v1::CoordinatorMessage::kRegisterAck:
      swarm_->OnRegistered();
      break;
    case v1::CoordinatorMessage::kStartTask: {
      swarm_->OnStartTask(in_.start_task().task().job_id());
      ReportTask(in_.start_task().task(), v1::TASK_STATE_RUNNING, 0);
      ReportTask(in_.start_task().task(), v1::TASK_STATE_EXITED, 0);
      break;
    }
    case v1::CoordinatorMessage::kStopTask:
      ReportTask(in_.stop_task().task(), v1::TASK_STATE_EXITED, 15);
      break;
    case v1::CoordinatorMessage::kReadLog: {
      v1::AgentMessage msg;
      msg.mutable_log_chunk()->set_request_id(in_.read_log().request_id());
      msg.mutable_log_chunk()->set_next_offset(in_.read_log().offset());
      Send(std::move(msg));
      break;
    }
    default:
      break;
  }
  StartRead(&in_);
}

void SimAgent::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  out_.pop_front();
  if (ok && !out_.empty() && !done_) {
    StartWrite(&out_.front());
  } else {
    writing_ = false;
  }
}

void SimAgent::OnDone(const grpc::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }
  swarm_->OnStreamDone(status);
}

struct Options {
  std::string coordinator = "127.0.0.1:50051";
  int coordinator_pid = 0;
  int agents = 100;
  int gpus_per_agent = 8;
  int connections = 0;
  double duration_s = 10;
  double rate = 2000;
  int submit_threads = 8;
  int floor_calls = 2000;
  std::string out;
  std::string note;
};

// One submitter thread's record of a job.
struct Submitted {
  int64_t job_id = 0;
  SteadyTime issued;
  SteadyTime acked;
};

// Submits one-GPU no-op experiments at `rate`/`threads` jobs/s per thread
// (open loop: each submit has a due time; a late thread sends at once) until
// `stop`; returns what it submitted.
void SubmitLoop(v1::Coordinator::Stub* stub, int thread, int threads, double rate,
                SteadyTime t0, const std::atomic<bool>* stop,
                std::vector<Submitted>* out, std::atomic<int64_t>* errors) {
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_name("swarm");
  req.mutable_spec()->add_command("true");
  req.mutable_spec()->set_gpus(1);
  for (int64_t j = 0; !stop->load(std::memory_order_relaxed); ++j) {
    const double due_s = (static_cast<double>(j) * threads + thread) / rate;
    const SteadyTime due = t0 + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::duration<double>(due_s));
    std::this_thread::sleep_until(due);
    if (stop->load(std::memory_order_relaxed)) break;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::SubmitJobResponse resp;
    Submitted s;
    s.issued = std::chrono::steady_clock::now();
    grpc::Status st = stub->SubmitJob(&ctx, req, &resp);
    s.acked = std::chrono::steady_clock::now();
    if (!st.ok()) {
      if (errors->fetch_add(1) == 0) {
        std::fprintf(stderr, "SubmitJob failed: %s\n", st.error_message().c_str());
      }
      continue;
    }
    s.job_id = resp.job_id();
    out->push_back(s);
  }
}

int Run(const Options& opt) {
  // Each agent may take one TCP connection.
  const int fd_budget = RaiseOpenFileLimit() - 256;
  int connections = opt.connections > 0 ? opt.connections : opt.agents;
  connections = std::max(1, std::min({connections, opt.agents, fd_budget}));

  v1::SwarmResult result;
  *result.mutable_host() = HostNow();
  result.mutable_host()->set_note(opt.note);
  result.set_gpus_per_agent(opt.gpus_per_agent);
  result.set_connections(connections);
  result.set_submit_threads(opt.submit_threads);

  // The transport floor first, while the machine is quiet.
  double floor_p50_us = 0;
  {
    auto ping = PingServer::Start();
    if (!ping.ok()) {
      std::fprintf(stderr, "%s\n", ping.status().ToString().c_str());
      return 1;
    }
    auto floor = MeasureFloor((*ping)->address(), opt.floor_calls);
    if (!floor.ok()) {
      std::fprintf(stderr, "%s\n", floor.status().ToString().c_str());
      return 1;
    }
    floor_p50_us = floor->p50_us();
    *result.mutable_transport_floor() = *floor;
    std::printf("transport floor (no-op unary, %d calls): p50 %.0f us, p99 %.0f us\n",
                opt.floor_calls, floor->p50_us(), floor->p99_us());
  }

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::AgentService::Stub>> stubs;
  for (int c = 0; c < connections; ++c) {
    channels.push_back(grpc::CreateCustomChannel(
        opt.coordinator, grpc::InsecureChannelCredentials(), ClientChannelArgs(c)));
    stubs.push_back(v1::AgentService::NewStub(channels.back()));
  }
  Swarm swarm;
  std::vector<std::unique_ptr<SimAgent>> agents;
  const absl::Time reg_start = absl::Now();
  for (int i = 0; i < opt.agents; ++i) {
    agents.push_back(std::make_unique<SimAgent>(&swarm, i, opt.gpus_per_agent));
    agents.back()->Start(stubs[i % connections].get());
  }
  if (!swarm.WaitRegistered(opt.agents, absl::Seconds(120))) {
    std::fprintf(stderr, "only %d of %d agents registered: %s\n", swarm.registered(),
                 opt.agents, swarm.first_stream_error().c_str());
    return 1;
  }
  std::printf("%d agents registered in %.2f s over %d connections\n", opt.agents,
              absl::ToDoubleSeconds(absl::Now() - reg_start), connections);

  // Heartbeats: every 10 ms, the agents whose slot is due (each once a second).
  std::atomic<bool> stop_heartbeats{false};
  std::thread heartbeater([&] {
    constexpr int kSlots = 100;
    SteadyTime next = std::chrono::steady_clock::now();
    for (int64_t tick = 0; !stop_heartbeats.load(); ++tick) {
      const int slot = static_cast<int>(tick % kSlots);
      for (int i = slot; i < opt.agents; i += kSlots) agents[i]->Heartbeat();
      next += std::chrono::milliseconds(10);
      std::this_thread::sleep_until(next);
    }
  });

  auto user_channel = grpc::CreateCustomChannel(
      opt.coordinator, grpc::InsecureChannelCredentials(), ClientChannelArgs(-2));
  auto user = v1::Coordinator::NewStub(user_channel);

  // Heartbeat latency of every node, from ListNodes.
  auto heartbeat_latency = [&]() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::ListNodesResponse resp;
    grpc::Status st = user->ListNodes(&ctx, v1::ListNodesRequest(), &resp);
    std::vector<double> us;
    if (!st.ok()) {
      std::fprintf(stderr, "ListNodes: %s\n", st.error_message().c_str());
      return Summarize(us);
    }
    absl::flat_hash_map<std::string, const SimAgent*> by_name;
    for (const auto& a : agents) by_name[a->name()] = a.get();
    for (const v1::NodeView& v : resp.nodes()) {
      auto it = by_name.find(v.node().name());
      if (it == by_name.end()) continue;
      const int64_t stamp = v.node().last_heartbeat_ms();
      const int64_t sent = it->second->SentAtOrBefore(stamp);
      if (sent >= 0) us.push_back(static_cast<double>(stamp - sent) * 1000.0);
    }
    return Summarize(us, floor_p50_us);
  };

  auto measure_phase = [&](const std::string& name, double rate) {
    v1::SwarmPhase phase;
    phase.set_name(name);
    phase.set_agents(opt.agents);
    phase.set_target_jobs_per_s(rate);
    const pid_t pid = opt.coordinator_pid;
    const int64_t hb0 = swarm.heartbeats_sent.load();
    const double cpu0 = pid > 0 ? ProcessCpuSeconds(pid).value_or(0) : 0;
    const SteadyTime t0 = std::chrono::steady_clock::now();

    std::atomic<bool> stop{false};
    std::atomic<int64_t> errors{0};
    std::vector<std::vector<Submitted>> submitted(opt.submit_threads);
    std::vector<std::thread> submitters;
    std::vector<std::unique_ptr<v1::Coordinator::Stub>> submit_stubs;
    if (rate > 0) {
      for (int k = 0; k < opt.submit_threads; ++k) {
        submit_stubs.push_back(v1::Coordinator::NewStub(grpc::CreateCustomChannel(
            opt.coordinator, grpc::InsecureChannelCredentials(),
            ClientChannelArgs(-10 - k))));
      }
      for (int k = 0; k < opt.submit_threads; ++k) {
        submitters.emplace_back(SubmitLoop, submit_stubs[k].get(), k,
                                opt.submit_threads, rate, t0, &stop, &submitted[k],
                                &errors);
      }
    }
    std::this_thread::sleep_until(
        t0 + std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::duration<double>(opt.duration_s)));
    stop = true;
    for (std::thread& t : submitters) t.join();
    const SteadyTime t1 = std::chrono::steady_clock::now();
    const double cpu1 = pid > 0 ? ProcessCpuSeconds(pid).value_or(0) : 0;
    const double secs = MicrosBetween(t0, t1) / 1e6;
    phase.set_duration_s(secs);
    phase.set_coordinator_cpu_cores((cpu1 - cpu0) / secs);
    if (pid > 0) phase.set_coordinator_rss_bytes(ProcessRssBytes(pid).value_or(0));
    phase.set_heartbeats_sent(swarm.heartbeats_sent.load() - hb0);

    if (rate > 0) {
      std::vector<int64_t> ids;
      for (const auto& v : submitted) {
        for (const Submitted& s : v) ids.push_back(s.job_id);
      }
      swarm.WaitStarted(ids, absl::Seconds(10));
      auto started = swarm.Started();
      std::vector<double> ack_us, start_us;
      int64_t started_in_window = 0;
      for (const auto& v : submitted) {
        for (const Submitted& s : v) {
          ack_us.push_back(MicrosBetween(s.issued, s.acked));
          auto it = started.find(s.job_id);
          if (it == started.end()) continue;
          start_us.push_back(MicrosBetween(s.issued, it->second));
          if (it->second <= t1) ++started_in_window;
        }
      }
      phase.set_jobs_submitted(static_cast<int64_t>(ids.size()));
      phase.set_submit_errors(errors.load());
      phase.set_jobs_started_per_s(started_in_window / secs);
      *phase.mutable_submit_ack() = Summarize(ack_us, floor_p50_us);
      *phase.mutable_submit_to_started() = Summarize(start_us, floor_p50_us);
    }
    *phase.mutable_heartbeat() = heartbeat_latency();
    std::printf(
        "%-15s agents %6d  %5.1f s  coordinator CPU %.3f cores, RSS %.1f MiB  "
        "heartbeat p50 %.1f ms p99 %.1f ms",
        name.c_str(), opt.agents, secs, phase.coordinator_cpu_cores(),
        phase.coordinator_rss_bytes() / 1048576.0, phase.heartbeat().p50_us() / 1000,
        phase.heartbeat().p99_us() / 1000);
    if (rate > 0) {
      std::printf(
          "\n                jobs %lld (%.0f started/s of %.0f asked), submit ack p50 "
          "%.2f ms p99 %.2f ms, submit->started p50 %.2f ms p99 %.2f ms (%.1fx floor), "
          "errors %lld",
          static_cast<long long>(phase.jobs_submitted()), phase.jobs_started_per_s(), rate,
          phase.submit_ack().p50_us() / 1000, phase.submit_ack().p99_us() / 1000,
          phase.submit_to_started().p50_us() / 1000,
          phase.submit_to_started().p99_us() / 1000,
          phase.submit_to_started().p99_floor_multiple(),
          static_cast<long long>(phase.submit_errors()));
    }
    std::printf("\n");
    std::fflush(stdout);
    return phase;
  };

  // Let the registrations' writes settle and every agent heartbeat once.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  *result.add_phases() = measure_phase("heartbeat_only", 0);
  if (opt.rate > 0) *result.add_phases() = measure_phase("submit", opt.rate);

  stop_heartbeats = true;
  heartbeater.join();
  for (auto& a : agents) a->Cancel();
  result.mutable_host()->set_load_avg_1m_end(LoadAvg1m());
  if (absl::Status s = WriteJson(result, opt.out); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  // Streams end on cancel; their reactors must outlive OnDone.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::fflush(stdout);
  std::_Exit(0);
}

}  // namespace
}  // namespace trainctl::bench

int main(int argc, char** argv) {
  trainctl::bench::Options opt;
  CLI::App app{"trainctl-swarm: N simulated agents (fake GPUs, 1 Hz heartbeats, "
               "no-op tasks) against a running trainctl-coordinator; measures its "
               "CPU, RSS, heartbeat latency and submit->started latency.\n"
               "Example: trainctl-swarm --coordinator 127.0.0.1:50051 "
               "--coordinator-pid 1234 --agents 1000 --rate 2000 --out swarm.json"};
  app.add_option("--coordinator", opt.coordinator, "coordinator address host:port")
      ->capture_default_str();
  app.add_option("--coordinator-pid", opt.coordinator_pid,
                 "its process id, for CPU and RSS from /proc (0: not measured)");
  app.add_option("--agents", opt.agents, "simulated agents")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--gpus-per-agent", opt.gpus_per_agent, "fake GPUs per agent")
      ->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--connections", opt.connections,
                 "TCP connections the agent streams share (0: one per agent, up "
                 "to the open-file limit)");
  app.add_option("--duration-s", opt.duration_s, "seconds per phase")
      ->check(CLI::Range(0.5, 3600.0))->capture_default_str();
  app.add_option("--rate", opt.rate,
                 "jobs/s submitted in the submit phase (0: no submit phase)")
      ->check(CLI::Range(0.0, 1e6))->capture_default_str();
  app.add_option("--submit-threads", opt.submit_threads, "blocking submit clients")
      ->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--floor-calls", opt.floor_calls, "no-op calls for the transport floor")
      ->check(CLI::Range(10, 1000000))->capture_default_str();
  app.add_option("--out", opt.out, "write the result JSON here (default: stdout)");
  app.add_option("--note", opt.note, "free text stored with the result");
  CLI11_PARSE(app, argc, argv);
  // The load generator should not pay for Debian's Abseil deadlock detection
  // (see coordinator/main.cc).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return trainctl::bench::Run(opt);
}
