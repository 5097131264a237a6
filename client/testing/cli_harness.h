// The harness the CLI tests (client/*_test.cc) share: a GoogleTest fixture
// that runs `trainctl` command lines in process, through Cli, against a mock
// Coordinator stub (or a stub a test brings, e.g. a real in-process
// server's) with a FakeClock, and keeps what each run printed, its exit
// status and the connection the CLI resolved. No network, no sleeps, no
// subprocess.
//
//   class CliTest : public CliHarness<> {};
//   TEST_F(CliTest, Cancel_PrintsIt) {
//     EXPECT_CALL(stub_, CancelJob(_, _, _)).WillOnce(Return(grpc::Status::OK));
//     EXPECT_EQ(Run({"cancel", "7"}), 0);
//     EXPECT_EQ(out_.str(), "cancelled job 7\n");
//   }
//
// Tests get MockCoordinatorStub from here: the generated
// service_mock.grpc.pb.h has no include guard, so a test that includes it
// too would define the mocks twice.
//
// A test that needs other CliOptions (terminal width, progress line,
// default user, environment, config file, no fake clock) sets options_
// before Run, usually in its fixture's constructor or its own Run wrapper.

#ifndef TRAINCTL_CLIENT_TESTING_CLI_HARNESS_H_
#define TRAINCTL_CLIENT_TESTING_CLI_HARNESS_H_

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "client/cli.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "trainctl/v1/service.grpc.pb.h"
#include "trainctl/v1/service_mock.grpc.pb.h"

namespace trainctl::cli {

// Parses the text-format proto `text`; a parse error fails the test.
template <typename T>
T Proto(const std::string& text) {
  T message;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &message))
      << text;
  return message;
}

// The non-empty lines of `text`.
std::vector<std::string> Lines(const std::string& text);

// Runs the command line `trainctl ARGS...` (argv[0] is added) with `cli` and
// returns its exit status.
int RunCli(Cli& cli, std::vector<std::string> args);

// The fixture. `MockStub` is the mock the CLI talks to, stub_: strict by
// default (any RPC a test does not expect fails it); NiceMock for tests that
// only care how the CLI connects. Time is clock_, a FakeClock at the
// constructor's `now` (default kNowMs) that options_.clock points to.
template <typename MockStub =
              ::testing::StrictMock<::trainctl::v1::MockCoordinatorStub>>
class CliHarness : public ::testing::Test {
 protected:
  // 2023-11-14 22:13:20 UTC: "now" for most CLI tests.
  static constexpr int64_t kNowMs = 1'700'000'000'000;

  explicit CliHarness(absl::Time now = absl::FromUnixMillis(kNowMs))
      : clock_(now) {
    options_.clock = &clock_;
    // `submit --export ALL` (the default) takes this environment, not the
    // test process's.
    options_.environ = kNoEnviron;
  }
  static constexpr const char* kNoEnviron[] = {nullptr};

  // Runs `trainctl ARGS...` with options_ against the stub (stub_, or the
  // one given to UseStub) and returns its exit status. out_ and err_ hold
  // what this run printed; connection_ and address_ where it connected.
  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    Cli cli(ConnectionStubFactory([this](const Connection& connection) {
              connection_ = connection;
              address_ = connection.address;
              return stub();
            }),
            out_, err_, options_);
    return RunCli(cli, std::move(args));
  }

  // Makes Run talk to `stub` (not owned; it must outlive the runs) instead
  // of stub_: a real stub over a channel to an in-process server.
  void UseStub(::trainctl::v1::Coordinator::StubInterface* stub) {
    other_stub_ = stub;
  }

  // Expects one SubmitJob, answers `job_id`, and returns where the request
  // is kept (submitted_).
  ::trainctl::v1::SubmitJobRequest* ExpectSubmit(int64_t job_id = 42) {
    ::trainctl::v1::SubmitJobResponse response;
    response.set_job_id(job_id);
    EXPECT_CALL(stub_, SubmitJob(::testing::_, ::testing::_, ::testing::_))
        .WillOnce(::testing::DoAll(::testing::SaveArg<1>(&submitted_),
                                   ::testing::SetArgPointee<2>(response),
                                   ::testing::Return(grpc::Status::OK)));
    return &submitted_;
  }

  // Expects `times` CancelJob calls, all answered OK, and returns the job
  // ids they named, in call order (kept in cancelled_).
  const std::vector<int64_t>& ExpectCancels(int times) {
    EXPECT_CALL(stub_, CancelJob(::testing::_, ::testing::_, ::testing::_))
        .Times(times)
        .WillRepeatedly([this](grpc::ClientContext*,
                               const ::trainctl::v1::CancelJobRequest& r,
                               ::trainctl::v1::CancelJobResponse*) {
          cancelled_.push_back(r.job_id());
          return grpc::Status::OK;
        });
    return cancelled_;
  }

  MockStub stub_;
  FakeClock clock_;
  // What each Run passes to Cli; clock points to clock_.
  CliOptions options_;
  std::ostringstream out_;
  std::ostringstream err_;
  // The coordinator address and the whole Connection of the last Run.
  std::string address_;
  Connection connection_;
  // The request ExpectSubmit saw.
  ::trainctl::v1::SubmitJobRequest submitted_;
  // The job ids ExpectCancels saw.
  std::vector<int64_t> cancelled_;

 private:
  ::trainctl::v1::Coordinator::StubInterface* stub() {
    if (other_stub_ != nullptr) return other_stub_;
    return &stub_;
  }

  ::trainctl::v1::Coordinator::StubInterface* other_stub_ = nullptr;
};

}  // namespace trainctl::cli

#endif  // TRAINCTL_CLIENT_TESTING_CLI_HARNESS_H_
