// MakeCheckpointDir: the agent hands a user only the checkpoint directory it
// made itself under the coordinator's root (issue: an exported
// TRAINCTL_CHECKPOINT_DIR=/etc made the root agent chown /etc to the user).
#include "worker/job_dirs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

namespace fs = std::filesystem;

class MakeCheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/job_dirs_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  static struct stat Stat(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
    return st;
  }

  // An account that is not the test's own (root can chown to it).
  static RunAs Other() { return RunAs{"nobody-test", 65534, 65534, {65534}}; }

  std::string root_;
};

TEST_F(MakeCheckpointDirTest, NewDirectory_MadePrivateToTheOwner) {
  const std::string dir = root_ + "/ckpt/42";
  ASSERT_TRUE(MakeCheckpointDir(dir, 42, std::nullopt).ok());
  const struct stat st = Stat(dir);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, geteuid());
  // A second attempt of the same job finds it and keeps it.
  EXPECT_TRUE(MakeCheckpointDir(dir, 42, std::nullopt).ok());
}

TEST_F(MakeCheckpointDirTest, PathNotEndingInTheJobId_RefusedAndNothingMade) {
  for (const std::string& dir :
       {std::string("/etc"), root_ + "/ckpt/43", root_ + "/ckpt/../42", root_ + "/ckpt//42",
        root_ + "/ckpt/42/", std::string("ckpt/42"), std::string("/42")}) {
    absl::Status s = MakeCheckpointDir(dir, 42, std::nullopt);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << dir << ": " << s;
  }
  EXPECT_FALSE(fs::exists(root_ + "/ckpt"));
}

TEST_F(MakeCheckpointDirTest, ExistingDirectoryOfAnotherAccount_NeverChowned) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (chown to another account)";
  const std::string dir = root_ + "/ckpt/7";
  fs::create_directories(dir);
  const struct stat before = Stat(dir);
  absl::Status s = MakeCheckpointDir(dir, 7, Other());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("belongs to uid 0"), std::string::npos) << s;
  const struct stat after = Stat(dir);
  EXPECT_EQ(after.st_uid, before.st_uid);
  EXPECT_EQ(after.st_mode, before.st_mode);
}

TEST_F(MakeCheckpointDirTest, MadeForAnotherAccount_OwnedByIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (chown to another account)";
  const std::string dir = root_ + "/ckpt/8";
  ASSERT_TRUE(MakeCheckpointDir(dir, 8, Other()).ok());
  EXPECT_EQ(Stat(dir).st_uid, 65534u);
  EXPECT_EQ(Stat(dir).st_gid, 65534u);
  // The root stays the agent's.
  EXPECT_EQ(Stat(root_ + "/ckpt").st_uid, geteuid());
  EXPECT_TRUE(MakeCheckpointDir(dir, 8, Other()).ok());
}

TEST_F(MakeCheckpointDirTest, LinkInPlaceOfTheDirectory_NotFollowed) {
  const std::string target = root_ + "/victim";
  fs::create_directories(target);
  chmod(target.c_str(), 0755);
  fs::create_directories(root_ + "/ckpt");
  fs::create_directory_symlink(target, root_ + "/ckpt/9");
  absl::Status s = MakeCheckpointDir(root_ + "/ckpt/9", 9, std::nullopt);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(Stat(target).st_mode & 07777, 0755u);
}

}  // namespace
}  // namespace trainctl::worker
