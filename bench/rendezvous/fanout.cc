// trainctl-bench-rendezvous: NCCL-bootstrap fan-out at scale.
//
// Runs a coordinator in this process (the core over a MemoryStateStore and
// the real gRPC services on 127.0.0.1, StartCoordinatorServer: the same
// server as trainctl-coordinator), registers in-process fake agents (8 GPUs
// each, enough for every round's gang), and for each N of --ranks submits an
// N-rank gang (N/8 nodes x 8 GPUs). Its ranks are simulated over loopback
// gRPC in --procs rank processes (forked at start, before gRPC, so they
// share no gRPC threads, timers or locks with the coordinator, as ranks on
// other hosts would not; tcpstore_fanout.py spreads its clients the same
// way): ranks 1..N-1 each send FetchUniqueId (the long-poll) on their own
// connection (pre-connected; at most --max-connections, then shared), and
// rank 0 publishes a 128-byte id with PublishUniqueId from the coordinator's
// process. The rank processes are driven over pipes (FanoutWorkerCommand /
// FanoutWorkerReport in bench.proto) and time their calls with the host's
// monotonic clock, which every process shares. Two rounds per N:
//
//   publish_after_last_request  all N-1 fetches are sent, then rank 0
//                               publishes: the long-poll fan-out;
//   publish_first               rank 0 publishes, then the N-1 fetches.
//
// The figure: from the last rank's request to every rank holding the id
// (target: <= 250 ms at 4,096 ranks), also as a multiple of the
// transport floor (a no-op unary call on the same kind of server, measured
// in this run). The token comes from the StartTask the fake agents receive,
// as a real rank gets it in TRAINCTL_TOKEN.
//
// Example:
//   trainctl-bench-rendezvous --ranks 1024,4096 --out rendezvous.json

#include <sys/wait.h>
#include <unistd.h>

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
#include "coordinator/job_spec.h"
#include "coordinator/rendezvous.h"
#include "coordinator/state_store.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/util/delimited_message_util.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.grpc.pb.h"
#include "worker/nccl/rendezvous_client.h"
#include "worker/nccl/rendezvous_relay.h"
#include "worker/nccl/rendezvous_relay_server.h"

namespace trainctl::bench {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

double MillisBetween(SteadyTime a, SteadyTime b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int64_t SteadyNanos(SteadyTime t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch())
      .count();
}

SteadyTime FromSteadyNanos(int64_t ns) {
  return SteadyTime(std::chrono::duration_cast<SteadyTime::duration>(
      std::chrono::nanoseconds(ns)));
}

// One end of a pipe to or from a rank process: length-delimited protobuf
// messages (protobuf's delimited_message_util).
class MessagePipe {
 public:
  MessagePipe(int read_fd, int write_fd) : in_(read_fd), write_fd_(write_fd) {
    in_.SetCloseOnDelete(true);
  }
  ~MessagePipe() { close(write_fd_); }
  // Errors: UNAVAILABLE when the other side is gone.
  absl::Status Send(const google::protobuf::Message& msg) {
    if (!google::protobuf::util::SerializeDelimitedToFileDescriptor(msg, write_fd_)) {
      return absl::UnavailableError("the rank process's pipe is closed");
    }
    return absl::OkStatus();
  }
  // Errors: OUT_OF_RANGE at a clean end of the stream; UNAVAILABLE otherwise.
  absl::Status Receive(google::protobuf::Message* msg) {
    bool clean_eof = false;
    if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(msg, &in_,
                                                                  &clean_eof)) {
      return clean_eof ? absl::OutOfRangeError("end of stream")
                       : absl::UnavailableError("the rank process's pipe broke");
    }
    return absl::OkStatus();
  }

 private:
  google::protobuf::io::FileInputStream in_;
  const int write_fd_;
};

// An in-process agent's stream: remembers the TRAINCTL_TOKEN and attempt of
// each job it is told to start. Thread-safe.
class TokenCatcher : public coord::AgentConnection {
 public:
  void Send(v1::CoordinatorMessage msg) override {
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
  // Relay rounds: simulated nodes of ranks_per_node ranks, one relay each.
  std::vector<int> relay_nodes;
  int ranks_per_node = 8;
  int max_connections = 4096;
  int procs = 1;
  int floor_calls = 2000;
  int fanout_threads = 0;
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

// A rank process: connects when told, then runs rounds of FetchUniqueId
// calls and reports their times, until its command pipe closes.
class RankProcess {
 public:
  explicit RankProcess(MessagePipe* pipe) : pipe_(pipe) {}

  // Returns the process's exit status: 0 at the end of the commands.
  int Run() {
    RaiseOpenFileLimit();
    v1::FanoutWorkerCommand cmd;
    while (true) {
      // Parsing a delimited message merges into it: without the Clear, each
      // round's ranks would add to the last round's.
      cmd.Clear();
      absl::Status s = pipe_->Receive(&cmd);
      if (absl::IsOutOfRange(s)) return 0;
      if (!s.ok()) return 1;
      v1::FanoutWorkerReport report;
      absl::Status done = cmd.ranks().empty()       ? Connect(cmd)
                          : cmd.ranks_per_relay() > 0 ? RelayRound(cmd, &report)
                                                      : Round(cmd, &report);
      if (!done.ok()) report.set_error(done.ToString());
      if (!pipe_->Send(report).ok()) return 1;
    }
  }

 private:
  absl::Status Connect(const v1::FanoutWorkerCommand& cmd) {
    for (int c = 0; c < std::max(1, cmd.connections()); ++c) {
      channels_.push_back(grpc::CreateCustomChannel(
          cmd.address(), grpc::InsecureChannelCredentials(), ClientChannelArgs(c)));
      stubs_.push_back(v1::Rendezvous::NewStub(channels_.back()));
    }
    for (auto& ch : channels_) {
      if (!ch->WaitForConnected(std::chrono::system_clock::now() +
                                std::chrono::seconds(60))) {
        return absl::UnavailableError(absl::StrCat("cannot connect to ", cmd.address()));
      }
    }
    return absl::OkStatus();
  }

  // Issues every fetch, sends the first report (issue times), waits for
  // all to return and fills `report` with the second.
  absl::Status Round(const v1::FanoutWorkerCommand& cmd, v1::FanoutWorkerReport* report) {
    if (stubs_.empty()) return absl::FailedPreconditionError("not connected");
    std::vector<std::unique_ptr<Call>> calls;
    for (int r : cmd.ranks()) {
      auto c = std::make_unique<Call>();
      c->req.set_job_id(cmd.job_id());
      c->req.set_attempt(cmd.attempt());
      c->req.set_rank(r);
      c->req.set_token(cmd.token());
      c->req.set_timeout_ms(60000);
      c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(90));
      calls.push_back(std::move(c));
    }
    absl::Mutex mu;
    size_t remaining = calls.size();
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
    v1::FanoutWorkerReport issued;
    for (const auto& c : calls) issued.add_issued_ns(SteadyNanos(c->issued));
    // On a failed send the calls still finish below: they reference `mu`.
    const absl::Status sent = pipe_->Send(issued);
    auto all_done = [&remaining]() { return remaining == 0; };
    bool finished;
    {
      absl::MutexLock lock(&mu);
      finished = mu.AwaitWithTimeout(absl::Condition(&all_done), absl::Seconds(120));
    }
    if (!finished) {
      // The calls reference `mu`: cancel them (their 90 s deadline has
      // passed anyway) and wait until every callback has run.
      for (auto& c : calls) c->ctx.TryCancel();
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&all_done));
      return absl::DeadlineExceededError("fetches never returned in a rank process");
    }
    if (!sent.ok()) return sent;
    for (const auto& c : calls) {
      report->add_issued_ns(SteadyNanos(c->issued));
      report->add_done_ns(SteadyNanos(c->done));
      report->add_ok(c->ok);
    }
    return absl::OkStatus();
  }

  // A relay round: one RendezvousRelay per simulated node, sharing the
  // process's channels as upstreams; each rank's fetch is an in-process call
  // into its node's relay.
  absl::Status RelayRound(const v1::FanoutWorkerCommand& cmd,
                          v1::FanoutWorkerReport* report) {
    if (channels_.empty()) return absl::FailedPreconditionError("not connected");
    if (upstreams_.empty()) {
      for (auto& ch : channels_) {
        upstreams_.push_back(std::make_unique<worker::GrpcRendezvousUpstream>(ch));
      }
    }
    // Rounds beyond the coordinator's job limits go to the table-only
    // server (TableRendezvousService): channels of their own.
    std::vector<std::shared_ptr<grpc::Channel>> round_channels;
    std::vector<std::unique_ptr<worker::GrpcRendezvousUpstream>> round_upstreams;
    std::vector<std::unique_ptr<worker::GrpcRendezvousUpstream>>* upstreams = &upstreams_;
    if (!cmd.address().empty()) {
      for (int c = 0; c < std::max(1, cmd.connections()); ++c) {
        round_channels.push_back(grpc::CreateCustomChannel(
            cmd.address(), grpc::InsecureChannelCredentials(), ClientChannelArgs(c)));
      }
      for (auto& ch : round_channels) {
        if (!ch->WaitForConnected(std::chrono::system_clock::now() +
                                  std::chrono::seconds(60))) {
          return absl::UnavailableError(absl::StrCat("cannot connect to ", cmd.address()));
        }
        round_upstreams.push_back(std::make_unique<worker::GrpcRendezvousUpstream>(ch));
      }
      upstreams = &round_upstreams;
    }
    const int per = cmd.ranks_per_relay();
    absl::flat_hash_map<int, std::unique_ptr<worker::RendezvousRelay>> relays;
    for (int r : cmd.ranks()) {
      auto& relay = relays[r / per];
      if (relay == nullptr) {
        relay = std::make_unique<worker::RendezvousRelay>(
            (*upstreams)[(r / per) % upstreams->size()].get());
      }
      relay->AddRank(cmd.job_id(), cmd.attempt(), cmd.token(), r);
    }
    struct RelayCall {
      v1::FetchUniqueIdRequest req;
      SteadyTime issued;
      SteadyTime done;
      bool ok = false;
    };
    std::vector<RelayCall> calls(cmd.ranks_size());
    absl::Mutex mu;
    size_t remaining = calls.size();
    for (int i = 0; i < cmd.ranks_size(); ++i) {
      RelayCall& c = calls[i];
      c.req.set_job_id(cmd.job_id());
      c.req.set_attempt(cmd.attempt());
      c.req.set_rank(cmd.ranks(i));
      c.req.set_token(cmd.token());
      c.req.set_timeout_ms(60000);
    }
    for (RelayCall& c : calls) {
      c.issued = std::chrono::steady_clock::now();
      relays[c.req.rank() / per]->FetchAsync(
          c.req, absl::Now(),
          [&c, &mu, &remaining](absl::StatusOr<std::vector<std::string>> ids) {
            c.done = std::chrono::steady_clock::now();
            c.ok = ids.ok() && ids->size() == 1 &&
                   ids->front().size() == coord::kNcclUniqueIdBytes;
            absl::MutexLock lock(&mu);
            --remaining;
          });
    }
    v1::FanoutWorkerReport issued;
    for (const RelayCall& c : calls) issued.add_issued_ns(SteadyNanos(c.issued));
    const absl::Status sent = pipe_->Send(issued);
    auto all_done = [&remaining]() { return remaining == 0; };
    bool finished;
    {
      absl::MutexLock lock(&mu);
      finished = mu.AwaitWithTimeout(absl::Condition(&all_done), absl::Seconds(120));
    }
    if (!finished) {
      // The relays abort their waiters as they go; then nothing refers to
      // `calls` any more.
      relays.clear();
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&all_done));
      return absl::DeadlineExceededError("relayed fetches never returned");
    }
    if (!sent.ok()) return sent;
    int64_t upstream = 0;
    for (auto& [node, relay] : relays) upstream += relay->Stats().upstream_fetches;
    for (const RelayCall& c : calls) {
      report->add_issued_ns(SteadyNanos(c.issued));
      report->add_done_ns(SteadyNanos(c.done));
      report->add_ok(c.ok);
    }
    report->set_upstream_fetches(upstream);
    return absl::OkStatus();
  }

  MessagePipe* const pipe_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs_;
  std::vector<std::unique_ptr<worker::GrpcRendezvousUpstream>> upstreams_;
};

// The coordinator as the local-hop measurement's relay sees it: fetches
// wait (answered with ABORTED at the end), publishes succeed at once.
class ParkingUpstream : public worker::RendezvousUpstream {
 public:
  ~ParkingUpstream() override { Release(); }
  void FetchAsync(const v1::FetchUniqueIdRequest&, worker::UniqueIdsDone done) override {
    absl::MutexLock lock(&mu_);
    parked_.push_back(std::move(done));
  }
  void PublishAsync(const v1::PublishUniqueIdRequest&,
                    absl::AnyInvocable<void(absl::Status)> done) override {
    done(absl::OkStatus());
  }
  void Release() {
    std::vector<worker::UniqueIdsDone> parked;
    {
      absl::MutexLock lock(&mu_);
      parked.swap(parked_);
    }
    for (auto& d : parked) d(absl::AbortedError("measurement over"));
  }

 private:
  absl::Mutex mu_;
  std::vector<worker::UniqueIdsDone> parked_ ABSL_GUARDED_BY(mu_);
};

// One node's local hop through a real relay server on a unix socket: `per`
// - 1 gRPC clients wait, rank 0 publishes through the socket; from the
// publish to all holding the id, ms, median of `runs`.
absl::StatusOr<double> MeasureLocalHop(int per, int runs) {
  char dir[] = "/tmp/tc-bench-relay-XXXXXX";
  if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string socket = absl::StrCat(dir, "/rendezvous.sock");
  std::vector<double> ms;
  for (int run = 0; run < runs; ++run) {
    ParkingUpstream upstream;
    worker::RendezvousRelay relay(&upstream);
    for (int r = 0; r < per; ++r) relay.AddRank(1, run, "tok", r);
    auto server = worker::RendezvousRelayServer::Start(socket, &relay);
    if (!server.ok()) return server.status();
    auto channel = grpc::CreateChannel((*server)->target(),
                                       grpc::InsecureChannelCredentials());
    auto stub = v1::Rendezvous::NewStub(channel);
    channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
    std::vector<std::unique_ptr<Call>> calls;
    absl::Mutex mu;
    int remaining = per - 1;
    for (int r = 1; r < per; ++r) {
      auto c = std::make_unique<Call>();
      c->req.set_job_id(1);
      c->req.set_attempt(run);
      c->req.set_rank(r);
      c->req.set_token("tok");
      c->req.set_timeout_ms(60000);
      c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      stub->async()->FetchUniqueId(&c->ctx, &c->req, &c->resp,
                                   [cp = c.get(), &mu, &remaining](grpc::Status st) {
                                     cp->done = std::chrono::steady_clock::now();
                                     cp->ok = st.ok();
                                     absl::MutexLock lock(&mu);
                                     --remaining;
                                   });
      calls.push_back(std::move(c));
    }
    // Every fetch parked at the relay (its one upstream fetch is out).
    const absl::Time wait_until = absl::Now() + absl::Seconds(10);
    while (relay.Stats().local_fetches < per - 1 && absl::Now() < wait_until) {
      absl::SleepFor(absl::Microseconds(200));
    }
    v1::PublishUniqueIdRequest pub;
    pub.set_job_id(1);
    pub.set_attempt(run);
    pub.set_rank(0);
    pub.set_token("tok");
    pub.set_unique_id(std::string(coord::kNcclUniqueIdBytes, '\x5a'));
    v1::PublishUniqueIdResponse resp;
    grpc::ClientContext ctx;
    const SteadyTime t0 = std::chrono::steady_clock::now();
    grpc::Status st = stub->PublishUniqueId(&ctx, pub, &resp);
    {
      absl::MutexLock lock(&mu);
      auto zero = [&remaining]() { return remaining == 0; };
      mu.Await(absl::Condition(&zero));
    }
    if (!st.ok()) return absl::UnavailableError("local publish: " + st.error_message());
    SteadyTime last = t0;
    for (auto& c : calls) {
      if (!c->ok) return absl::UnavailableError("a local fetch failed");
      last = std::max(last, c->done);
    }
    ms.push_back(MillisBetween(t0, last));
    upstream.Release();
  }
  rmdir(dir);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The coordinator's rendezvous core (coord::RendezvousTable, the same
// fan-out) behind the Rendezvous service, bound as the coordinator's
// RendezvousApi binds it (coordinator/grpc_service.cc), for relay rounds
// larger than a job may be (JobSpec: at most coord::kMaxGpus GPUs, 1,024
// nodes): their group is opened here directly instead of by placing a gang.
class TableRendezvousService : public v1::Rendezvous::CallbackService {
 public:
  explicit TableRendezvousService(coord::RendezvousTable* table) : table_(table) {}

  grpc::ServerUnaryReactor* PublishUniqueId(grpc::CallbackServerContext* ctx,
                                            const v1::PublishUniqueIdRequest* req,
                                            v1::PublishUniqueIdResponse*) override {
    auto* reactor = ctx->DefaultReactor();
    absl::Status s = table_->Publish(req->job_id(), req->attempt(), req->rank(),
                                     req->token(), req->unique_id(), req->id_index(),
                                     req->id_count());
    reactor->Finish(grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                                 std::string(s.message())));
    return reactor;
  }

  grpc::ServerUnaryReactor* FetchUniqueId(grpc::CallbackServerContext* ctx,
                                          const v1::FetchUniqueIdRequest* req,
                                          v1::FetchUniqueIdResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    fetches_.fetch_add(1, std::memory_order_relaxed);
    coord::RendezvousTable::FetchOptions options;
    options.relayed_ranks.assign(req->relayed_ranks().begin(), req->relayed_ranks().end());
    options.id_count = req->id_count();
    options.arrivals_only = req->arrivals_only();
    table_->FetchIdsAsync(
        req->job_id(), req->attempt(), req->rank(), req->token(), absl::Now(),
        absl::Milliseconds(req->timeout_ms()), options,
        [reactor, resp](absl::StatusOr<std::vector<std::string>> ids) {
          if (ids.ok() && !ids->empty()) resp->set_unique_id(ids->front());
          reactor->Finish(grpc::Status(static_cast<grpc::StatusCode>(ids.status().code()),
                                       std::string(ids.status().message())));
        });
    return reactor;
  }

  int64_t fetches() const { return fetches_.load(std::memory_order_relaxed); }

 private:
  coord::RendezvousTable* const table_;
  std::atomic<int64_t> fetches_{0};
};

// A forked rank process, seen from the coordinator's process.
struct RankWorker {
  pid_t pid = -1;
  std::unique_ptr<MessagePipe> pipe;
};

// Forks `n` rank processes (call before anything starts gRPC in this
// process). Each runs RankProcess and exits. Errors: INTERNAL when pipe or
// fork fails.
absl::StatusOr<std::vector<RankWorker>> StartRankProcesses(int n) {
  std::vector<RankWorker> workers;
  for (int w = 0; w < n; ++w) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) {
      return absl::InternalError("pipe failed");
    }
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      close(to_child[1]);
      close(from_child[0]);
      workers.clear();  // the parent's ends of earlier workers' pipes
      MessagePipe pipe_to_parent(to_child[0], from_child[1]);
      _exit(RankProcess(&pipe_to_parent).Run());
    }
    close(to_child[0]);
    close(from_child[1]);
    workers.push_back(
        RankWorker{pid, std::make_unique<MessagePipe>(from_child[0], to_child[1])});
  }
  return workers;
}

class Bench {
 public:
  Bench(const Options& opt, std::vector<RankWorker> workers)
      : opt_(opt), workers_(std::move(workers)) {}

  ~Bench() {
    for (RankWorker& w : workers_) {
      w.pipe.reset();  // EOF on its commands: it exits
      int status = 0;
      waitpid(w.pid, &status, 0);
    }
  }

  int Run() {
    // Each connection costs a descriptor here (the server side) and one in
    // its rank process.
    connections_ =
        std::max(1, std::min(opt_.max_connections, RaiseOpenFileLimit() - 256));

    v1::FanoutResult result;
    result.set_system("trainctl");
    result.set_rank_processes(static_cast<int>(workers_.size()));
    *result.mutable_host() = HostNow();
    result.mutable_host()->set_note(absl::StrCat(
        opt_.note, opt_.note.empty() ? "" : "; ", "fanout_threads ", opt_.fanout_threads));

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
    config.rendezvous_fanout_threads = opt_.fanout_threads;
    auto core = coord::Coordinator::Create(config, &store_, &clock_);
    if (!core.ok()) return Fail(core.status());
    core_ = std::move(*core);
    services_ = std::make_unique<coord::GrpcCoordinatorServices>(core_.get());
    int port = 0;
    auto server = coord::StartCoordinatorServer(*services_, "127.0.0.1:0", &port);
    if (!server.ok()) return Fail(server.status());
    address_ = absl::StrCat("127.0.0.1:", port);

    // Connections, opened before any round (ranks connect long before the
    // id exists): rank 0's here, the others' in the rank processes.
    publish_channel_ = grpc::CreateCustomChannel(
        address_, grpc::InsecureChannelCredentials(), ClientChannelArgs(-1));
    publish_stub_ = v1::Rendezvous::NewStub(publish_channel_);
    int max_callers = opt_.ranks.empty()
                          ? 2
                          : *std::max_element(opt_.ranks.begin(), opt_.ranks.end());
    for (int nodes : opt_.relay_nodes) max_callers = std::max(max_callers, nodes + 1);
    const int needed = std::min(connections_, max_callers - 1);
    const int procs = static_cast<int>(workers_.size());
    for (int w = 0; w < procs; ++w) {
      v1::FanoutWorkerCommand connect;
      connect.set_address(address_);
      connect.set_connections(needed / procs + (w < needed % procs ? 1 : 0));
      if (absl::Status s = workers_[w].pipe->Send(connect); !s.ok()) return Fail(s);
    }
    for (RankWorker& w : workers_) {
      v1::FanoutWorkerReport ack;
      if (absl::Status s = w.pipe->Receive(&ack); !s.ok()) return Fail(s);
      if (!ack.error().empty()) return Fail(absl::UnavailableError(ack.error()));
    }
    connections_open_ = needed;
    std::printf("coordinator on %s, %d connections open from %d rank processes\n",
                address_.c_str(), needed, procs);

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
    double local_hop_ms = 0;
    if (!opt_.relay_nodes.empty()) {
      auto hop = MeasureLocalHop(opt_.ranks_per_node, 20);
      if (!hop.ok()) return Fail(hop.status());
      local_hop_ms = *hop;
      std::printf("local hop (one node: %d ranks over a unix-socket relay, publish "
                  "-> all holding): median %.2f ms\n",
                  opt_.ranks_per_node, local_hop_ms);
    }
    for (int nodes : opt_.relay_nodes) {
      auto round = RunRelayRound(nodes);
      if (!round.ok()) return Fail(round.status());
      round->set_local_hop_ms(local_hop_ms);
      *result.add_rounds() = *round;
      std::printf(
          "%5d ranks relay (%d nodes x %d)     last request -> all holding %7.2f ms  "
          "publish -> all %.2f ms  coordinator fetches %lld  errors %lld\n",
          round->ranks(), nodes, opt_.ranks_per_node, round->last_request_to_all_ms(),
          round->publish_to_all_ms(), static_cast<long long>(round->coordinator_fetches()),
          static_cast<long long>(round->errors()));
      std::fflush(stdout);
    }
    result.mutable_host()->set_load_avg_1m_end(LoadAvg1m());
    if (absl::Status s = WriteJson(result, opt_.out); !s.ok()) return Fail(s);
    (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    if (table_server_ != nullptr) {
      table_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    }
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
    grpc::Status st = publish_stub_->PublishUniqueId(&ctx, req, &resp);
    if (!st.ok()) return absl::UnavailableError("PublishUniqueId: " + st.error_message());
    return absl::OkStatus();
  }

  absl::StatusOr<v1::FanoutRound> RunRound(int n, bool publish_first) {
    auto placed = PlaceGang(n);
    if (!placed.ok()) return placed.status();
    auto [job, attempt, token] = *placed;

    SteadyTime publish_at{}, published{};
    if (publish_first) {
      publish_at = std::chrono::steady_clock::now();
      if (absl::Status s = Publish(job, attempt, token); !s.ok()) return s;
      published = std::chrono::steady_clock::now();
    }
    // Ranks 1..n-1 in contiguous slices, one per rank process.
    const int procs = static_cast<int>(workers_.size());
    const int fetchers = n - 1;
    std::vector<int> active;  // rank processes with fetches this round
    for (int w = 0; w < procs; ++w) {
      v1::FanoutWorkerCommand cmd;
      cmd.set_job_id(job);
      cmd.set_attempt(attempt);
      cmd.set_token(token);
      const int begin = 1 + static_cast<int>(int64_t{fetchers} * w / procs);
      const int end = 1 + static_cast<int>(int64_t{fetchers} * (w + 1) / procs);
      for (int r = begin; r < end; ++r) cmd.add_ranks(r);
      if (cmd.ranks().empty()) continue;
      if (absl::Status s = workers_[w].pipe->Send(cmd); !s.ok()) return s;
      active.push_back(w);
    }
    // First reports: every fetch issued.
    SteadyTime last_request = std::chrono::steady_clock::now();
    bool any_issued = false;
    for (int w : active) {
      v1::FanoutWorkerReport issued;
      if (absl::Status s = workers_[w].pipe->Receive(&issued); !s.ok()) return s;
      if (!issued.error().empty()) return absl::UnavailableError(issued.error());
      for (int64_t ns : issued.issued_ns()) {
        const SteadyTime t = FromSteadyNanos(ns);
        if (!any_issued || t > last_request) last_request = t;
        any_issued = true;
      }
    }
    if (!publish_first) {
      publish_at = std::chrono::steady_clock::now();
      if (absl::Status s = Publish(job, attempt, token); !s.ok()) return s;
      published = std::chrono::steady_clock::now();
    }
    // Second reports: every fetch returned.
    SteadyTime last_done = last_request;
    std::vector<double> per_rank_us;
    int64_t errors = 0;
    for (int w : active) {
      v1::FanoutWorkerReport done;
      if (absl::Status s = workers_[w].pipe->Receive(&done); !s.ok()) return s;
      if (!done.error().empty()) return absl::DeadlineExceededError(done.error());
      for (int i = 0; i < done.done_ns_size(); ++i) {
        const SteadyTime issued = FromSteadyNanos(done.issued_ns(i));
        const SteadyTime returned = FromSteadyNanos(done.done_ns(i));
        last_done = std::max(last_done, returned);
        per_rank_us.push_back(MillisBetween(issued, returned) * 1000);
        if (!done.ok(i)) ++errors;
      }
    }
    v1::FanoutRound round;
    round.set_ranks(n);
    round.set_mode(publish_first ? "publish_first" : "publish_after_last_request");
    round.set_last_request_to_all_ms(MillisBetween(last_request, last_done));
    if (!publish_first) round.set_publish_to_all_ms(MillisBetween(publish_at, last_done));
    *round.mutable_per_rank() = Summarize(per_rank_us, floor_p50_us_);
    round.set_errors(errors);
    round.set_publish_call_ms(MillisBetween(publish_at, published));
    round.set_connections(std::min(connections_open_, fetchers));
    if (floor_p50_us_ > 0) {
      round.set_floor_multiple(round.last_request_to_all_ms() * 1000 / floor_p50_us_);
    }
    return round;
  }

  // A relay round: nodes x ranks_per_node ranks, all waiting in their
  // nodes' relays, then rank 0 publishes (from this process, as in the
  // other rounds).
  absl::StatusOr<v1::FanoutRound> RunRelayRound(int nodes) {
    const int per = opt_.ranks_per_node;
    const int n = nodes * per;
    // Up to a job's limit: a placed gang on the coordinator; beyond it the
    // table-only server.
    const bool table = n > coord::kMaxGpus;
    int64_t job = 0;
    int attempt = 0;
    std::string token;
    if (table) {
      if (absl::Status s = StartTableServer(); !s.ok()) return s;
      job = 900000 + nodes;
      token = absl::StrCat("bench-token-", nodes);
      std::vector<std::string> hosts(n);
      for (int r = 0; r < n; ++r) hosts[r] = absl::StrCat("sim-", r / per);
      table_->Open(job, attempt, token, std::move(hosts));
    } else {
      auto placed = PlaceGang(n);
      if (!placed.ok()) return placed.status();
      std::tie(job, attempt, token) = *placed;
    }
    auto served = [&]() -> int64_t {
      if (table) return table_service_->fetches();
      const auto c = core_->Stats().counters;
      return c.rendezvous_fetches_relayed + c.rendezvous_fetches_direct;
    };
    const int64_t fetches_before = served();
    // Whole nodes per rank process; rank 0 publishes from here.
    const int procs = static_cast<int>(workers_.size());
    std::vector<int> active;
    for (int w = 0; w < procs; ++w) {
      v1::FanoutWorkerCommand cmd;
      cmd.set_job_id(job);
      cmd.set_attempt(attempt);
      cmd.set_token(token);
      cmd.set_ranks_per_relay(per);
      if (table) {
        cmd.set_address(table_address_);
        cmd.set_connections(std::max(1, std::min(connections_open_, nodes) / procs));
      }
      const int first_node = static_cast<int>(int64_t{nodes} * w / procs);
      const int end_node = static_cast<int>(int64_t{nodes} * (w + 1) / procs);
      for (int r = std::max(1, first_node * per); r < end_node * per; ++r) cmd.add_ranks(r);
      if (cmd.ranks().empty()) continue;
      if (absl::Status s = workers_[w].pipe->Send(cmd); !s.ok()) return s;
      active.push_back(w);
    }
    SteadyTime last_request = std::chrono::steady_clock::now();
    bool any = false;
    for (int w : active) {
      v1::FanoutWorkerReport issued;
      if (absl::Status s = workers_[w].pipe->Receive(&issued); !s.ok()) return s;
      if (!issued.error().empty()) return absl::UnavailableError(issued.error());
      for (int64_t ns : issued.issued_ns()) {
        const SteadyTime t = FromSteadyNanos(ns);
        if (!any || t > last_request) last_request = t;
        any = true;
      }
    }
    // Every relay's one upstream fetch has reached the coordinator before
    // rank 0 publishes (as ranks wait long before rank 0's id exists).
    const absl::Time wait_until = absl::Now() + absl::Seconds(60);
    while (absl::Now() < wait_until) {
      if (served() - fetches_before >= nodes) break;
      // Stats() copies every GPU's figures: poll gently (before the publish,
      // outside the measured span).
      absl::SleepFor(absl::Milliseconds(5));
    }
    const SteadyTime publish_at = std::chrono::steady_clock::now();
    if (absl::Status s = table ? PublishToTable(job, attempt, token)
                               : Publish(job, attempt, token);
        !s.ok()) {
      return s;
    }
    const SteadyTime published = std::chrono::steady_clock::now();
    SteadyTime last_done = last_request;
    std::vector<double> per_rank_us;
    int64_t errors = 0;
    int64_t relays_sent = 0;
    for (int w : active) {
      v1::FanoutWorkerReport done;
      if (absl::Status s = workers_[w].pipe->Receive(&done); !s.ok()) return s;
      if (!done.error().empty()) return absl::DeadlineExceededError(done.error());
      relays_sent += done.upstream_fetches();
      for (int i = 0; i < done.done_ns_size(); ++i) {
        const SteadyTime returned = FromSteadyNanos(done.done_ns(i));
        last_done = std::max(last_done, returned);
        per_rank_us.push_back(
            MillisBetween(FromSteadyNanos(done.issued_ns(i)), returned) * 1000);
        if (!done.ok(i)) ++errors;
      }
    }
    v1::FanoutRound round;
    round.set_ranks(n);
    round.set_mode("relay_publish_after_last_request");
    // Here "last request" is the later of the last rank's request and the
    // moment every relay's fetch had reached the coordinator.
    round.set_last_request_to_all_ms(
        MillisBetween(std::max(last_request, publish_at), last_done));
    round.set_publish_to_all_ms(MillisBetween(publish_at, last_done));
    *round.mutable_per_rank() = Summarize(per_rank_us, floor_p50_us_);
    round.set_errors(errors);
    round.set_publish_call_ms(MillisBetween(publish_at, published));
    round.set_connections(std::min(connections_open_, nodes));
    round.set_relay_nodes(nodes);
    round.set_coordinator_fetches(served() - fetches_before);
    if (relays_sent != round.coordinator_fetches()) {
      std::printf("note: the relays sent %lld fetches, the server counted %lld\n",
                  static_cast<long long>(relays_sent),
                  static_cast<long long>(round.coordinator_fetches()));
    }
    if (table) {
      round.set_mode("relay_publish_after_last_request_table");
      table_->Close(job, attempt, "round over");
    }
    if (floor_p50_us_ > 0) {
      round.set_floor_multiple(round.last_request_to_all_ms() * 1000 / floor_p50_us_);
    }
    return round;
  }

  // The table-only rendezvous server (TableRendezvousService), started at
  // the first round that needs it, with the coordinator's fan-out threads.
  absl::Status StartTableServer() {
    if (table_server_ != nullptr) return absl::OkStatus();
    table_ = std::make_unique<coord::RendezvousTable>(opt_.fanout_threads);
    table_service_ = std::make_unique<TableRendezvousService>(table_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(table_service_.get());
    table_server_ = builder.BuildAndStart();
    if (table_server_ == nullptr || port == 0) {
      return absl::UnavailableError("cannot start the table-only rendezvous server");
    }
    table_address_ = absl::StrCat("127.0.0.1:", port);
    table_stub_ = v1::Rendezvous::NewStub(grpc::CreateChannel(
        table_address_, grpc::InsecureChannelCredentials()));
    return absl::OkStatus();
  }

  absl::Status PublishToTable(int64_t job, int attempt, const std::string& token) {
    v1::PublishUniqueIdRequest req;
    req.set_job_id(job);
    req.set_attempt(attempt);
    req.set_rank(0);
    req.set_token(token);
    req.set_unique_id(std::string(coord::kNcclUniqueIdBytes, '\x5a'));
    v1::PublishUniqueIdResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status st = table_stub_->PublishUniqueId(&ctx, req, &resp);
    if (!st.ok()) return absl::UnavailableError("PublishUniqueId: " + st.error_message());
    return absl::OkStatus();
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
  std::vector<RankWorker> workers_;
  int connections_open_ = 0;
  std::shared_ptr<grpc::Channel> publish_channel_;
  std::unique_ptr<v1::Rendezvous::Stub> publish_stub_;
  int next_node_ = 0;
  std::unique_ptr<coord::RendezvousTable> table_;
  std::unique_ptr<TableRendezvousService> table_service_;
  std::unique_ptr<grpc::Server> table_server_;
  std::string table_address_;
  std::unique_ptr<v1::Rendezvous::Stub> table_stub_;
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
  app.add_option("--relay-nodes", opt.relay_nodes,
                 "relay rounds: simulated node counts, comma-separated; each "
                 "node's --ranks-per-node ranks wait in its node relay, which "
                 "asks the coordinator once (e.g. 512,8192)")
      ->delimiter(',')->check(CLI::Range(1, 16384));
  app.add_option("--ranks-per-node", opt.ranks_per_node, "ranks per simulated node")
      ->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--max-connections", opt.max_connections,
                 "at most this many rank connections (then shared); also capped "
                 "by the open-file limit")
      ->check(CLI::Range(1, 65536))->capture_default_str();
  app.add_option("--procs", opt.procs,
                 "rank processes the simulated ranks are spread over (0: one "
                 "per hardware thread; on a 32-core host 1 gave 152-185 ms at "
                 "4,096 ranks, 8 gave 228-235 ms)")
      ->check(CLI::Range(0, 1024))->capture_default_str();
  app.add_option("--floor-calls", opt.floor_calls, "no-op calls for the transport floor")
      ->check(CLI::Range(10, 1000000))->capture_default_str();
  app.add_option("--fanout-threads", opt.fanout_threads,
                 "the coordinator's --rendezvous-fanout-threads (0: its default, "
                 "4 or fewer; 1: the publishing call answers all)")
      ->check(CLI::Range(0, 256))->capture_default_str();
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
  // Fork the rank processes before anything in this process starts gRPC.
  if (opt.procs == 0) {
    opt.procs = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }
  auto workers = trainctl::bench::StartRankProcesses(opt.procs);
  if (!workers.ok()) {
    std::fprintf(stderr, "trainctl-bench-rendezvous: %s\n",
                 workers.status().ToString().c_str());
    return 1;
  }
  trainctl::bench::Bench bench(opt, std::move(*workers));
  return bench.Run();
}
