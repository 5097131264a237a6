// Tests of PrometheusMetrics through the text a scrape returns: hand-made
// CoordinatorStats in, exposition lines out. No coordinator, no clock.

#include "coordinator/prometheus_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"
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
  s.gpus[0].allocated = true;
  JobGpuStats j;
  j.job_id = 5;
  j.job_name = "llama";
  j.utilization_pct = 80;
  j.gpus = 1;
  s.jobs = {j};
  return s;
}

std::unique_ptr<PrometheusMetrics> NoEndpoint(
    PrometheusMetrics::Options options = PrometheusMetrics::Options()) {
  auto m = PrometheusMetrics::Create("", options);
  EXPECT_THAT(m, ::trainctl::testing::IsOk());
  return std::move(*m);
}

std::unique_ptr<PrometheusMetrics> WithJobSeries() {
  PrometheusMetrics::Options options;
  options.per_job_series = true;
  return NoEndpoint(options);
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
  EXPECT_THAT(text, HasSubstr("# TYPE trainctl_job_queue_wait_seconds histogram"));
  EXPECT_EQ(m->port(), 0);
}

TEST(PrometheusMetricsTest, Create_NoRefresh_EveryCounterSeriesAtZero) {
  auto m = NoEndpoint();
  const std::string text = m->TextExposition();
  // Every labelled series exists before its first event, so rate() and
  // increase() see the first one.
  for (const char* line : {
           "trainctl_jobs_submitted_total 0",
           "trainctl_jobs_finished_total{state=\"succeeded\"} 0",
           "trainctl_jobs_finished_total{state=\"failed\"} 0",
           "trainctl_jobs_finished_total{state=\"cancelled\"} 0",
           "trainctl_job_placements_total 0",
           "trainctl_job_restarts_total{reason=\"failure\"} 0",
           "trainctl_job_restarts_total{reason=\"out_of_memory\"} 0",
           "trainctl_preemptions_total 0",
           "trainctl_preflight_runs_total{verdict=\"passed\"} 0",
           "trainctl_preflight_runs_total{verdict=\"failed\"} 0",
           "trainctl_preflight_runs_total{verdict=\"aborted\"} 0",
           "trainctl_agent_registrations_total 0",
       }) {
    EXPECT_THAT(text, HasSubstr(std::string(line) + "\n"));
  }
  EXPECT_THAT(text, HasSubstr("# TYPE trainctl_jobs_submitted_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE trainctl_jobs_finished_total counter"));
  // Only the final states and the verdicts a run ends with.
  EXPECT_THAT(text, Not(HasSubstr("trainctl_jobs_finished_total{state=\"running\"}")));
  EXPECT_THAT(text, Not(HasSubstr("verdict=\"running\"")));
}

TEST(PrometheusMetricsTest, Refresh_CountersGrow_AddsTheIncrease) {
  auto m = NoEndpoint();
  CoordinatorStats s = TwoNodes();
  s.counters.jobs_submitted = 10;
  s.counters.jobs_finished[v1::JOB_STATE_SUCCEEDED] = 7;
  s.counters.jobs_finished[v1::JOB_STATE_FAILED] = 1;
  s.counters.placements = 9;
  s.counters.restarts = 2;
  s.counters.oom_requeues = 1;
  s.counters.preemptions = 3;
  s.counters.preflight_runs[v1::PREFLIGHT_VERDICT_PASSED] = 4;
  s.counters.preflight_runs[v1::PREFLIGHT_VERDICT_FAILED] = 2;
  s.counters.preflight_runs[v1::PREFLIGHT_VERDICT_ABORTED] = 1;
  s.counters.agent_registrations = 2;
  m->Refresh(s);
  std::string text = m->TextExposition();
  EXPECT_THAT(text, HasSubstr("trainctl_jobs_submitted_total 10\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_jobs_finished_total{state=\"succeeded\"} 7\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_jobs_finished_total{state=\"failed\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_jobs_finished_total{state=\"cancelled\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_job_placements_total 9\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_job_restarts_total{reason=\"failure\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_job_restarts_total{reason=\"out_of_memory\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_preemptions_total 3\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_preflight_runs_total{verdict=\"passed\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_preflight_runs_total{verdict=\"failed\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_preflight_runs_total{verdict=\"aborted\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_agent_registrations_total 2\n"));

  // The same snapshot again adds nothing; 3 more submits add 3.
  m->Refresh(s);
  s.counters.jobs_submitted = 13;
  m->Refresh(s);
  text = m->TextExposition();
  EXPECT_THAT(text, HasSubstr("trainctl_jobs_submitted_total 13\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_jobs_finished_total{state=\"succeeded\"} 7\n"));

  // A new Coordinator behind the same endpoint counts from 0: its 2
  // submits are new events, so the counter goes 13 -> 15 (never down).
  s.counters.jobs_submitted = 2;
  m->Refresh(s);
  EXPECT_THAT(m->TextExposition(), HasSubstr("trainctl_jobs_submitted_total 15\n"));
}

TEST(PrometheusMetricsTest, Refresh_AllocatedGpus_GaugeByReadyNode) {
  auto m = NoEndpoint();
  CoordinatorStats s = TwoNodes();
  // a: 2 GPUs, one allocated; b: 1 GPU, free.
  s.gpus.push_back(Gpu("a", 1, 0));
  m->Refresh(s);
  std::string text = m->TextExposition();
  EXPECT_THAT(text, HasSubstr("trainctl_gpus_allocated{node=\"a\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_gpus_allocated{node=\"b\"} 0\n"));
  // Both of a's GPUs taken; b lost: its series goes (as its GPUs' do).
  s.gpus[2].allocated = true;
  s.gpus[1].node_ready = false;
  m->Refresh(s);
  text = m->TextExposition();
  EXPECT_THAT(text, HasSubstr("trainctl_gpus_allocated{node=\"a\"} 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("trainctl_gpus_allocated{node=\"b\"}")));
}

TEST(PrometheusMetricsTest, Refresh_RunningJobByDefault_NoPerJobLabel) {
  auto m = NoEndpoint();
  m->Refresh(TwoNodes());
  const std::string text = m->TextExposition();
  EXPECT_THAT(text, Not(HasSubstr("job_id")));
  EXPECT_THAT(text, Not(HasSubstr("job_name")));
  EXPECT_THAT(text, Not(HasSubstr("trainctl_job_gpu_utilization_ratio")));
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
}

TEST(PrometheusMetricsTest, Refresh_PerJobSeriesOn_JobGaugeWithJobLabels) {
  auto m = WithJobSeries();
  m->Refresh(TwoNodes());
  EXPECT_THAT(m->TextExposition(), HasSubstr(
      "trainctl_job_gpu_utilization_ratio{job_id=\"5\",job_name=\"llama\"} 0.8"));
}

TEST(PrometheusMetricsTest, Refresh_GpuAndJobGone_SeriesRemoved) {
  auto m = WithJobSeries();
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

TEST(PrometheusMetricsTest, ObserveJobQueueWait_Minutes_InSecondsHistogram) {
  auto m = NoEndpoint();
  m->ObserveJobQueueWait(absl::Milliseconds(50));
  m->ObserveJobQueueWait(absl::Minutes(4));
  const std::string text = m->TextExposition();
  // 0.05 s falls in le=0.1; 240 s in le=300; sum 240.05.
  EXPECT_THAT(text, HasSubstr("trainctl_job_queue_wait_seconds_count 2"));
  EXPECT_THAT(text, HasSubstr("trainctl_job_queue_wait_seconds_sum 240.05"));
  EXPECT_THAT(text, HasSubstr("trainctl_job_queue_wait_seconds_bucket{le=\"0.1\"} 1"));
  EXPECT_THAT(text, HasSubstr("trainctl_job_queue_wait_seconds_bucket{le=\"60\"} 1"));
  EXPECT_THAT(text, HasSubstr("trainctl_job_queue_wait_seconds_bucket{le=\"300\"} 2"));
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

// Ended attempts add their GPU-seconds by user, project and GPU type (a
// gang split by its slices); past 20 distinct users, the rest are "other".
TEST(PrometheusMetricsTest, ObserveAttemptUsage_CountsGpuSecondsWithBoundedLabels) {
  auto m = NoEndpoint();
  v1::UsageRecord gang;
  gang.set_user("ana");
  gang.set_project("vision");
  gang.set_gpu_seconds_allocated(4 * 3600);
  gang.set_gpu_seconds_used(3600);
  for (const char* type : {"h100", "a100"}) {
    v1::UsageSlice* s = gang.add_slices();
    s->set_gpu_type(type);
    s->set_gpus(2);
    s->set_gpu_seconds_used(1800);
  }
  m->ObserveAttemptUsage(gang);
  std::string text = m->TextExposition();
  EXPECT_THAT(text, HasSubstr("trainctl_gpu_seconds_allocated_total{gpu_type=\"h100\",project="
                              "\"vision\",user=\"ana\"} 7200\n"));
  EXPECT_THAT(text, HasSubstr("trainctl_gpu_seconds_used_total{gpu_type=\"a100\",project="
                              "\"vision\",user=\"ana\"} 1800\n"));
  for (int i = 0; i < 30; ++i) {
    v1::UsageRecord r;
    r.set_user(absl::StrCat("u", i));
    r.set_project("vision");
    r.set_gpu_seconds_allocated(10);
    m->ObserveAttemptUsage(r);
  }
  text = m->TextExposition();
  EXPECT_THAT(text, HasSubstr("user=\"u18\""));
  EXPECT_THAT(text, Not(HasSubstr("user=\"u19\"")));
  EXPECT_THAT(text, HasSubstr("trainctl_gpu_seconds_allocated_total{gpu_type=\"unknown\",project="
                              "\"vision\",user=\"other\"} 110\n"));
}

}  // namespace
}  // namespace trainctl::coord
