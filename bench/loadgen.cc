// trainctl-loadgen: the load generator of the SIGKILL durability test
// (bench/durability_sigkill.sh).
//
//   trainctl-loadgen submit --coordinator A --rate 1000 --duration 10s \
//       --threads 8 --acks ACKS --starts STARTS --run-id R
//   trainctl-loadgen verify --coordinator A --acks ACKS --starts STARTS \
//       --run-id R --json OUT [--drain-timeout 120s] [--extra k=v ...]
//
// `submit` sends experiment jobs at a steady rate from several client threads,
// each with a unique request id (R-<thread>-<n>). A submit that fails (the
// coordinator was killed, is restarting) is retried with the SAME request id
// until it is acknowledged or --retry-for has passed; every acknowledgement
// ("<request id> <job id>") is appended to ACKS. Each job's command appends
// "start <job> <attempt>" to STARTS when its task starts.
//
// `verify` waits until no job of the run is pending or running (or
// --drain-timeout), then checks: every acknowledged request id exists as
// exactly one job, the one acknowledged; no (job, attempt) started twice.
// It prints the counts, writes them as JSON to OUT, and exits 1 on any
// violation.

#include <atomic>
#include <limits>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.grpc.pb.h"

namespace {

using trainctl::v1::Coordinator;

absl::Duration ParseDurationOrDie(const std::string& text, const char* flag) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
    std::fprintf(stderr, "%s: \"%s\" is not a duration (e.g. 10s)\n", flag, text.c_str());
    std::exit(2);
  }
  return d;
}

std::unique_ptr<Coordinator::Stub> Connect(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // verify lists every job of the run
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  return Coordinator::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

// ---------------------------------------------------------------- submit

struct SubmitCounts {
  std::atomic<int64_t> attempted{0};   // distinct request ids sent
  std::atomic<int64_t> acked{0};       // distinct request ids acknowledged
  std::atomic<int64_t> retries{0};     // submits repeated after a failure
  std::atomic<int64_t> abandoned{0};   // never acknowledged within --retry-for
};

int RunSubmit(const std::string& address, double rate, absl::Duration duration,
              int threads, absl::Duration retry_for, const std::string& acks_path,
              const std::string& starts_path, const std::string& run_id) {
  std::ofstream acks(acks_path, std::ios::app);
  if (!acks) {
    std::fprintf(stderr, "--acks: cannot open %s\n", acks_path.c_str());
    return 2;
  }
  absl::Mutex acks_mu;
  SubmitCounts counts;
  trainctl::v1::JobSpec spec;
  spec.set_name("loadgen");
  spec.set_gpu_fraction(0.05);
  spec.set_max_restarts(1);
  spec.add_command("sh");
  spec.add_command("-c");
  spec.add_command(absl::StrCat("echo start $TRAINCTL_JOB_ID $TRAINCTL_ATTEMPT >> '",
                                starts_path, "'"));
  const absl::Time start = absl::Now();
  const absl::Time end = start + duration;
  const absl::Duration period = absl::Seconds(threads / rate);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto stub = Connect(address);
      // Staggered so the threads' submits interleave evenly.
      absl::Time next = start + period * t / threads;
      for (int64_t n = 0; next < end; ++n, next += period) {
        absl::SleepFor(next - absl::Now());  // pacing, not a wait on state
        trainctl::v1::SubmitJobRequest req;
        *req.mutable_spec() = spec;
        req.set_request_id(absl::StrCat(run_id, "-", t, "-", n));
        counts.attempted.fetch_add(1);
        const absl::Time give_up = absl::Now() + retry_for;
        bool first = true;
        for (;;) {
          if (!first) counts.retries.fetch_add(1);
          first = false;
          grpc::ClientContext ctx;
          ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
          ctx.set_wait_for_ready(true);  // ride out the coordinator's restart
          trainctl::v1::SubmitJobResponse resp;
          grpc::Status s = stub->SubmitJob(&ctx, req, &resp);
          if (s.ok()) {
            counts.acked.fetch_add(1);
            absl::MutexLock lock(&acks_mu);
            acks << req.request_id() << ' ' << resp.job_id() << '\n';
            break;
          }
          if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
              absl::Now() > give_up) {
            counts.abandoned.fetch_add(1);
            std::fprintf(stderr, "request %s abandoned: %s\n", req.request_id().c_str(),
                         s.error_message().c_str());
            break;
          }
          absl::SleepFor(absl::Milliseconds(50));  // retry backoff
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  acks.flush();
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("submit: %lld request ids, %lld acknowledged, %lld retries, %lld "
              "abandoned in %.1f s (%.0f acks/s, target %.0f/s)\n",
              static_cast<long long>(counts.attempted.load()),
              static_cast<long long>(counts.acked.load()),
              static_cast<long long>(counts.retries.load()),
              static_cast<long long>(counts.abandoned.load()), secs,
              counts.acked.load() / secs, rate);
  return counts.abandoned.load() == 0 ? 0 : 1;
}

// ---------------------------------------------------------------- verify

bool IsFinal(trainctl::v1::JobState s) {
  return s == trainctl::v1::JOB_STATE_SUCCEEDED || s == trainctl::v1::JOB_STATE_FAILED ||
         s == trainctl::v1::JOB_STATE_CANCELLED;
}

// Every job of the coordinator (newest first).
absl::StatusOr<std::vector<trainctl::v1::Job>> ListAll(Coordinator::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  ctx.set_wait_for_ready(true);
  trainctl::v1::ListJobsRequest req;
  req.set_limit(std::numeric_limits<int32_t>::max());
  trainctl::v1::ListJobsResponse resp;
  grpc::Status s = stub.ListJobs(&ctx, req, &resp);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  return std::vector<trainctl::v1::Job>(resp.jobs().begin(), resp.jobs().end());
}

int RunVerify(const std::string& address, const std::string& acks_path,
              const std::string& starts_path, const std::string& run_id,
              absl::Duration drain_timeout, const std::string& json_path,
              const std::vector<std::string>& extra) {
  std::vector<std::string> violations;
  auto violation = [&](std::string what) {
    if (violations.size() < 20) std::fprintf(stderr, "VIOLATION: %s\n", what.c_str());
    violations.push_back(std::move(what));
  };
  // Acknowledgements: request id -> job id.
  absl::flat_hash_map<std::string, int64_t> acked;
  int64_t ack_lines = 0;
  {
    std::ifstream in(acks_path);
    std::string rid;
    int64_t job;
    while (in >> rid >> job) {
      ++ack_lines;
      auto [it, inserted] = acked.emplace(rid, job);
      if (!inserted && it->second != job) {
        violation(absl::StrCat("request id ", rid, " acknowledged as job ", it->second,
                               " and as job ", job));
      }
    }
  }

  auto stub = Connect(address);
  const std::string prefix = run_id + "-";
  const absl::Time drain_start = absl::Now();
  const absl::Time deadline = drain_start + drain_timeout;
  std::vector<trainctl::v1::Job> jobs;
  int64_t unfinished = 0;
  for (;;) {
    absl::StatusOr<std::vector<trainctl::v1::Job>> all = ListAll(*stub);
    if (!all.ok()) {
      std::fprintf(stderr, "cannot list jobs: %s\n", all.status().ToString().c_str());
      return 2;
    }
    jobs.clear();
    for (trainctl::v1::Job& j : *all) {
      if (j.request_id().rfind(prefix, 0) == 0) jobs.push_back(std::move(j));
    }
    unfinished = 0;
    for (const auto& j : jobs) unfinished += IsFinal(j.state()) ? 0 : 1;
    if (unfinished == 0 || absl::Now() > deadline) break;
    absl::SleepFor(absl::Milliseconds(500));  // polling a condition, with a deadline
  }
  const double drain_s = absl::ToDoubleSeconds(absl::Now() - drain_start);

  // Each acknowledged request id: exactly one job, the acknowledged one.
  absl::flat_hash_map<std::string, std::vector<int64_t>> by_request;
  std::map<std::string, int64_t> states;
  int64_t restarted = 0;
  for (const auto& j : jobs) {
    by_request[j.request_id()].push_back(j.id());
    ++states[trainctl::v1::JobState_Name(j.state())];
    if (j.attempt() > 0) ++restarted;
  }
  int64_t exactly_once = 0, unacked_accepted = 0;
  for (const auto& [rid, ids] : by_request) {
    if (ids.size() > 1) {
      violation(absl::StrCat("request id ", rid, " exists as ", ids.size(), " jobs"));
    }
    if (!acked.contains(rid)) ++unacked_accepted;
  }
  for (const auto& [rid, job] : acked) {
    auto it = by_request.find(rid);
    if (it == by_request.end()) {
      violation(absl::StrCat("acknowledged request id ", rid, " (job ", job,
                             ") is lost"));
    } else if (it->second.size() == 1 && it->second[0] != job) {
      violation(absl::StrCat("request id ", rid, " was acknowledged as job ", job,
                             " but exists as job ", it->second[0]));
    } else if (it->second.size() == 1) {
      ++exactly_once;
    }
  }

  // Task starts: no (job, attempt) twice.
  std::map<std::pair<int64_t, int>, int> starts;
  int64_t start_lines = 0;
  {
    std::ifstream in(starts_path);
    std::string line;
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      int64_t job;
      int attempt;
      if (f.size() != 3 || f[0] != "start" || !absl::SimpleAtoi(f[1], &job) ||
          !absl::SimpleAtoi(f[2], &attempt)) {
        violation(absl::StrCat("malformed start line: \"", line, "\""));
        continue;
      }
      ++start_lines;
      ++starts[{job, attempt}];
    }
  }
  int64_t started_twice = 0;
  for (const auto& [key, n] : starts) {
    if (n > 1) {
      ++started_twice;
      violation(absl::StrCat("job ", key.first, " attempt ", key.second, " started ",
                             n, " times"));
    }
  }

  std::printf("verify: %lld acknowledged request ids (%lld ack lines); %lld exist "
              "exactly once as the acknowledged job; %lld jobs of this run, %lld "
              "accepted without an ack reaching the client; %lld not final after "
              "%.1f s\n",
              static_cast<long long>(acked.size()), static_cast<long long>(ack_lines),
              static_cast<long long>(exactly_once), static_cast<long long>(jobs.size()),
              static_cast<long long>(unacked_accepted),
              static_cast<long long>(unfinished), drain_s);
  std::printf("verify: %lld task starts over %lld (job, attempt) pairs; %lld started "
              "twice; %lld jobs needed a restart\n",
              static_cast<long long>(start_lines), static_cast<long long>(starts.size()),
              static_cast<long long>(started_twice), static_cast<long long>(restarted));
  std::string state_text;
  for (const auto& [s, n] : states) absl::StrAppend(&state_text, " ", s, "=", n);
  std::printf("verify: final states:%s\n", state_text.c_str());
  std::printf("verify: %zu violations\n", violations.size());

  if (!json_path.empty()) {
    google::protobuf::Struct out;
    auto& f = *out.mutable_fields();
    for (const std::string& kv : extra) {
      std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      double num;
      if (absl::SimpleAtod(p.second, &num)) {
        f[p.first].set_number_value(num);
      } else {
        f[p.first].set_string_value(p.second);
      }
    }
    f["acknowledged"].set_number_value(static_cast<double>(acked.size()));
    f["exist_exactly_once"].set_number_value(static_cast<double>(exactly_once));
    f["jobs_of_run"].set_number_value(static_cast<double>(jobs.size()));
    f["accepted_without_ack"].set_number_value(static_cast<double>(unacked_accepted));
    f["not_final_at_end"].set_number_value(static_cast<double>(unfinished));
    f["drain_s"].set_number_value(drain_s);
    f["task_starts"].set_number_value(static_cast<double>(start_lines));
    f["job_attempts_started"].set_number_value(static_cast<double>(starts.size()));
    f["started_twice"].set_number_value(static_cast<double>(started_twice));
    f["jobs_restarted"].set_number_value(static_cast<double>(restarted));
    f["violations"].set_number_value(static_cast<double>(violations.size()));
    auto& st = *f["final_states"].mutable_struct_value()->mutable_fields();
    for (const auto& [s, n] : states) st[s].set_number_value(static_cast<double>(n));
    std::string text;
    google::protobuf::util::JsonPrintOptions opts;
    opts.add_whitespace = true;
    opts.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(out, &text, opts);
    std::ofstream(json_path) << text;
  }
  return violations.empty() && unfinished == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainctl-loadgen: submits jobs at a steady rate with request ids "
               "and checks afterwards that every acknowledged one exists exactly "
               "once and no task started twice (bench/durability_sigkill.sh)"};
  app.require_subcommand(1);
  std::string coordinator = "127.0.0.1:50051", acks, starts, run_id = "lg",
              duration = "10s", retry_for = "60s", drain = "120s", json;
  double rate = 1000;
  int threads = 8;
  std::vector<std::string> extra;
  auto common = [&](CLI::App* sub) {
    sub->add_option("--coordinator", coordinator, "address:port")->capture_default_str();
    sub->add_option("--acks", acks, "file of acknowledgements: <request id> <job id>")
        ->required();
    sub->add_option("--starts", starts, "file the jobs append 'start <job> <attempt>' to")
        ->required();
    sub->add_option("--run-id", run_id, "request id prefix of this run")
        ->capture_default_str();
  };
  CLI::App* submit = app.add_subcommand("submit", "submit jobs at --rate for --duration");
  common(submit);
  submit->add_option("--rate", rate, "submits per second, all threads together")
      ->check(CLI::PositiveNumber)->capture_default_str();
  submit->add_option("--duration", duration, "how long to submit")->capture_default_str();
  submit->add_option("--threads", threads, "client threads")
      ->check(CLI::Range(1, 256))->capture_default_str();
  submit->add_option("--retry-for", retry_for,
                     "how long one request id is retried before it is abandoned")
      ->capture_default_str();
  CLI::App* verify = app.add_subcommand("verify", "check the run; print and write counts");
  common(verify);
  verify->add_option("--drain-timeout", drain,
                     "how long to wait for the run's jobs to finish")
      ->capture_default_str();
  verify->add_option("--json", json, "write the counts here as JSON");
  verify->add_option("--extra", extra, "KEY=VALUE added to the JSON (repeatable)");
  CLI11_PARSE(app, argc, argv);
  if (submit->parsed()) {
    return RunSubmit(coordinator, rate, ParseDurationOrDie(duration, "--duration"),
                     threads, ParseDurationOrDie(retry_for, "--retry-for"), acks, starts,
                     run_id);
  }
  return RunVerify(coordinator, acks, starts, run_id,
                   ParseDurationOrDie(drain, "--drain-timeout"), json, extra);
}
