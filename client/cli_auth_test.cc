// How `trainctl` finds the coordinator, the user's token and the CA:
// flags, then environment, then the config file (cli.h, Connection).

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "client/cli.h"
#include "client/testing/cli_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::cli {
namespace {

namespace v1 = ::trainctl::v1;
using ::testing::_;
using ::testing::HasSubstr;
using ::testing::Return;

constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

// Connects with the system clock and a NiceMock stub: only how the CLI
// connects matters here.
class CliAuthTest : public CliHarness<::testing::NiceMock<v1::MockCoordinatorStub>> {
 protected:
  void SetUp() override {
    for (const char* v : {"TRAINCTL_COORDINATOR", "TRAINCTL_AUTH_TOKEN", "TRAINCTL_TLS_CA",
                          "TRAINCTL_TOKEN"}) {
      unsetenv(v);
    }
    dir_ = ::testing::TempDir() + "/cli-auth-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    Write(dir_ + "/ca.crt", kPem);
    Write(dir_ + "/other-ca.crt", kPem);
    config_ = dir_ + "/config";
    ON_CALL(stub_, ListNodes(_, _, _)).WillByDefault(Return(grpc::Status::OK));
    EXPECT_CALL(stub_, ListNodes(_, _, _)).Times(::testing::AnyNumber());
  }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  // Runs `trainctl ARGS... nodes` and returns the exit status; the
  // connection the CLI resolved is in connection_.
  int Run(std::vector<std::string> args) {
    args.push_back("nodes");
    options_.clock = nullptr;
    options_.config_file = config_;
    return CliHarness::Run(std::move(args));
  }

  std::string dir_;
  std::string config_;
};

TEST_F(CliAuthTest, NoConfigNoFlags_DefaultAddressNoTokenPlaintext) {
  ASSERT_EQ(Run({}), 0) << err_.str();
  EXPECT_EQ(connection_.address, kDefaultCoordinator);
  EXPECT_EQ(connection_.token, "");
  EXPECT_EQ(connection_.ca_pem, "");
}

TEST_F(CliAuthTest, ConfigFile_SetsCoordinatorTokenAndCa) {
  Write(config_, "# set once\ncoordinator = \"head:50051\"\ntoken = \"tok-from-config\"\n"
                 "ca_cert = \"" + dir_ + "/ca.crt\"\n");
  std::filesystem::permissions(config_, std::filesystem::perms::owner_read |
                                            std::filesystem::perms::owner_write);
  ASSERT_EQ(Run({}), 0) << err_.str();
  EXPECT_EQ(connection_.address, "head:50051");
  EXPECT_EQ(connection_.token, "tok-from-config");
  EXPECT_EQ(connection_.ca_pem, kPem);
  EXPECT_EQ(err_.str(), "");
}

TEST_F(CliAuthTest, FlagsBeatEnvironmentBeatsConfig) {
  Write(config_, "coordinator = \"cfg:1\"\ntoken = \"tok-config\"\n");
  std::filesystem::permissions(config_, std::filesystem::perms::owner_read |
                                            std::filesystem::perms::owner_write);
  setenv("TRAINCTL_AUTH_TOKEN", "tok-env", 1);
  setenv("TRAINCTL_COORDINATOR", "env:2", 1);
  ASSERT_EQ(Run({}), 0) << err_.str();
  EXPECT_EQ(connection_.address, "env:2");
  EXPECT_EQ(connection_.token, "tok-env");
  ASSERT_EQ(Run({"--token", "tok-flag", "--coordinator", "127.0.0.1:3"}), 0);
  EXPECT_EQ(connection_.address, "127.0.0.1:3");
  EXPECT_EQ(connection_.token, "tok-flag");
}

TEST_F(CliAuthTest, TaskRendezvousToken_IsNeverSentAsUserToken) {
  // TRAINCTL_TOKEN is a task's per-attempt rendezvous token.
  setenv("TRAINCTL_TOKEN", "attempt-token", 1);
  ASSERT_EQ(Run({}), 0);
  EXPECT_EQ(connection_.token, "");
}

TEST_F(CliAuthTest, ConfigUnknownKey_IsUsageErrorNamingIt) {
  Write(config_, "coordinatr = \"head:1\"\n");
  EXPECT_EQ(Run({}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("unknown key \"coordinatr\""));
  EXPECT_THAT(err_.str(), HasSubstr(config_));
}

TEST_F(CliAuthTest, MissingConfigFlagFileOrCa_IsUsageError) {
  EXPECT_EQ(Run({"--config", dir_ + "/nope"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("no such file"));
  EXPECT_EQ(Run({"--tls-ca", dir_ + "/nope.crt"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--tls-ca"));
}

TEST_F(CliAuthTest, TokenInWorldReadableConfig_Warns) {
  Write(config_, "token = \"tok-config\"\n");
  std::filesystem::permissions(config_, std::filesystem::perms::owner_read |
                                            std::filesystem::perms::owner_write |
                                            std::filesystem::perms::others_read);
  ASSERT_EQ(Run({}), 0);
  EXPECT_THAT(err_.str(), HasSubstr("chmod 600"));
}

TEST_F(CliAuthTest, TokenWithoutTlsOffHost_Warns) {
  ASSERT_EQ(Run({"--token", "t", "--coordinator", "head:50051"}), 0);
  EXPECT_THAT(err_.str(), HasSubstr("without TLS"));
  ASSERT_EQ(Run({"--token", "t", "--coordinator", "head:50051", "--tls-ca",
                 dir_ + "/ca.crt"}),
            0);
  EXPECT_EQ(err_.str(), "");
}

}  // namespace
}  // namespace trainctl::cli
