#include "coordinator/session_relay.h"

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;

class FakeAgent : public AgentConnection {
 public:
  void Send(v1::CoordinatorMessage msg) override {
    absl::MutexLock lock(&mu_);
    sent_.push_back(std::move(msg));
  }
  void Close(const absl::Status&) override {}
  std::vector<v1::CoordinatorMessage> sent() {
    absl::MutexLock lock(&mu_);
    return sent_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::CoordinatorMessage> sent_;
};

class FakeClient : public SessionClient {
 public:
  void Send(v1::SessionServerMessage msg) override {
    absl::MutexLock lock(&mu_);
    got_.push_back(std::move(msg));
  }
  void End(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    ++ends_;
    end_ = status;
  }
  std::vector<v1::SessionServerMessage> got() {
    absl::MutexLock lock(&mu_);
    return got_;
  }
  std::optional<absl::Status> end() {
    absl::MutexLock lock(&mu_);
    return end_;
  }
  int ends() {
    absl::MutexLock lock(&mu_);
    return ends_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::SessionServerMessage> got_;
  std::optional<absl::Status> end_;
  int ends_ = 0;
};

v1::Job RunningJob(int64_t id, const std::string& user, int ranks) {
  v1::Job job;
  job.set_id(id);
  job.set_attempt(2);
  job.set_state(v1::JOB_STATE_RUNNING);
  job.mutable_spec()->set_user(user);
  for (int r = 0; r < ranks; ++r) {
    v1::Task* t = job.add_tasks();
    t->set_rank(r);
    t->set_node(r == 0 ? "n0" : "n1");
    t->set_state(v1::TASK_STATE_RUNNING);
  }
  return job;
}

v1::SessionOpen Exec(int64_t job, int rank) {
  v1::SessionOpen o;
  o.set_job_id(job);
  o.set_rank(rank);
  o.add_argv("nvidia-smi");
  return o;
}

class SessionRelayTest : public ::testing::Test {
 protected:
  SessionRelayTest() : relay_(Hooks(), Opts()) {
    jobs_[1] = RunningJob(1, "alice", 2);
    relay_.AgentConnected("n0", &n0_);
    relay_.AgentConnected("n1", &n1_);
  }

  SessionRelay::Hooks Hooks() {
    SessionRelay::Hooks h;
    h.get_job = [this](int64_t id) -> absl::StatusOr<v1::Job> {
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(id);
      if (it == jobs_.end()) return absl::NotFoundError("no such job");
      return it->second;
    };
    h.end_job = [this](int64_t id, const std::string& reason) {
      absl::MutexLock lock(&mu_);
      ended_.emplace_back(id, reason);
    };
    h.gpus_idle = [this](int64_t, absl::Time) {
      absl::MutexLock lock(&mu_);
      ++gpu_checks_;
      return gpus_idle_;
    };
    h.audit = [this](const Principal& who, const std::string& action, const std::string& target,
                     const std::string&) {
      absl::MutexLock lock(&mu_);
      audit_.push_back(absl::StrCat(who.user, " ", action, " ", target));
    };
    return h;
  }
  // The fixture's clock, and no timer thread: tests move the clock and run
  // the timers themselves.
  SessionRelay::Options Opts() {
    SessionRelay::Options o;
    o.shell_grace = absl::ZeroDuration();
    o.open_timeout = absl::Hours(1);
    o.clock = &clock_;
    o.timer_thread = false;
    return o;
  }
  bool Ended() {
    absl::MutexLock lock(&mu_);
    return !ended_.empty();
  }
  // A relay whose shell jobs outlive their client by 60 s, with n0 connected.
  std::unique_ptr<SessionRelay> GraceRelay() {
    SessionRelay::Options opts = Opts();
    opts.shell_grace = absl::Seconds(60);
    auto relay = std::make_unique<SessionRelay>(Hooks(), opts);
    relay->AgentConnected("n0", &n0_);
    return relay;
  }
  // Job 1 made interactive with a 10 min idle timeout, and an exec session
  // into its rank 0, started; its id.
  std::string OpenIdleSession(FakeClient& client) {
    {
      absl::MutexLock lock(&mu_);
      jobs_[1].mutable_spec()->set_interactive(true);
      jobs_[1].mutable_spec()->set_idle_timeout_ms(absl::ToInt64Milliseconds(absl::Minutes(10)));
    }
    absl::StatusOr<std::string> id = relay_.Open({"alice", false}, Exec(1, 0), &client);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return "";
    relay_.FromAgent("n0", FromAgent(*id, Started()));
    return *id;
  }
  // A `trainctl shell` session into job 1 rank 0 (n0), started; its id.
  std::string OpenShell(SessionRelay& relay, FakeClient& client) {
    v1::SessionOpen o = Exec(1, 0);
    o.set_end_job_with_session(true);
    absl::StatusOr<std::string> id = relay.Open({"alice", false}, o, &client);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return "";
    relay.FromAgent("n0", FromAgent(*id, Started()));
    return *id;
  }
  static v1::SessionFromAgent FromAgent(const std::string& id, v1::SessionServerMessage p) {
    v1::SessionFromAgent m;
    m.set_session_id(id);
    *m.mutable_payload() = std::move(p);
    return m;
  }
  static v1::SessionServerMessage Exit(int code) {
    v1::SessionServerMessage p;
    p.mutable_exit()->set_exit_code(code);
    return p;
  }
  static v1::SessionServerMessage Started() {
    v1::SessionServerMessage p;
    p.mutable_started()->set_pid(42);
    return p;
  }

  absl::Mutex mu_;
  FakeClock clock_;
  std::map<int64_t, v1::Job> jobs_;
  std::vector<std::pair<int64_t, std::string>> ended_;
  std::vector<std::string> audit_;
  bool gpus_idle_ = true;
  int gpu_checks_ = 0;
  FakeAgent n0_, n1_;
  // Outlive the relay, which ends the clients of sessions still open.
  std::deque<FakeClient> clients_;
  FakeClient& NewClient() { return clients_.emplace_back(); }
  SessionRelay relay_;
};

TEST_F(SessionRelayTest, OpenGoesToTheRanksNodeAndOutputAndExitComeBack) {
  FakeClient& client = NewClient();
  absl::StatusOr<std::string> id = relay_.Open({"alice", false}, Exec(1, 1), &client);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_EQ(n1_.sent().size(), 1u);
  EXPECT_TRUE(n0_.sent().empty());
  const v1::SessionToAgent open = n1_.sent()[0].session();
  EXPECT_EQ(open.session_id(), *id);
  EXPECT_EQ(open.attempt(), 2);
  EXPECT_EQ(open.payload().open().argv(0), "nvidia-smi");

  relay_.FromAgent("n1", FromAgent(*id, Started()));
  v1::SessionServerMessage out;
  out.set_stdout("GPU 0: H200\n");
  relay_.FromAgent("n1", FromAgent(*id, out));
  // Another node cannot speak for this session.
  relay_.FromAgent("n0", FromAgent(*id, Exit(9)));
  relay_.FromAgent("n1", FromAgent(*id, Exit(0)));
  auto got = client.got();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].started().session_id(), *id);
  EXPECT_EQ(got[0].started().node(), "n1");
  EXPECT_EQ(got[1].stdout(), "GPU 0: H200\n");
  EXPECT_EQ(got[2].exit().exit_code(), 0);
  ASSERT_TRUE(client.end().has_value());
  EXPECT_TRUE(client.end()->ok());
  EXPECT_EQ(relay_.OpenSessions(), 0);
  absl::MutexLock lock(&mu_);
  EXPECT_THAT(audit_, ::testing::ElementsAre("alice session.exec 1/1"));
  // An exec is not a shell: the job goes on.
  EXPECT_TRUE(ended_.empty());
}

TEST_F(SessionRelayTest, OnlyTheOwnerOrAnAdminMayOpen) {
  FakeClient& client = NewClient();
  absl::StatusOr<std::string> id = relay_.Open({"mallory", false}, Exec(1, 0), &client);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(n0_.sent().empty());
  EXPECT_TRUE(relay_.Open({"root", true}, Exec(1, 0), &client).ok());
}

TEST_F(SessionRelayTest, RankMustBeRunning) {
  FakeClient& client = NewClient();
  {
    absl::MutexLock lock(&mu_);
    jobs_[2] = RunningJob(2, "alice", 1);
    jobs_[2].mutable_tasks(0)->set_state(v1::TASK_STATE_EXITED);
    jobs_[3] = RunningJob(3, "alice", 0);
    jobs_[3].set_state(v1::JOB_STATE_PENDING);
  }
  auto r = relay_.Open({"alice", false}, Exec(2, 0), &client);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("not running"));
  EXPECT_EQ(relay_.Open({"alice", false}, Exec(3, 0), &client).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(relay_.Open({"alice", false}, Exec(1, 5), &client).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(relay_.Open({"alice", false}, Exec(99, 0), &client).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SessionRelayTest, BadOpensAreInvalidArgumentNamingTheField) {
  FakeClient& client = NewClient();
  v1::SessionOpen o = Exec(1, 0);
  o.set_port(70000);
  o.clear_argv();
  auto r = relay_.Open({"alice", false}, o, &client);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("port"));
  o = Exec(1, 0);
  o.clear_argv();
  r = relay_.Open({"alice", false}, o, &client);
  EXPECT_THAT(r.status().message(), HasSubstr("argv"));
  o = Exec(1, -1);
  r = relay_.Open({"alice", false}, o, &client);
  EXPECT_THAT(r.status().message(), HasSubstr("rank"));
  o = Exec(1, 0);
  o.set_rows(-3);
  r = relay_.Open({"alice", false}, o, &client);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("rows/cols"));
}

TEST_F(SessionRelayTest, ClientMessagesReachTheAgentAndBadOnesAreRefused) {
  FakeClient& client = NewClient();
  auto id = relay_.Open({"alice", false}, Exec(1, 0), &client);
  ASSERT_TRUE(id.ok());
  v1::SessionClientMessage in;
  in.set_stdin("ls\n");
  ASSERT_TRUE(relay_.FromClient(*id, in).ok());
  ASSERT_EQ(n0_.sent().size(), 2u);
  EXPECT_EQ(n0_.sent()[1].session().payload().stdin(), "ls\n");
  v1::SessionClientMessage sig;
  sig.set_signal(0);
  EXPECT_EQ(relay_.FromClient(*id, sig).code(), absl::StatusCode::kInvalidArgument);
  v1::SessionClientMessage big;
  big.set_stdin(std::string(kMaxSessionInputBytes + 1, 'x'));
  EXPECT_EQ(relay_.FromClient(*id, big).code(), absl::StatusCode::kInvalidArgument);
  v1::SessionClientMessage reopen;
  *reopen.mutable_open() = Exec(1, 0);
  EXPECT_EQ(relay_.FromClient(*id, reopen).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(n0_.sent().size(), 2u);
}

TEST_F(SessionRelayTest, OutputAcksReachTheAgentWhichIsToldTheyWill) {
  FakeClient& client = NewClient();
  v1::SessionOpen open = Exec(1, 0);
  open.set_output_window_bytes(8 << 20);
  auto id = relay_.Open({"alice", false}, open, &client);
  ASSERT_TRUE(id.ok());
  ASSERT_EQ(n0_.sent().size(), 1u);
  EXPECT_TRUE(n0_.sent()[0].session().relays_output_acks());
  EXPECT_EQ(n0_.sent()[0].session().payload().open().output_window_bytes(), 8 << 20);
  v1::SessionClientMessage ack;
  ack.set_output_ack(2 << 20);
  ASSERT_TRUE(relay_.FromClient(*id, ack).ok());
  ASSERT_EQ(n0_.sent().size(), 2u);
  EXPECT_EQ(n0_.sent()[1].session().payload().output_ack(), 2 << 20);
  v1::SessionClientMessage bad;
  bad.set_output_ack(-1);
  EXPECT_EQ(relay_.FromClient(*id, bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(n0_.sent().size(), 2u);
}

TEST_F(SessionRelayTest, ClientGoneClosesTheCommandOnTheAgent) {
  FakeClient& client = NewClient();
  auto id = relay_.Open({"alice", false}, Exec(1, 0), &client);
  ASSERT_TRUE(id.ok());
  relay_.ClientGone(*id);
  ASSERT_EQ(n0_.sent().size(), 2u);
  EXPECT_TRUE(n0_.sent()[1].session().payload().close());
  EXPECT_EQ(relay_.OpenSessions(), 0);
  // The agent's late exit goes nowhere.
  relay_.FromAgent("n0", FromAgent(*id, Exit(-1)));
  EXPECT_TRUE(client.got().empty());
  EXPECT_EQ(client.ends(), 0);
}

TEST_F(SessionRelayTest, AgentGoneEndsItsSessionsWithUnavailable) {
  FakeClient& on_n0 = NewClient();
  FakeClient& on_n1 = NewClient();
  ASSERT_TRUE(relay_.Open({"alice", false}, Exec(1, 0), &on_n0).ok());
  ASSERT_TRUE(relay_.Open({"alice", false}, Exec(1, 1), &on_n1).ok());
  relay_.AgentGone("n0", &n0_);
  ASSERT_TRUE(on_n0.end().has_value());
  EXPECT_EQ(on_n0.end()->code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(on_n1.end().has_value());
  // With the node's agent gone, new sessions there are refused.
  FakeClient& late = NewClient();
  EXPECT_EQ(relay_.Open({"alice", false}, Exec(1, 0), &late).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(SessionRelayTest, AgentErrorEndsTheClientWithItsStatus) {
  FakeClient& client = NewClient();
  auto id = relay_.Open({"alice", false}, Exec(1, 0), &client);
  ASSERT_TRUE(id.ok());
  v1::SessionServerMessage err;
  err.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kNotFound));
  err.mutable_error()->set_message("cannot start nvidia-smi");
  relay_.FromAgent("n0", FromAgent(*id, err));
  ASSERT_TRUE(client.end().has_value());
  EXPECT_EQ(client.end()->code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client.end()->message(), "cannot start nvidia-smi");
}

TEST_F(SessionRelayTest, AnAgentThatNeverAnswersEndsTheOpenWithDeadlineExceeded) {
  SessionRelay::Options opts = Opts();
  opts.open_timeout = absl::Seconds(30);
  SessionRelay relay(Hooks(), opts);
  relay.AgentConnected("n0", &n0_);
  FakeClient& client = NewClient();
  ASSERT_TRUE(relay.Open({"alice", false}, Exec(1, 0), &client).ok());
  clock_.Advance(absl::Seconds(29));
  EXPECT_EQ(relay.RunTimers(), clock_.Now() + absl::Seconds(1));  // the deadline
  EXPECT_FALSE(client.end().has_value());
  clock_.Advance(absl::Seconds(1));
  relay.RunTimers();
  ASSERT_TRUE(client.end().has_value());
  EXPECT_EQ(client.end()->code(), absl::StatusCode::kDeadlineExceeded);
  // The agent is told to drop the open it may still act on.
  EXPECT_TRUE(n0_.sent().back().session().payload().close());
}

TEST_F(SessionRelayTest, ShellSessionEndsItsJobWhenItsCommandExits) {
  const std::string id = OpenShell(relay_, NewClient());
  relay_.FromAgent("n0", FromAgent(id, Exit(3)));
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(ended_.size(), 1u);
  EXPECT_EQ(ended_[0].first, 1);
  EXPECT_THAT(ended_[0].second, HasSubstr("exit code 3"));
}

TEST_F(SessionRelayTest, ShellJobEndsAfterTheGraceWhenItsClientGoes) {
  std::unique_ptr<SessionRelay> grace = GraceRelay();
  SessionRelay& relay = *grace;
  relay.ClientGone(OpenShell(relay, NewClient()));
  clock_.Advance(absl::Seconds(59));
  relay.RunTimers();
  EXPECT_FALSE(Ended());  // `trainctl attach` may still take it back
  EXPECT_EQ(relay.PendingJobEnds(), 1);
  clock_.Advance(absl::Seconds(1));
  relay.RunTimers();
  EXPECT_EQ(relay.PendingJobEnds(), 0);
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(ended_.size(), 1u);
  EXPECT_EQ(ended_[0].first, 1);
  EXPECT_THAT(ended_[0].second, HasSubstr("went away 1m ago"));
}

// A new session into the job within the grace (`trainctl attach`) keeps it.
TEST_F(SessionRelayTest, AttachWithinTheGraceKeepsTheShellJob) {
  std::unique_ptr<SessionRelay> relay = GraceRelay();
  relay->ClientGone(OpenShell(*relay, NewClient()));
  clock_.Advance(absl::Seconds(30));
  OpenShell(*relay, NewClient());  // `trainctl attach`
  clock_.Advance(absl::Minutes(5));
  relay->RunTimers();
  EXPECT_FALSE(Ended());
  EXPECT_EQ(relay->PendingJobEnds(), 0);
}

TEST_F(SessionRelayTest, IdleInteractiveJobIsWarnedThenEndedWithTheReason) {
  FakeClient& client = NewClient();
  const std::string id = OpenIdleSession(client);
  EXPECT_EQ(relay_.IdleClocks(), 1);
  // The warning is due min(timeout / 10, 5 min) = 1 min before the end.
  clock_.Advance(absl::Minutes(8) + absl::Seconds(59));
  EXPECT_EQ(relay_.RunTimers(), clock_.Now() + absl::Seconds(1));
  EXPECT_TRUE(client.got().size() == 1u);  // `started` only
  clock_.Advance(absl::Seconds(1));
  relay_.RunTimers();
  ASSERT_EQ(client.got().size(), 2u);
  EXPECT_THAT(client.got()[1].notice(), HasSubstr("ends in 1m"));
  EXPECT_THAT(client.got()[1].notice(), HasSubstr("unless you type something"));
  clock_.Advance(absl::Seconds(59));
  relay_.RunTimers();
  EXPECT_FALSE(client.end().has_value());
  clock_.Advance(absl::Seconds(1));
  relay_.RunTimers();
  ASSERT_TRUE(client.end().has_value());
  auto got = client.got();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_THAT(got[2].notice(), HasSubstr("ending job 1"));
  EXPECT_THAT(got[3].exit().reason(), HasSubstr("idle for 10m"));
  // The agent is told to close the command.
  EXPECT_TRUE(n0_.sent().back().session().payload().close());
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(ended_.size(), 1u);
  EXPECT_THAT(ended_[0].second, HasSubstr("no terminal input and its GPUs idle"));
}

// Input restarts the idle clock: the warning and the end move with it.
TEST_F(SessionRelayTest, InputRestartsTheIdleClock) {
  FakeClient& client = NewClient();
  const std::string id = OpenIdleSession(client);
  clock_.Advance(absl::Minutes(9) + absl::Seconds(30));
  v1::SessionClientMessage key;
  key.set_stdin("x");
  ASSERT_TRUE(relay_.FromClient(id, key).ok());
  clock_.Advance(absl::Minutes(8));
  relay_.RunTimers();
  EXPECT_EQ(client.got().size(), 1u);  // no warning: 8 min since the key
  clock_.Advance(absl::Seconds(90));
  relay_.RunTimers();
  EXPECT_FALSE(client.end().has_value());  // 9.5 min since the key: warned, not ended
  EXPECT_THAT(client.got().back().notice(), HasSubstr("unless you type something"));
}

// The timeout comes from Hooks::idle_timeout (the job's own, else its
// queue's, else 1 h): an interactive job without its own gets a clock; one
// whose timeout is "never" gets none.
TEST_F(SessionRelayTest, IdleClockTakesItsTimeoutFromTheHook) {
  std::vector<int64_t> asked;
  absl::Duration answer = absl::Minutes(15);
  SessionRelay::Hooks hooks = Hooks();
  hooks.idle_timeout = [&](const v1::JobSpec& spec) {
    asked.push_back(spec.idle_timeout_ms());
    return answer;
  };
  SessionRelay relay(hooks, Opts());
  relay.AgentConnected("n0", &n0_);
  {
    absl::MutexLock lock(&mu_);
    jobs_[1].mutable_spec()->set_interactive(true);  // idle_timeout_ms 0: the queue's
    jobs_[2] = RunningJob(2, "alice", 1);
    jobs_[2].mutable_spec()->set_interactive(true);
    jobs_[2].mutable_spec()->set_idle_timeout_ms(-1);
  }
  FakeClient& first = NewClient();
  ASSERT_TRUE(relay.Open({"alice", false}, Exec(1, 0), &first).ok());
  EXPECT_EQ(relay.IdleClocks(), 1);
  answer = absl::InfiniteDuration();
  FakeClient& second = NewClient();
  ASSERT_TRUE(relay.Open({"alice", false}, Exec(2, 0), &second).ok());
  EXPECT_EQ(relay.IdleClocks(), 1);  // job 2 never idles out
  EXPECT_THAT(asked, ::testing::ElementsAre(0, -1));
}

// After a coordinator restart no session is open, yet the interactive jobs
// still run: their idle clocks start again from the restart, so an
// abandoned shell does not hold its GPUs until its time limit.
TEST_F(SessionRelayTest, AdoptedInteractiveJobIdlesOutAfterARestart) {
  v1::Job shell = RunningJob(7, "alice", 1);
  shell.mutable_spec()->set_interactive(true);
  shell.mutable_spec()->set_idle_timeout_ms(absl::ToInt64Milliseconds(absl::Minutes(10)));
  v1::Job never = RunningJob(8, "alice", 1);
  never.mutable_spec()->set_interactive(true);
  never.mutable_spec()->set_idle_timeout_ms(-1);
  v1::Job batch = RunningJob(9, "alice", 1);
  batch.mutable_spec()->set_idle_timeout_ms(absl::ToInt64Milliseconds(absl::Minutes(10)));
  relay_.AdoptInteractiveJobs({shell, never, batch});
  EXPECT_EQ(relay_.IdleClocks(), 1);
  clock_.Advance(absl::Minutes(9) + absl::Seconds(59));
  relay_.RunTimers();
  EXPECT_FALSE(Ended());
  clock_.Advance(absl::Seconds(1));
  relay_.RunTimers();
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(ended_.size(), 1u);
  EXPECT_EQ(ended_[0].first, 7);
  EXPECT_THAT(ended_[0].second, HasSubstr("idle for 10m"));
}

TEST_F(SessionRelayTest, BusyGpusKeepAnIdleTerminalsJob) {
  {
    absl::MutexLock lock(&mu_);
    gpus_idle_ = false;
  }
  FakeClient& client = NewClient();
  OpenIdleSession(client);
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Minutes(10));
    relay_.RunTimers();
  }
  EXPECT_FALSE(client.end().has_value());
  EXPECT_EQ(client.got().size(), 1u);  // no warning either
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(gpu_checks_, 3);
  EXPECT_TRUE(ended_.empty());
}

}  // namespace
}  // namespace trainctl::coord
