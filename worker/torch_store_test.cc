// TorchStoreHost against a stand-in helper (worker/testing/
// fake_torch_store_host.py: the real helper's line protocol, plain sockets
// instead of PyTorch), so it runs without torch. What a user notices: a
// store's port accepts connections after Open and refuses them after Close,
// and a broken helper gives a clear error instead of a hang.
#include "worker/torch_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/testing/loopback.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

using ::testing::HasSubstr;
using ::trainctl::testing::FreeLoopbackPort;
using ::trainctl::testing::LoopbackAccepts;
using ::trainctl::testing::StatusIs;

std::vector<std::string> Helper(const std::string& mode = "") {
  std::vector<std::string> argv = {"python3", TRAINCTL_FAKE_STORE_HOST};
  if (!mode.empty()) argv.push_back(mode);
  return argv;
}

TEST(TorchStoreHostTest, OpenThenClose_PortListensOnlyWhileOpen) {
  auto host = TorchStoreHost::Start(Helper(), absl::Seconds(30));
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ((*host)->torch_version(), "0.0-fake");
  const int port = FreeLoopbackPort();
  EXPECT_FALSE(LoopbackAccepts(port));
  ASSERT_TRUE((*host)->Open(port, 4).ok());
  // Listening as soon as Open returns: a rank connecting now is not refused.
  EXPECT_TRUE(LoopbackAccepts(port));
  (*host)->Close(port);
  EXPECT_FALSE(LoopbackAccepts(port));
  // Opened again for the next attempt on the same port.
  EXPECT_TRUE((*host)->Open(port, 4).ok());
  EXPECT_TRUE(LoopbackAccepts(port));
}

TEST(TorchStoreHostTest, PortTaken_FailedPreconditionWithTheReason) {
  auto host = TorchStoreHost::Start(Helper(), absl::Seconds(30));
  ASSERT_TRUE(host.ok()) << host.status();
  const int port = FreeLoopbackPort();
  const int taken = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(bind(taken, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(taken, 1), 0);
  EXPECT_THAT((*host)->Open(port, 2),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(absl::StrCat("TCPStore on port ", port))));
  close(taken);
  // The helper still works for the next job.
  EXPECT_TRUE((*host)->Open(FreeLoopbackPort(), 2).ok());
}

TEST(TorchStoreHostTest, NoTorch_StartIsUnavailable) {
  auto host = TorchStoreHost::Start(Helper("--no-torch"), absl::Seconds(30));
  EXPECT_THAT(host.status(), StatusIs(absl::StatusCode::kUnavailable,
                                      HasSubstr("did not get ready")));
}

TEST(TorchStoreHostTest, NoSuchProgram_StartIsUnavailable) {
  auto host = TorchStoreHost::Start({"/nonexistent/python3"}, absl::Seconds(5));
  EXPECT_THAT(host.status(), StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
}

TEST(TorchStoreHostTest, HelperHangs_OpenUnavailableAfterTheTimeoutAndLaterCallsFailFast) {
  auto host = TorchStoreHost::Start(Helper("--hang"), absl::Seconds(30),
                                    /*request_timeout=*/absl::Milliseconds(200));
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_THAT((*host)->Open(FreeLoopbackPort(), 2),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no reply")));
  EXPECT_THAT((*host)->Open(FreeLoopbackPort(), 2),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("failed before")));
}

TEST(ReadLineBeforeTest, SplitsLinesAndKeepsTheRest) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(write(p[1], "ok 1\nok 2\npart", 14), 14);
  std::string pending, line;
  ASSERT_TRUE(ReadLineBefore(p[0], absl::Now() + absl::Seconds(5), pending, line).ok());
  EXPECT_EQ(line, "ok 1");
  ASSERT_TRUE(ReadLineBefore(p[0], absl::Now() + absl::Seconds(5), pending, line).ok());
  EXPECT_EQ(line, "ok 2");
  EXPECT_THAT(ReadLineBefore(p[0], absl::Now() + absl::Milliseconds(50), pending, line),
              StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
  close(p[1]);
  EXPECT_THAT(ReadLineBefore(p[0], absl::Now() + absl::Seconds(5), pending, line),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  close(p[0]);
}

}  // namespace
}  // namespace trainctl::worker
