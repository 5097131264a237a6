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

// A chunk that says whose log it is from (GetLogsResponse.task).
v1::GetLogsResponse ChunkOf(int attempt, int probe_run, const std::string& data, int64_t next,
                            bool eof = false) {
  v1::GetLogsResponse r = Chunk(data, next, eof);
  r.mutable_task()->set_attempt(attempt);
  r.mutable_task()->set_probe_run(probe_run);
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
  EXPECT_TRUE(f.restarted());
  EXPECT_EQ(f.offset(), 0);
  EXPECT_EQ(f.attempt(), 1);
}

// Not placed yet, or placed and its task not started yet (a gang's command
// right after its pre-flight, whose log the agent has not created: this
// failed the follow of `logs -f --all-ranks` before): wait; a final job
// with no log is an error.
TEST(LogFollowTest, NoLogYet_WaitsWhileTheJobIsNotFinal_FailsOnceItIs) {
  LogFollow f(true, 0);
  const absl::StatusOr<v1::GetLogsResponse> none = absl::NotFoundError("no logs yet");
  EXPECT_EQ(f.OnRead(none), Next::kWait);
  f.OnWaited(JobAt(0, /*placed=*/false), false);
  EXPECT_EQ(f.OnRead(none), Next::kWait);
  f.OnWaited(JobAt(0, /*placed=*/true), false);
  EXPECT_EQ(f.OnRead(none), Next::kWait);
  f.OnWaited(JobAt(0, /*placed=*/true), /*final=*/true);
  EXPECT_EQ(f.OnRead(none), Next::kFail);  // ended, yet no log: an error
  LogFollow once(false, 0);
  EXPECT_EQ(once.OnRead(none), Next::kFail);
  EXPECT_EQ(f.OnRead(absl::UnavailableError("down")), Next::kFail);
}

TEST(LogFollowTest, Eof_IsTheEndOnceTheJobIsFinal) {
  LogFollow once(false, 5);
  EXPECT_EQ(once.OnRead(Chunk("tail", 9, /*eof=*/true)), Next::kDone);
  LogFollow f(true, 5);
  EXPECT_EQ(f.OnRead(Chunk("tail", 9, /*eof=*/true)), Next::kWait);
  EXPECT_EQ(f.offset(), 9);
  EXPECT_FALSE(f.OnWaited(JobAt(0, true), /*final=*/true));
  EXPECT_EQ(f.OnRead(Chunk("", 9, /*eof=*/true)), Next::kDone);
}

// A gang's pre-flight: the rank shows its probe's log while the probe runs;
// the probe's end is not the job's, and the job's own log is then followed
// from its start (it failed before: `trainctl logs -f` ended with the probe
// and never showed the job's output).
TEST(LogFollowTest, PreflightProbeThenTheJobsCommand_FollowsBothFromTheirStarts) {
  LogFollow f(true, 0);
  v1::Job probing = JobAt(0, true);
  probing.mutable_preflight()->set_probe_run(1);
  EXPECT_EQ(f.OnRead(absl::NotFoundError("no logs yet")), Next::kWait);
  EXPECT_FALSE(f.OnWaited(probing, false));
  EXPECT_EQ(f.OnRead(ChunkOf(0, 1, "probe ok\n", 9, /*eof=*/true)), Next::kWait);
  EXPECT_FALSE(f.OnWaited(probing, false));
  EXPECT_EQ(f.OnRead(Chunk("", 9, /*eof=*/true)), Next::kWait);
  EXPECT_TRUE(f.OnWaited(JobAt(0, true), false));  // the job's own command now
  EXPECT_EQ(f.probe_run(), 0);
  EXPECT_EQ(f.attempt(), 0);
  EXPECT_EQ(f.offset(), 0);
  EXPECT_EQ(f.OnRead(Chunk("step 1\n", 7)), Next::kRead);
  EXPECT_EQ(f.OnRead(Chunk("", 7)), Next::kWait);
  EXPECT_FALSE(f.OnWaited(JobAt(0, true), /*final=*/true));
  EXPECT_EQ(f.OnRead(Chunk("step 2\n", 14, /*eof=*/true)), Next::kDone);
}

// `trainctl logs -f` started while the probe ran, its first wait after the
// probe ended: the read said whose log the offset is into, so the job's own
// log still starts at 0 (with no wait before the first read, the wait alone
// could not tell).
TEST(LogFollowTest, FirstWaitAfterTheProbeEnded_TheReadSaysWhoseLogItWas) {
  LogFollow f(true, 0);
  EXPECT_EQ(f.OnRead(ChunkOf(0, 1, "probe ok\n", 9, /*eof=*/true)), Next::kWait);
  EXPECT_TRUE(f.OnWaited(JobAt(0, true), false));
  EXPECT_FALSE(f.restarted());
  EXPECT_EQ(f.offset(), 0);
  EXPECT_EQ(f.OnRead(ChunkOf(0, 0, "step 1\n", 7)), Next::kRead);
  EXPECT_EQ(f.OnRead(ChunkOf(0, 0, "", 7)), Next::kWait);
  EXPECT_FALSE(f.OnWaited(JobAt(0, true), false));
  EXPECT_EQ(f.offset(), 7);
}

}  // namespace
}  // namespace trainctl
