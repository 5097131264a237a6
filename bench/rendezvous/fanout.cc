// trainctl-bench-rendezvous: NCCL-bootstrap fan-out at scale (issue 7, part 3).
//
// Runs a coordinator in this process (the core over a MemoryStateStore and
// the real gRPC services on 127.0.0.1, StartCoordinatorServer: the same
// server as trainctl-coordinator), registers in-process fake agents (8 GPUs
// each, enough for every round's gang), and for each N of --ranks submits an
// N-rank gang (N/8 nodes x 8 GPUs). Its ranks are simulated over loopback
// gRPC: ranks 1..N-1 each send FetchUniqueId (the long-poll) on their own
// connection (pre-connected; at most --max-connections, then shared), and
// rank 0 publishes a 128-byte id with PublishUniqueId. Two rounds per N:
//
//   publish_after_last_request  all N-1 fetches are sent, then rank 0
//                               publishes: the long-poll fan-out;
//   publish_first               rank 0 publishes, then the N-1 fetches.
//
// The figure: from the last rank's request to every rank holding the id
// (issue 7 target: <= 250 ms at 4,096 ranks), also as a multiple of the
// transport floor (a no-op unary call on the same kind of server, measured
// in this run). The token comes from the StartTask the fake agents receive,
// as a real rank gets it in TRAINCTL_TOKEN.
//
// Example:
//   trainctl-bench-rendezvous --ranks 1024,4096 --out rendezvous.json

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/common/bench_util.h"
#include "common/clock.h"
#include "common/logging.h"
#include "coordinator/coordinator.h"
#include "coordinator/grpc_service.h"
#include "coordinator/state_store.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.grpc.pb.h"

namespace trainctl::bench {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

double MillisBetween(SteadyTime a, SteadyTime b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// An in-process agent's stream: remembers the TRAINCTL_TOKEN and attempt of
// each job it is told to start. Thread-safe.
class TokenCatcher : public coord::AgentConnection {
 public:
  void Send(const v1::CoordinatorMessage& msg) override {
    if (!msg.has_start_task()) return;
    absl::MutexLock lock(&mu_);
    const auto& env = msg.start_task().env();
    auto it = env.find("TRAINCTL_TOKEN");
    if (it != env.end()) {
      tokens_[msg.start_task().task().job_id()] = {msg.start_task().task().attempt(),
                                                    it->second};
    }
  }
  void Close(const absl::Status&) override {}
  // (attempt, token) of `job_id`; attempt -1 when no StartTask came.
  std::pair<int, std::string> Token(int64_t job_id) {
    absl::MutexLock lock(&mu_);
    auto it = tokens_.find(job_id);
    if (it == tokens_.end()) return {-1, ""};
    return it->second;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<int64_t, std::pair<int, std::string>> tokens_ ABSL_GUARDED_BY(mu_);
};

struct Options {
  std::vector<int> ranks = {1024, 4096};
  int max_connections = 4096;
  int floor_calls = 2000;
  std::string out;
  std::string note;
};

// One simulated rank's call.
struct Call {
  grpc::ClientContext ctx;
  v1::FetchUniqueIdRequest req;
  v1::FetchUniqueIdResponse resp;
  SteadyTime issued;
  SteadyTime done;
  bool ok = false;
};

class Bench {
 public:
  explicit Bench(const Options& opt) : opt_(opt) {}

  int Run() {
    rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
      nofile.rlim_cur = nofile.rlim_max;
      setrlimit(RLIMIT_NOFILE, &nofile);
    }
    // Each connection costs two descriptors here (client and server side).
    const int fd_budget =
        static_cast<int>((std::min<rlim_t>(nofile.rlim_cur, 1 << 20) - 256) / 2);
    connections_ = std::max(1, std::min(opt_.max_connections, fd_budget));

    v1::FanoutResult result;
    result.set_system("trainctl");
    *result.mutable_host() = HostNow();
    result.mutable_host()->set_note(opt_.note);

    auto ping = PingServer::Start();
    if (!ping.ok()) return Fail(ping.status());
    auto floor = MeasureFloor((*ping)->address(), opt_.floor_calls);
    if (!floor.ok()) return Fail(floor.status());
    ping->reset();
    floor_p50_us_ = floor->p50_us();
    *result.mutable_transport_floor() = *floor;
    std::printf("transport floor (no-op unary, %d calls): p50 %.0f us, p99 %.0f us\n",
                opt_.floor_calls, floor->p50_us(), floor->p99_us());

    coord::CoordinatorConfig config;
    config.node_timeout = absl::Hours(1);
    auto core = coord::Coordinator::Create(config, &store_, &clock_);
    if (!core.ok()) return Fail(core.status());
    core_ = std::move(*core);
    services_ = std::make_unique<coord::GrpcCoordinatorServices>(core_.get());
    int port = 0;
    auto server = coord::StartCoordinatorServer(*services_, "127.0.0.1:0", &port);
    if (!server.ok()) return Fail(server.status());
    address_ = absl::StrCat("127.0.0.1:", port);

    // Connections, opened before any round (ranks connect long before the
    // id exists).
    const int max_ranks = *std::max_element(opt_.ranks.begin(), opt_.ranks.end());
    const int needed = std::min(connections_, max_ranks);
    for (int c = 0; c < needed; ++c) {
      channels_.push_back(grpc::CreateCustomChannel(
          address_, grpc::InsecureChannelCredentials(), ClientChannelArgs(c)));
      stubs_.push_back(v1::Rendezvous::NewStub(channels_.back()));
    }
    for (auto& ch : channels_) {
      if (!ch->WaitForConnected(std::chrono::system_clock::now() +
                                std::chrono::seconds(30))) {
        return Fail(absl::UnavailableError(absl::StrCat("cannot connect to ", address_)));
      }
    }
    std::printf("coordinator on %s, %zu connections open\n", address_.c_str(),
                channels_.size());

    for (int n : opt_.ranks) {
      for (bool publish_first : {false, true}) {
        auto round = RunRound(n, publish_first);
        if (!round.ok()) return Fail(round.status());
        *result.add_rounds() = *round;
        std::printf(
            "%5d ranks %-27s last request -> all holding %7.2f ms (%.0fx floor)%s  "
            "(publish call %.1f ms)  per rank p50 %.2f ms p99 %.2f ms  errors %lld\n",
            n, round->mode().c_str(), round->last_request_to_all_ms(),
            round->floor_multiple(),
            publish_first ? ""
                          : absl::StrFormat("  publish -> all %.2f ms",
                                            round->publish_to_all_ms()).c_str(),
            round->publish_call_ms(), round->per_rank().p50_us() / 1000,
            round->per_rank().p99_us() / 1000, static_cast<long long>(round->errors()));
        std::fflush(stdout);
      }
    }
    result.mutable_host()->set_load_avg_1m_end(LoadAvg1m());
    if (absl::Status s = WriteJson(result, opt_.out); !s.ok()) return Fail(s);
    (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    for (const v1::FanoutRound& r : result.rounds()) {
      if (r.errors() > 0) {
        std::fprintf(stderr, "%lld of %d ranks did not get the id\n",
                     static_cast<long long>(r.errors()), r.ranks() - 1);
        return 2;
      }
    }
    return 0;
  }

 private:
  int Fail(const absl::Status& s) {
    std::fprintf(stderr, "trainctl-bench-rendezvous: %s\n", s.ToString().c_str());
    return 1;
  }

  // Registers n/8 fresh fake nodes, submits an n-rank gang on them and
  // returns (job id, attempt, token).
  absl::StatusOr<std::tuple<int64_t, int, std::string>> PlaceGang(int n) {
    constexpr int kGpus = 8;
    const int nodes = (n + kGpus - 1) / kGpus;
    for (int i = 0; i < nodes; ++i) {
      v1::RegisterNode reg;
      v1::Node* node = reg.mutable_node();
      node->set_name(absl::StrCat("fan-", next_node_, "-", i));
      node->set_address(absl::StrCat("10.0.", i / 250, ".", i % 250 + 1));
      node->set_cpu_count(64);
      node->set_port_min(29500);
      node->set_port_max(29999);
      node->set_fake_gpus(true);
      for (int g = 0; g < kGpus; ++g) {
        v1::Gpu* gpu = node->add_gpus();
        gpu->set_index(g);
        gpu->set_uuid(absl::StrCat("GPU-fan-", next_node_, "-", i, "-", g));
        gpu->set_name("NVIDIA H100 (fake)");
        gpu->set_memory_total_bytes(int64_t{80} << 30);
      }
      if (absl::Status s = core_->RegisterAgent(reg, &catcher_); !s.ok()) return s;
    }
    ++next_node_;
    v1::JobSpec spec;
    spec.set_name(absl::StrCat("fanout-", n));
    spec.add_command("true");
    if (n % kGpus == 0) {
      spec.set_nodes(nodes);
      spec.set_gpus_per_node(kGpus);
    } else {
      spec.set_gpus(n);
    }
    absl::StatusOr<int64_t> id = core_->SubmitJob(spec, "");
    if (!id.ok()) return id.status();
    auto [attempt, token] = catcher_.Token(*id);
    if (attempt < 0) {
      absl::StatusOr<v1::Job> job = core_->GetJob(*id);
      return absl::InternalError(absl::StrCat(
          "the ", n, "-rank gang was not placed: ", job.ok() ? job->reason() : ""));
    }
    return std::make_tuple(*id, attempt, token);
  }

  absl::Status Publish(int64_t job, int attempt, const std::string& token) {
    v1::PublishUniqueIdRequest req;
    req.set_job_id(job);
    req.set_attempt(attempt);
    req.set_rank(0);
    req.set_token(token);
    req.set_unique_id(std::string(coord::kNcclUniqueIdBytes, '\x5a'));
    v1::PublishUniqueIdResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status st = stubs_[0]->PublishUniqueId(&ctx, req, &resp);
    if (!st.ok()) return absl::UnavailableError("PublishUniqueId: " + st.error_message());
    return absl::OkStatus();
  }

  absl::StatusOr<v1::FanoutRound> RunRound(int n, bool publish_first) {
    auto placed = PlaceGang(n);
    if (!placed.ok()) return placed.status();
    auto [job, attempt, token] = *placed;

    std::vector<std::unique_ptr<Call>> calls;
    for (int r = 1; r < n; ++r) {
      auto c = std::make_unique<Call>();
      c->req.set_job_id(job);
      c->req.set_attempt(attempt);
      c->req.set_rank(r);
      c->req.set_token(token);
      c->req.set_timeout_ms(60000);
      c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(90));
      calls.push_back(std::move(c));
    }
    absl::Mutex mu;
    int remaining = n - 1;
    SteadyTime publish_at{}, published{};
    if (publish_first) {
      publish_at = std::chrono::steady_clock::now();
      if (absl::Status s = Publish(job, attempt, token); !s.ok()) return s;
      published = std::chrono::steady_clock::now();
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      Call* c = calls[i].get();
      c->issued = std::chrono::steady_clock::now();
      stubs_[i % stubs_.size()]->async()->FetchUniqueId(
          &c->ctx, &c->req, &c->resp, [c, &mu, &remaining](grpc::Status st) {
            c->done = std::chrono::steady_clock::now();
            c->ok = st.ok() && c->resp.unique_id().size() == coord::kNcclUniqueIdBytes;
            absl::MutexLock lock(&mu);
            --remaining;
          });
    }
    const SteadyTime last_request = calls.empty() ? std::chrono::steady_clock::now()
                                                  : calls.back()->issued;
    if (!publish_first) {
      publish_at = std::chrono::steady_clock::now();
      if (absl::Status s = Publish(job, attempt, token); !s.ok()) return s;
      published = std::chrono::steady_clock::now();
    }
    {
      absl::MutexLock lock(&mu);
      auto all_done = [&remaining]() { return remaining == 0; };
      if (!mu.AwaitWithTimeout(absl::Condition(&all_done), absl::Seconds(120))) {
        return absl::DeadlineExceededError(
            absl::StrCat(remaining, " of ", n - 1, " fetches never returned"));
      }
    }
    SteadyTime last_done = last_request;
    std::vector<double> per_rank_us;
    int64_t errors = 0;
    for (const auto& c : calls) {
      last_done = std::max(last_done, c->done);
      per_rank_us.push_back(MillisBetween(c->issued, c->done) * 1000);
      if (!c->ok) ++errors;
    }
    v1::FanoutRound round;
    round.set_ranks(n);
    round.set_mode(publish_first ? "publish_first" : "publish_after_last_request");
    round.set_last_request_to_all_ms(MillisBetween(last_request, last_done));
    if (!publish_first) round.set_publish_to_all_ms(MillisBetween(publish_at, last_done));
    *round.mutable_per_rank() = Summarize(per_rank_us, floor_p50_us_);
    round.set_errors(errors);
    round.set_publish_call_ms(MillisBetween(publish_at, published));
    round.set_connections(static_cast<int>(std::min<size_t>(stubs_.size(), n - 1)));
    if (floor_p50_us_ > 0) {
      round.set_floor_multiple(round.last_request_to_all_ms() * 1000 / floor_p50_us_);
    }
    return round;
  }

  const Options opt_;
  int connections_ = 1;
  double floor_p50_us_ = 0;
  RealClock clock_;
  coord::MemoryStateStore store_;
  TokenCatcher catcher_;
  std::unique_ptr<coord::Coordinator> core_;
  std::unique_ptr<coord::GrpcCoordinatorServices> services_;
  std::string address_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs_;
  int next_node_ = 0;
};

}  // namespace
}  // namespace trainctl::bench

int main(int argc, char** argv) {
  trainctl::bench::Options opt;
  CLI::App app{"trainctl-bench-rendezvous: N simulated ranks of one gang fetch the "
               "ncclUniqueId from an in-process coordinator over loopback gRPC; "
               "prints and writes the fan-out time.\n"
               "Example: trainctl-bench-rendezvous --ranks 1024,4096 --out r.json"};
  app.add_option("--ranks", opt.ranks, "gang sizes, comma-separated")
      ->delimiter(',')->check(CLI::Range(2, 65536))->capture_default_str();
  app.add_option("--max-connections", opt.max_connections,
                 "at most this many rank connections (then shared); also capped "
                 "by the open-file limit")
      ->check(CLI::Range(1, 65536))->capture_default_str();
  app.add_option("--floor-calls", opt.floor_calls, "no-op calls for the transport floor")
      ->check(CLI::Range(10, 1000000))->capture_default_str();
  app.add_option("--out", opt.out, "write the result JSON here (default: stdout)");
  app.add_option("--note", opt.note, "free text stored with the result");
  bool no_fix = false;
  app.add_flag("--abseil-deadlock-detection", no_fix,
               "leave Abseil's Mutex deadlock detection on (as before the fix), "
               "to measure what it costs");
  CLI11_PARSE(app, argc, argv);
  trainctl::InitLogging("bench-rendezvous", "warn");
  // As trainctl-coordinator does (coordinator/main.cc): Debian's Abseil keeps
  // a lock-order graph on every Mutex acquisition unless told not to.
  if (!no_fix) absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  trainctl::bench::Bench bench(opt);
  return bench.Run();
}
