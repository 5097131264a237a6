#include "coordinator/log_relay.h"

#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

LogRelay::Read ReadOn(const std::string& node, absl::Time deadline, int* answered) {
  LogRelay::Read r;
  r.deadline = deadline;
  r.job_id = 4;
  r.rank = 1;
  r.node = node;
  r.done = [answered](absl::StatusOr<v1::GetLogsResponse>) { ++*answered; };
  return r;
}

TEST(LogRelayTest, RequestIdsAreDistinct) {
  LogRelay relay;
  int n = 0;
  const int64_t a = relay.Add(ReadOn("a", kT0, &n));
  const int64_t b = relay.Add(ReadOn("a", kT0, &n));
  EXPECT_NE(a, b);
  EXPECT_EQ(relay.size(), 2u);
}

TEST(LogRelayTest, OnlyTheNodeAskedMayAnswer) {
  LogRelay relay;
  int n = 0;
  const int64_t id = relay.Add(ReadOn("node-a", kT0, &n));
  absl::StatusOr<std::optional<LogRelay::Read>> forged = relay.Take(id, "node-b");
  EXPECT_EQ(forged.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(forged.status().message().find("node-a"), std::string::npos);
  absl::StatusOr<std::optional<LogRelay::Read>> real = relay.Take(id, "node-a");
  ASSERT_TRUE(real.ok());
  ASSERT_TRUE(real->has_value());
  EXPECT_EQ((*real)->rank, 1);
  // Answered once: a repeat finds nothing.
  absl::StatusOr<std::optional<LogRelay::Read>> again = relay.Take(id, "node-a");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->has_value());
}

TEST(LogRelayTest, Expire_ReturnsOnlyReadsPastTheirDeadline) {
  LogRelay relay;
  int n = 0;
  relay.Add(ReadOn("a", kT0 + absl::Seconds(1), &n));
  const int64_t later = relay.Add(ReadOn("a", kT0 + absl::Seconds(5), &n));
  std::vector<LogRelay::Done> due = relay.Expire(kT0 + absl::Seconds(1));
  ASSERT_EQ(due.size(), 1u);
  due[0](absl::DeadlineExceededError("late"));
  EXPECT_EQ(n, 1);
  absl::StatusOr<std::optional<LogRelay::Read>> kept = relay.Take(later, "a");
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(kept->has_value());
}

TEST(LogRelayTest, Answer_EofOnceTheRankEndedAndTheChunkHoldsTheRest) {
  v1::LogChunk chunk;
  chunk.set_data("hello\n");
  chunk.set_next_offset(6);
  // A full chunk: more may follow it.
  v1::TaskRef probe;
  probe.set_attempt(2);
  probe.set_probe_run(1);
  absl::StatusOr<v1::GetLogsResponse> r =
      LogRelay::Answer(chunk, /*rank_ended=*/true, 6, probe);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data(), "hello\n");
  // Whose log it was, for a follower (a pre-flight probe's, here).
  EXPECT_EQ(r->task().attempt(), 2);
  EXPECT_EQ(r->task().probe_run(), 1);
  EXPECT_EQ(r->next_offset(), 6);
  EXPECT_FALSE(r->eof());
  // Shorter than asked for: the end of the file of a rank that is over.
  EXPECT_TRUE(LogRelay::Answer(chunk, true, 1 << 20)->eof());
  EXPECT_FALSE(LogRelay::Answer(chunk, /*rank_ended=*/false, 1 << 20)->eof());  // running
  chunk.clear_data();
  EXPECT_TRUE(LogRelay::Answer(chunk, true, 6)->eof());
  EXPECT_FALSE(LogRelay::Answer(chunk, false, 6)->eof());
  chunk.set_error("no such file");
  EXPECT_EQ(LogRelay::Answer(chunk, true, 6).status().code(), absl::StatusCode::kNotFound);
}

// A log read goes to the node of the rank's task, and only when that node is
// connected; what cannot be read says why, naming the field or the path.
TEST(LogRelayTest, Route_FindsTheRanksNodeOrSaysWhyNot) {
  v1::Job job;
  job.set_id(4);
  job.set_world_size(2);
  for (int r = 0; r < 2; ++r) {
    v1::Task* t = job.add_tasks();
    t->set_rank(r);
    t->set_node(r == 0 ? "a" : "b");
    t->set_log_path("/var/log/trainctl/x.log");
  }
  auto only_a = [](const std::string& n) { return n == "a"; };
  absl::StatusOr<const v1::Task*> t = LogRelay::Route(job, 0, 0, 0, only_a);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->node(), "a");
  EXPECT_EQ(LogRelay::Route(job, 1, 0, 0, only_a).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(LogRelay::Route(job, 1, 0, 0, only_a).status().message().find(
                "/var/log/trainctl/x.log"),
            std::string::npos);
  // No such rank: bad input, not a log still to come.
  EXPECT_EQ(LogRelay::Route(job, 5, 0, 0, only_a).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::Job pending;
  pending.set_world_size(2);
  EXPECT_EQ(LogRelay::Route(pending, 1, 0, 0, only_a).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(LogRelay::Route(pending, 2, 0, 0, only_a).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LogRelay::Route(job, 0, -1, 0, only_a).status().message(),
            "offset: must not be negative");
  EXPECT_EQ(LogRelay::Route(job, 0, 0, LogRelay::kMaxBytes + 1, only_a).status().code(),
            absl::StatusCode::kInvalidArgument);
  job.mutable_spec()->set_discard_output(true);
  EXPECT_EQ(LogRelay::Route(job, 0, 0, 0, only_a).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace trainctl::coord
