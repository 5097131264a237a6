// `trainctl sweep` against a real gRPC server (in process): with SubmitJobs,
// every trial in one call; against a coordinator that predates it (no
// SubmitJobs: UNIMPLEMENTED), trials are submitted concurrently through the
// stub's callback API, each exactly once with its own request id, and a
// failed trial is named.

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/testing/cli_harness.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "trainctl/v1/service.grpc.pb.h"

namespace trainctl::cli {
namespace {

namespace v1 = ::trainctl::v1;
using ::testing::HasSubstr;

// SubmitJob only (callback API): hands out job ids by request id (a repeated
// id gets its first job) and fails the request id `fail_request_id` once.
// The first call is held unanswered until three more have arrived: a client
// that waits for each answer before the next call would never get there
// (and fail at its deadline).
class FakeSubmitService final : public v1::Coordinator::CallbackService {
 public:
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest* req,
                                      v1::SubmitJobResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    grpc::ServerUnaryReactor* release = nullptr;
    grpc::Status status = grpc::Status::OK;
    {
      absl::MutexLock lock(&mu_);
      ++calls_;
      if (req->request_id() == fail_request_id && !failed_once_) {
        failed_once_ = true;
        status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "spec.name: bad");
      } else {
        auto [it, fresh] = ids_.try_emplace(req->request_id(), ids_.size() + 1);
        resp->set_job_id(it->second);
      }
      if (calls_ == 1) {
        held_ = reactor;
        held_status_ = status;
        return reactor;
      }
      if (held_ != nullptr) {
        ++arrived_while_held_;
        if (arrived_while_held_ == 3) release = std::exchange(held_, nullptr);
      }
    }
    if (release != nullptr) release->Finish(held_status_);
    reactor->Finish(status);
    return reactor;
  }

  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  int arrived_while_held_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ServerUnaryReactor* held_ ABSL_GUARDED_BY(mu_) = nullptr;
  grpc::Status held_status_;
  bool failed_once_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, int64_t> ids_ ABSL_GUARDED_BY(mu_);
  std::string fail_request_id;
};

// The CLI talks to `Service` through a real stub over an in-process
// channel, with the system clock and default options, as trainctl itself
// does.
template <typename Service>
class InProcessSweepTest : public CliHarness<> {
 protected:
  InProcessSweepTest() {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    grpc_stub_ = v1::Coordinator::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
    UseStub(grpc_stub_.get());
    options_.clock = nullptr;
  }
  ~InProcessSweepTest() override { server_->Shutdown(); }

  // Runs `trainctl sweep --sweep-id sw --gpus 1 --grid i=0,..,N-1 -- echo {i}`.
  int RunSweep(int n) {
    std::string grid = "i=";
    for (int i = 0; i < n; ++i) absl::StrAppend(&grid, i == 0 ? "" : ",", i);
    return Run({"sweep", "--sweep-id", "sw", "--gpus", "1", "--grid", grid, "--", "echo",
                "{i}"});
  }

  Service service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Coordinator::Stub> grpc_stub_;
};

using SweepSubmitTest = InProcessSweepTest<FakeSubmitService>;

TEST_F(SweepSubmitTest, Sweep_100Trials_SubmittedConcurrentlyEachOnce) {
  ASSERT_EQ(RunSweep(100), kExitOk) << err_.str();
  absl::MutexLock lock(&service_.mu_);
  // Three submits went out while the first was still unanswered.
  EXPECT_EQ(service_.arrived_while_held_, 3);
  // One call per trial, each with its own request id.
  EXPECT_EQ(service_.calls_, 100);
  ASSERT_EQ(service_.ids_.size(), 100u);
  EXPECT_TRUE(service_.ids_.count("sw-0") == 1);
  EXPECT_TRUE(service_.ids_.count("sw-99") == 1);
  EXPECT_EQ(out_.str(), "sw\n");
  EXPECT_THAT(err_.str(), HasSubstr("100 trial(s) submitted (jobs 1..100)"));
}

TEST_F(SweepSubmitTest, Sweep_OneTrialRefused_NamedAndRerunCompletesWithoutDuplicates) {
  service_.fail_request_id = "sw-7";
  EXPECT_EQ(RunSweep(40), kExitRpcError);
  EXPECT_THAT(err_.str(), HasSubstr("trial 7 of sweep sw: spec.name: bad"));
  EXPECT_THAT(err_.str(), HasSubstr("run the same command with --sweep-id sw"));
  // The same command again: every trial ends up with one job; those that
  // were submitted keep theirs (same request id).
  ASSERT_EQ(RunSweep(40), kExitOk) << err_.str();
  absl::MutexLock lock(&service_.mu_);
  EXPECT_EQ(service_.ids_.size(), 40u);
}

// SubmitJobs (and SubmitJob, which must not be called): records each call.
class FakeBatchService final : public v1::Coordinator::CallbackService {
 public:
  grpc::ServerUnaryReactor* SubmitJobs(grpc::CallbackServerContext* ctx,
                                       const v1::SubmitJobsRequest* req,
                                       v1::SubmitJobsResponse* resp) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back(*req);
    for (int i = 0; i < req->specs_size(); ++i) resp->add_job_ids(100 + i);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest*,
                                      v1::SubmitJobResponse*) override {
    absl::MutexLock lock(&mu_);
    ++single_calls_;
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status(grpc::StatusCode::INTERNAL, "not expected"));
    return reactor;
  }

  absl::Mutex mu_;
  std::vector<v1::SubmitJobsRequest> calls_ ABSL_GUARDED_BY(mu_);
  int single_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

using SweepSubmitJobsTest = InProcessSweepTest<FakeBatchService>;

TEST_F(SweepSubmitJobsTest, Sweep_100Trials_OneSubmitJobsCallInTrialOrder) {
  ASSERT_EQ(RunSweep(100), kExitOk) << err_.str();
  absl::MutexLock lock(&service_.mu_);
  EXPECT_EQ(service_.single_calls_, 0);
  ASSERT_EQ(service_.calls_.size(), 1u);
  const v1::SubmitJobsRequest& call = service_.calls_[0];
  EXPECT_EQ(call.request_id(), "sw");
  ASSERT_EQ(call.specs_size(), 100);
  EXPECT_EQ(call.specs(99).name(), "sw-99");
  EXPECT_EQ(call.specs(99).params().at("i"), "99");
  EXPECT_EQ(out_.str(), "sw\n");
  EXPECT_THAT(err_.str(), HasSubstr("100 trial(s) submitted (jobs 100..199)"));
}

}  // namespace
}  // namespace trainctl::cli
