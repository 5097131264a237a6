#include "common/log_follow.h"

#include "gtest/gtest.h"

namespace trainctl {
namespace {

using Next = LogFollow::Next;

v1::GetLogsResponse Chunk(const std::string& data, int64_t next, bool eof = false) {
  v1::GetLogsResponse r;
  r.set_data(data);
  r.set_next_offset(next);
  r.set_eof(eof);
  return r;
}

v1::Job JobAt(int attempt, bool placed) {
  v1::Job job;
  job.set_attempt(attempt);
  if (placed) job.add_tasks();
  return job;
}

TEST(LogFollowTest, NotFollowing_StopsWhenCaughtUp) {
  LogFollow f(/*follow=*/false, 0);
  EXPECT_EQ(f.OnRead(Chunk("abc", 3)), Next::kRead);
  EXPECT_EQ(f.offset(), 3);
  EXPECT_EQ(f.OnRead(Chunk("", 3)), Next::kDone);
}

TEST(LogFollowTest, Following_WaitsThenReadsOnceMoreAfterTheJobEnds) {
  LogFollow f(/*follow=*/true, 0);
  EXPECT_EQ(f.OnRead(Chunk("a", 1)), Next::kRead);
  EXPECT_EQ(f.OnRead(Chunk("", 1)), Next::kWait);
  EXPECT_FALSE(f.OnWaited(JobAt(0, true), /*final=*/false));
  EXPECT_EQ(f.OnRead(Chunk("b", 2)), Next::kRead);
  EXPECT_EQ(f.OnRead(Chunk("", 2)), Next::kWait);
  f.OnWaited(JobAt(0, true), /*final=*/true);
  EXPECT_EQ(f.OnRead(Chunk("", 2)), Next::kDone);  // the last read found nothing more
}

TEST(LogFollowTest, ARestart_StartsTheNewAttemptsLogFromZero) {
  LogFollow f(true, 0);
  EXPECT_EQ(f.OnRead(Chunk("old", 3)), Next::kRead);
  EXPECT_EQ(f.OnRead(Chunk("", 3)), Next::kWait);
  EXPECT_FALSE(f.OnWaited(JobAt(0, true), false));
  EXPECT_EQ(f.OnRead(Chunk("", 3)), Next::kWait);
  EXPECT_TRUE(f.OnWaited(JobAt(1, true), false));
  EXPECT_EQ(f.offset(), 0);
  EXPECT_EQ(f.attempt(), 1);
}

TEST(LogFollowTest, NoLogYet_WaitsWhileTheJobIsNotPlaced_FailsOtherwise) {
  LogFollow f(true, 0);
  const absl::StatusOr<v1::GetLogsResponse> none = absl::NotFoundError("no logs yet");
  EXPECT_EQ(f.OnRead(none), Next::kWait);
  f.OnWaited(JobAt(0, /*placed=*/false), false);
  EXPECT_EQ(f.OnRead(none), Next::kWait);
  f.OnWaited(JobAt(0, /*placed=*/true), false);
  EXPECT_EQ(f.OnRead(none), Next::kFail);  // placed, yet no log: an error
  LogFollow once(false, 0);
  EXPECT_EQ(once.OnRead(none), Next::kFail);
  EXPECT_EQ(f.OnRead(absl::UnavailableError("down")), Next::kFail);
}

TEST(LogFollowTest, Eof_IsTheEnd) {
  LogFollow f(true, 5);
  EXPECT_EQ(f.OnRead(Chunk("tail", 9, /*eof=*/true)), Next::kDone);
  EXPECT_EQ(f.offset(), 9);
}

}  // namespace
}  // namespace trainctl
