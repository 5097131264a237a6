// Tests of PrometheusMetrics through the text a scrape returns: hand-made
// CoordinatorStats in, exposition lines out. No coordinator, no clock.

#include "coordinator/prometheus_metrics.h"

#include <string>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kGiB = int64_t{1} << 30;

GpuStats Gpu(const std::string& node, int index, int util_pct) {
  GpuStats g;
  g.node = node;
  g.node_ready = true;
  g.index = index;
  g.uuid = "GPU-" + node + "-" + std::to_string(index);
  g.model = "NVIDIA H200";
  g.memory_used_bytes = 3 * kGiB;
  g.memory_total_bytes = 141 * kGiB;
  g.utilization_pct = util_pct;
  g.power_w = 412.5;
  g.temperature_c = 61;
  return g;
}

// Two ready nodes of one GPU each, two jobs pending and one running on a.
CoordinatorStats TwoNodes() {
  CoordinatorStats s;
  s.jobs_by_state[v1::JOB_STATE_PENDING] = 2;
  s.jobs_by_state[v1::JOB_STATE_RUNNING] = 1;
  s.jobs_by_state[v1::JOB_STATE_SUCCEEDED] = 7;
  s.pending_jobs = 2;
  s.jobs_in_memory = 3;
  s.pending_by_queue = {{"default", 1}, {"prod", 1}};
  s.nodes_ready = 2;
  s.nodes_lost = 1;
  s.gpus = {Gpu("a", 0, 80), Gpu("b", 0, 0)};
  JobGpuStats j;
  j.job_id = 5;
  j.job_name = "llama";
  j.utilization_pct = 80;
  j.gpus = 1;
  s.jobs = {j};
  return s;
}

std::unique_ptr<PrometheusMetrics> NoEndpoint() {
  auto m = PrometheusMetrics::Create("");
  EXPECT_THAT(m, ::trainctl::testing::IsOk());
  return std::move(*m);
}

TEST(PrometheusMetricsTest, Create_NoRefresh_StateSeriesAtZero) {
  auto m = NoEndpoint();
  const std::string text = m->TextExposition();
  EXPECT_THAT(text, HasSubstr("trainctl_jobs{state=\"pending\"} 0"));
  EXPECT_THAT(text, HasSubstr("trainctl_jobs{state=\"cancelled\"} 0"));
  EXPECT_THAT(text, Not(HasSubstr("unspecified")));
  EXPECT_THAT(text, HasSubstr("trainctl_queue_length{queue=\"default\"} 0"));
  EXPECT_THAT(text, HasSubstr("trainctl_nodes{state=\"ready\"} 0"));
  EXPECT_THAT(text, HasSubstr("# TYPE trainctl_schedule_pass_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("# TYPE trainctl_rendezvous_publish_seconds histogram"));
  EXPECT_EQ(m->port(), 0);
}

TEST(PrometheusMetricsTest, Refresh_Stats_GaugesWithNodeAndGpuLabels) {
  auto m = NoEndpoint();
  m->Refresh(TwoNodes());
  const std::string text = m->TextExposition();
  EXPECT_THAT(text, HasSubstr("trainctl_jobs{state=\"pending\"} 2"));
  EXPECT_THAT(text, HasSubstr("trainctl_jobs{state=\"running\"} 1"));
  EXPECT_THAT(text, HasSubstr("trainctl_jobs{state=\"succeeded\"} 7"));
  // 7 succeeded jobs are out of memory; the 3 others are held whole.
  EXPECT_THAT(text, HasSubstr("trainctl_jobs_in_memory 3"));
  EXPECT_THAT(text, HasSubstr("trainctl_queue_length{queue=\"default\"} 1"));
  EXPECT_THAT(text, HasSubstr("trainctl_queue_length{queue=\"prod\"} 1"));
  EXPECT_THAT(text, HasSubstr("trainctl_nodes{state=\"ready\"} 2"));
  EXPECT_THAT(text, HasSubstr("trainctl_nodes{state=\"lost\"} 1"));
  // Labels come out sorted by name: gpu, model, node, uuid.
  const std::string a0 =
      "{gpu=\"0\",model=\"NVIDIA H200\",node=\"a\",uuid=\"GPU-a-0\"}";
  EXPECT_THAT(text, HasSubstr("trainctl_gpu_utilization_ratio" + a0 + " 0.8"));
  // 3 GiB = 3221225472 bytes; 141 GiB = 151397597184 bytes.
  EXPECT_THAT(text, HasSubstr("trainctl_gpu_memory_used_bytes" + a0 + " 3221225472"));
  EXPECT_THAT(text,
              HasSubstr("trainctl_gpu_memory_total_bytes" + a0 + " 151397597184"));
  EXPECT_THAT(text, HasSubstr("trainctl_gpu_power_watts" + a0 + " 412.5"));
  EXPECT_THAT(text, HasSubstr("trainctl_gpu_temperature_celsius" + a0 + " 61"));
  EXPECT_THAT(text, HasSubstr("node=\"b\",uuid=\"GPU-b-0\"} 0"));
  EXPECT_THAT(text, HasSubstr(
      "trainctl_job_gpu_utilization_ratio{job_id=\"5\",job_name=\"llama\"} 0.8"));
}

TEST(PrometheusMetricsTest, Refresh_GpuAndJobGone_SeriesRemoved) {
  auto m = NoEndpoint();
  m->Refresh(TwoNodes());
  // Node b is lost (its samples are stale) and job 5 has ended.
  CoordinatorStats later = TwoNodes();
  later.gpus[1].node_ready = false;
  later.gpus[0].utilization_pct = 20;
  later.jobs.clear();
  m->Refresh(later);
  const std::string text = m->TextExposition();
  EXPECT_THAT(text, Not(HasSubstr("node=\"b\"")));
  EXPECT_THAT(text, HasSubstr("node=\"a\",uuid=\"GPU-a-0\"} 0.2"));
  EXPECT_THAT(text, Not(HasSubstr("job_id=\"5\"")));
  // Back again: the series come back.
  m->Refresh(TwoNodes());
  EXPECT_THAT(m->TextExposition(), HasSubstr("node=\"b\""));
  EXPECT_THAT(m->TextExposition(), HasSubstr("job_id=\"5\""));
}

TEST(PrometheusMetricsTest, Observe_Durations_InSecondsHistograms) {
  auto m = NoEndpoint();
  m->ObserveSchedulePass(absl::Microseconds(30));
  m->ObserveSchedulePass(absl::Milliseconds(2));
  m->ObserveRendezvousPublish(absl::Seconds(4));
  const std::string text = m->TextExposition();
  // 30 us falls in le=5e-05, 2 ms in le=0.005; both in le=0.01.
  EXPECT_THAT(text, HasSubstr("trainctl_schedule_pass_seconds_count 2"));
  EXPECT_THAT(text, HasSubstr("trainctl_schedule_pass_seconds_bucket{le=\"1e-05\"} 0"));
  EXPECT_THAT(text, HasSubstr("trainctl_schedule_pass_seconds_bucket{le=\"5e-05\"} 1"));
  EXPECT_THAT(text, HasSubstr("trainctl_schedule_pass_seconds_bucket{le=\"0.01\"} 2"));
  EXPECT_THAT(text, HasSubstr("trainctl_rendezvous_publish_seconds_count 1"));
  EXPECT_THAT(text, HasSubstr("trainctl_rendezvous_publish_seconds_sum 4"));
  EXPECT_THAT(text, HasSubstr("trainctl_rendezvous_publish_seconds_bucket{le=\"2.5\"} 0"));
  EXPECT_THAT(text, HasSubstr("trainctl_rendezvous_publish_seconds_bucket{le=\"5\"} 1"));
}

TEST(PrometheusMetricsTest, Create_PortInUse_Unavailable) {
  auto first = PrometheusMetrics::Create("127.0.0.1:0");
  TC_ASSERT_OK(first);
  const int port = (*first)->port();
  ASSERT_GT(port, 0);
  auto second = PrometheusMetrics::Create("127.0.0.1:" + std::to_string(port));
  EXPECT_THAT(second, ::trainctl::testing::StatusIs(absl::StatusCode::kUnavailable,
                                                    HasSubstr("cannot serve metrics")));
}

}  // namespace
}  // namespace trainctl::coord
