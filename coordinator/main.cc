// trainctl-coordinator: the cluster's coordinator (docs/design.md §1).

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/flag_hints.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/paths.h"
#include "common/units.h"
#include "coordinator/accounting.h"
#include "coordinator/audit_log.h"
#include "coordinator/coordinator.h"
#include "coordinator/etcd/ha_leader.h"
#include "coordinator/grpc_service.h"
#include "coordinator/session_relay.h"
#include "coordinator/sched_config.h"
#include "coordinator/prometheus_metrics.h"
#include "coordinator/state_store.h"
#include "coordinator/token_store.h"


namespace {

absl::Notification g_shutdown;

void OnSignal(int) { g_shutdown.Notify(); }

}  // namespace

// Parses a duration flag ("10s", "1500ms", "1m") with absl::ParseDuration.
CLI::Validator DurationCheck() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        absl::Duration d;
        if (!absl::ParseDuration(text, &d) || d <= absl::ZeroDuration()) {
          return "expected a positive duration such as 10s, 1500ms or 1m";
        }
        return "";
      },
      "DURATION");
}

absl::Duration ToDuration(const std::string& text) {
  absl::Duration d;
  absl::ParseDuration(text, &d);
  return d;
}

int main(int argc, char** argv) {
  // Session output moves in chunks of up to 1 MiB: reuse, not fresh pages.
  trainctl::TuneMallocForStreams();
  CLI::App app{"trainctl-coordinator: keeps the cluster state, queues and "
               "schedules jobs, serves agents, users and the NCCL rendezvous.\n"
               "Example: trainctl-coordinator --listen 0.0.0.0:50051 --state-dir /var/lib/trainctl"};
  std::string listen = "127.0.0.1:50051", advertise, state_dir, log_level = "info";
  std::string node_timeout = "10s", heartbeat = "1s", stop_grace = "10s";
  std::string metrics_listen;
  std::string checkpoint_root;
  int64_t max_metric_points = trainctl::coord::CoordinatorConfig().limits.max_metric_points_per_job;
  // Telemetry and auto-packing; defaults in CoordinatorConfig.
  std::string usage_sample = "2s", pack_settle = "20s";
  int usage_samples = 300, pack_util_target = 90, pack_max = 8;
  double pack_sm_target = 90, pack_dram_target = 80;
  int pack_plateau_samples = 5;
  bool pack_fast_ramp = true;
  trainctl::coord::TlsFiles tls;
  std::string tokens_file;
  std::string etcd_endpoints, etcd_prefix = "/trainctl/", leader_lease = "3s";
  app.add_option("--listen", listen, "address:port to serve agents, users and ranks on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--advertise", advertise,
                 "address:port task processes use to reach this coordinator "
                 "(TRAINCTL_COORDINATOR); default: the --listen address");
  app.add_option("--state-dir", state_dir,
                 "directory of the SQLite state file; default "
                 "$XDG_DATA_HOME/trainctl or ~/.local/share/trainctl");
  app.add_option("--node-timeout", node_timeout,
                 "a node without a heartbeat for this long is lost and its tasks fail")
      ->check(DurationCheck())->capture_default_str();
  app.add_option("--heartbeat", heartbeat, "heartbeat period agents are told to use")
      ->check(DurationCheck())->capture_default_str();
  app.add_option("--stop-grace", stop_grace,
                 "SIGTERM-to-SIGKILL grace period when tasks are stopped")
      ->check(DurationCheck())->capture_default_str();
  std::string shell_grace = "60s";
  app.add_option("--shell-grace", shell_grace,
                 "how long a `trainctl shell` job outlives its client going away "
                 "(`trainctl attach` within it keeps the job)")
      ->check(DurationCheck())->capture_default_str();
  const CLI::Validator long_duration(
      [](std::string& text) -> std::string {
        absl::StatusOr<absl::Duration> d = trainctl::ParseLongDuration(text);
        return d.ok() ? "" : std::string(d.status().message());
      },
      "DURATION");
  std::string audit_retention, accounting_retention;
  app.add_option("--audit-retention", audit_retention,
                 "delete audit events older than this (90d, 2w, 36h), at start-up "
                 "and hourly; the newest event always stays (default: keep every "
                 "event)")
      ->check(long_duration);
  app.add_option("--accounting-retention", accounting_retention,
                 "delete the accounting records (usage, history) of attempts that "
                 "ended longer ago than this (400d, 52w), at start-up and hourly; "
                 "usage and history then refuse windows that start before it "
                 "(default: keep every record)")
      ->check(long_duration);
  app.add_option("--metrics-listen", metrics_listen,
                 "address:port to serve Prometheus metrics on at /metrics, e.g. "
                 "127.0.0.1:9464 (port 0: any free port); default: no metrics");
  bool metrics_job_series = false;
  app.add_flag("--metrics-job-series", metrics_job_series,
               "also export trainctl_job_gpu_utilization_ratio{job_id,job_name}, "
               "one series per running job (off: no metric has a per-job label, "
               "so a busy cluster's job churn does not grow Prometheus)");
  std::string sync = "full";
  app.add_option("--sync", sync,
                 "durability of each acknowledged write: full (fsync at every "
                 "commit, group committed: concurrent writes share one fsync; "
                 "survives power loss) or normal (survives a crash or kill -9 "
                 "of the coordinator, not of the OS; lower latency on slow "
                 "disks)")
      ->check(CLI::IsMember({"full", "normal"}))->capture_default_str();
  int64_t max_pending_jobs_per_user = 50'000, max_pending_jobs = 500'000;
  app.add_option("--max-pending-jobs-per-user", max_pending_jobs_per_user,
                 "jobs one user may have pending (held ones included) at once; a "
                 "submit past it is RESOURCE_EXHAUSTED (Slurm's MaxSubmitJobs); 0: no "
                 "limit")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-pending-jobs", max_pending_jobs,
                 "jobs the whole cluster may have pending at once (Slurm's "
                 "MaxJobCount); 0: no limit")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--checkpoint-root", checkpoint_root,
                 "absolute path, the same on every node (a shared file system), "
                 "under which each job gets TRAINCTL_CHECKPOINT_DIR=<root>/<job id>, "
                 "kept across its attempts; default: none")
      ->check([](const std::string& p) {
        return !p.empty() && p[0] == '/' ? std::string()
                                         : "--checkpoint-root: must be an absolute path";
      });
  app.add_option("--max-metric-points", max_metric_points,
                 "metric points a job may store (ReportMetrics); reports past it "
                 "are refused with RESOURCE_EXHAUSTED")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}))->capture_default_str();
  std::string scheduler_config;
  app.add_option("--scheduler-config", scheduler_config,
                 "scheduling policy file (queues and weights, user/project GPU "
                 "quotas, las|fifo order, backfill, preemption): protobuf text "
                 "format of trainctl.v1.SchedulerConfigFile "
                 "(proto/trainctl/v1/sched.proto), JSON if it ends in .json; "
                 "default: one queue, no quotas, LAS, backfill, preemption");
  CLI::Option* tls_cert = app.add_option(
      "--tls-cert", tls.cert,
      "PEM certificate of this coordinator (deploy/make_certs.sh: "
      "coordinator.crt); with --tls-key and --tls-ca: TLS on --listen, and "
      "agents must present a client certificate naming their node");
  CLI::Option* tls_key =
      app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert");
  CLI::Option* tls_ca = app.add_option(
      "--tls-ca", tls.ca, "PEM CA certificate that signs the agents' client certificates");
  tls_cert->needs(tls_key)->needs(tls_ca);
  tls_key->needs(tls_cert);
  tls_ca->needs(tls_cert);
  app.add_option("--tokens-file", tokens_file,
                 "users' bearer tokens, protobuf text format "
                 "(trainctl/v1/auth.proto TokensFile), e.g. lines "
                 "tokens { token: \"<openssl rand -hex 32>\" user: \"alice\" } "
                 "and role: ROLE_ADMIN for admins; an admin then makes and "
                 "revokes more with `trainctl token create|revoke` (kept in the "
                 "state); without it the user API is open to anyone who reaches "
                 "the port")
      ->check(CLI::ExistingFile);
  app.add_option("--etcd-endpoints", etcd_endpoints,
                 "etcd members host:port[,host:port...]: keep the state in etcd "
                 "instead of SQLite and run as one of several coordinators; the "
                 "leader is elected through an etcd lease, the others wait as "
                 "standbys without listening; default: SQLite in --state-dir");
  app.add_option("--etcd-prefix", etcd_prefix,
                 "key prefix of this cluster's state and election in etcd")
      ->capture_default_str();
  app.add_option("--leader-lease", leader_lease,
                 "with --etcd-endpoints: TTL of the leader's lease; a dead "
                 "leader is replaced after at most this long (>= 2s)")
      ->check(DurationCheck())->capture_default_str();
  app.add_option("--log-level", log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))->capture_default_str();
  app.add_option("--usage-sample", usage_sample,
                 "period of the per-job utilization history (GetJobUsage, top)")
      ->check(DurationCheck())->capture_default_str();
  app.add_option("--usage-samples", usage_samples,
                 "samples kept per job (default 300: 10 minutes at 2 s)")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--auto-pack-settle", pack_settle,
                 "auto-pack: how long a trial runs before it counts as measured")
      ->check(DurationCheck())->capture_default_str();
  app.add_option("--auto-pack-util-target", pack_util_target,
                 "auto-pack: admit another trial onto a GPU only below this "
                 "measured utilization, percent")
      ->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--auto-pack-max", pack_max, "auto-pack: at most this many trials per GPU")
      ->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--auto-pack-sm-target", pack_sm_target,
                 "auto-pack, GPUs with NVML GPM: admit another trial while SM "
                 "activity is below this, percent")
      ->check(CLI::Range(1.0, 100.0))
      ->capture_default_str();
  app.add_option("--auto-pack-dram-target", pack_dram_target,
                 "auto-pack, GPUs with NVML GPM: admit another trial while DRAM "
                 "bandwidth is below this, percent of the peak")
      ->check(CLI::Range(1.0, 100.0))
      ->capture_default_str();
  app.add_option("--auto-pack-plateau-samples", pack_plateau_samples,
                 "auto-pack: a trial has settled once its memory and the GPU's "
                 "activity stay flat for this many usage samples (or after "
                 "--auto-pack-settle)")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
  app.add_option("--auto-pack-fast-ramp", pack_fast_ramp,
                 "auto-pack: once a sweep's first trial settled, admit as many "
                 "of its trials at once as its measured footprint predicts")
      ->capture_default_str();
  // Pre-flight of gangs (docs/preflight.md); defaults in CoordinatorConfig
  // except --preflight-auto, on here.
  bool allow_root_jobs = false;
  app.add_flag("--allow-root-jobs", allow_root_jobs,
               "with --tokens-file tasks run as their job's user; this lets a "
               "user named root (uid 0 on the nodes) run jobs too (default "
               "off: refused at submit and by the agents)");
  bool slurm_env = false;
  app.add_flag("--slurm-env", slurm_env,
               "every job's tasks also get the variables Slurm's srun sets "
               "(SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_ID, "
               "SLURM_STEP_NODELIST...), so programs that detect Slurm run "
               "unmodified; one job's: trainctl submit --slurm-env");
  bool preflight_auto = true;
  std::string preflight_timeout = "60s", preflight_bytes = "64MiB";
  double preflight_ratio = trainctl::coord::PreflightPolicy().min_busbw_ratio;
  int preflight_max_failures = trainctl::coord::CoordinatorConfig().preflight.max_failures;
  int auto_drain_exclusions =
      trainctl::coord::CoordinatorConfig().preflight.auto_drain_exclusions;
  std::string auto_drain_window = "1h";
  app.add_flag("--preflight-auto,!--no-preflight-auto", preflight_auto,
               "run a pre-flight (a short NCCL all-reduce on the reserved GPUs) "
               "before every gang placed on more than one node, unless it was "
               "submitted with --no-preflight (default on)");
  app.add_option("--preflight-timeout", preflight_timeout,
                 "a pre-flight rank without a result this long after the "
                 "pre-flight began is hung: its node is excluded for the job")
      ->check(DurationCheck())->capture_default_str();
  app.add_option("--preflight-min-busbw-ratio", preflight_ratio,
                 "a pre-flight rank whose bus bandwidth is below this share of "
                 "the median of its peers (same link class) is slow: its node "
                 "is excluded for the job; 0 turns the check off")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--preflight-max-failures", preflight_max_failures,
                 "failed pre-flights after which a job fails")
      ->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--preflight-bytes", preflight_bytes,
                 "all-reduce buffer of the pre-flight probe")
      ->capture_default_str();
  app.add_option("--auto-drain-exclusions", auto_drain_exclusions,
                 "drain a node (automatically, with the reason) that pre-flights "
                 "excluded this many times within --auto-drain-window; 0: never")
      ->check(CLI::Range(0, 1000))->capture_default_str();
  app.add_option("--auto-drain-window", auto_drain_window,
                 "the window --auto-drain-exclusions counts in")
      ->check(DurationCheck())->capture_default_str();
  int fanout_threads = 0;
  app.add_option("--rendezvous-fanout-threads", fanout_threads,
                 "threads that answer the waiting ranks when rank 0 publishes "
                 "its ncclUniqueId; 0: 4, or the host's hardware threads where "
                 "fewer")
      ->check(CLI::Range(0, 256))->capture_default_str();
  // Options may also come from a TOML file, KEY = VALUE per line with KEY a
  // flag's long name (deploy/config/coordinator.conf documents every one; the
  // systemd unit passes /etc/trainctl/coordinator.conf). Flags on the command line
  // win; an unknown key is an error, so a typo does not pass silently.
  app.set_version_flag("--version", "trainctl-coordinator " TRAINCTL_VERSION);
  app.set_config("--config", "",
                 "read options from this TOML file: KEY = VALUE per line, KEY "
                 "a flag's name without --; command-line flags win "
                 "(example: deploy/config/coordinator.conf)");
  app.allow_config_extras(CLI::config_extras_mode::error);
  if (int rc = trainctl::ParseFlagsOrExplain(app, argc, argv, std::cout, std::cerr); rc >= 0) {
    return rc;
  }
  trainctl::InitLogging("coordinator", log_level);
  // Debian's Abseil is built with Mutex deadlock detection on: every lock
  // taken while another is held (gRPC's own locks are absl::Mutex too) walks
  // a global lock-order graph. It was the top of the profile of the
  // rendezvous fan-out (bench/README.md); tests keep it on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // Members in dependency order: clock and store before the core, the core
  // before the services, the services before the server.
  trainctl::RealClock clock;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::unique_ptr<trainctl::coord::StateStore> store;
  std::optional<trainctl::coord::HaLeadership> ha;
  std::string state_where;
  if (!etcd_endpoints.empty()) {
    trainctl::coord::HaOptions options;
    options.etcd_endpoints = etcd_endpoints;
    options.prefix = etcd_prefix;
    options.lease = ToDuration(leader_lease);
    options.address = advertise.empty() ? listen : advertise;
    auto acquired = trainctl::coord::AcquireLeadership(options, g_shutdown);
    if (!acquired.ok()) {
      if (absl::IsCancelled(acquired.status())) return 0;
      TC_LOG_ERROR("{}", acquired.status().ToString());
      return 1;
    }
    ha = std::move(*acquired);
    state_where = absl::StrCat("etcd ", etcd_endpoints, " under ", etcd_prefix);
  } else {
    if (state_dir.empty()) state_dir = trainctl::DefaultDataDir();
    std::error_code ec;
    std::filesystem::create_directories(state_dir, ec);
    if (ec) {
      TC_LOG_ERROR("cannot create --state-dir {}: {}", state_dir, ec.message());
      return 1;
    }
    // Owner-only: the state holds jobs' environments and tokens.
    std::filesystem::permissions(state_dir, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace, ec);
    if (ec) TC_LOG_WARN("chmod 700 --state-dir {}: {}", state_dir, ec.message());
    auto sqlite = trainctl::coord::SqliteStateStore::Open(
        state_dir + "/trainctl.db",
        sync == "normal" ? trainctl::coord::SqliteStateStore::Sync::kNormal
                         : trainctl::coord::SqliteStateStore::Sync::kFull);
    if (!sqlite.ok()) {
      TC_LOG_ERROR("{}", sqlite.status().ToString());
      return 1;
    }
    store = std::move(*sqlite);
    state_where = state_dir + "/trainctl.db";
  }
  trainctl::coord::StateStore* state_store =
      ha.has_value() ? ha->store.get() : store.get();

  // The metrics endpoint before the core, which reports to it.
  std::unique_ptr<trainctl::coord::PrometheusMetrics> metrics;
  if (!metrics_listen.empty()) {
    trainctl::coord::PrometheusMetrics::Options options;
    options.per_job_series = metrics_job_series;
    auto created =
        trainctl::coord::PrometheusMetrics::Create(metrics_listen, options);
    if (!created.ok()) {
      TC_LOG_ERROR("{}", created.status().ToString());
      return 1;
    }
    metrics = std::move(*created);
    TC_LOG_INFO("serving Prometheus metrics at http://{}:{}/metrics",
                metrics_listen.substr(0, metrics_listen.rfind(':')),
                metrics->port());
  }

  trainctl::coord::CoordinatorConfig config;
  if (metrics != nullptr) {
    trainctl::coord::PrometheusMetrics* m = metrics.get();
    config.hooks.on_schedule_pass = [m](absl::Duration d) { m->ObserveSchedulePass(d); };
    config.hooks.on_rendezvous_published = [m](absl::Duration d) {
      m->ObserveRendezvousPublish(d);
    };
    config.hooks.on_job_placed = [m](absl::Duration d) { m->ObserveJobQueueWait(d); };
  }
  config.node_timeout = ToDuration(node_timeout);
  config.heartbeat_interval = ToDuration(heartbeat);
  config.stop_grace = ToDuration(stop_grace);
  config.advertise_address = advertise;
  // Lexically normal ("/shared//ckpt/" -> "/shared/ckpt"): agents make and
  // hand over only <root>/<job id> of a normal path (worker/job_dirs.h).
  if (!checkpoint_root.empty()) {
    checkpoint_root = std::filesystem::path(checkpoint_root).lexically_normal().string();
    while (checkpoint_root.size() > 1 && checkpoint_root.back() == '/') checkpoint_root.pop_back();
  }
  config.checkpoint_root = checkpoint_root;
  config.limits.max_pending_jobs_per_user = max_pending_jobs_per_user;
  config.limits.max_pending_jobs = max_pending_jobs;
  config.limits.max_metric_points_per_job = max_metric_points;
  if (!scheduler_config.empty()) {
    auto policy = trainctl::coord::LoadSchedulerConfig(scheduler_config);
    if (!policy.ok()) {
      TC_LOG_ERROR("--scheduler-config: {}", policy.status().ToString());
      return 1;
    }
    config.scheduler.policy = *std::move(policy);
    TC_LOG_INFO("scheduler config {}: {} queues, {} user and {} project quotas",
                scheduler_config, config.scheduler.policy.queues.size(),
                config.scheduler.policy.user_gpu_quota.size(),
                config.scheduler.policy.project_gpu_quota.size());
  }
  config.usage.sample_period = ToDuration(usage_sample);
  config.usage.history_samples = usage_samples;
  config.packer.settle_ms = absl::ToInt64Milliseconds(ToDuration(pack_settle));
  config.packer.util_target_pct = pack_util_target;
  config.packer.max_tasks_per_gpu = pack_max;
  config.packer.sm_active_target_pct = pack_sm_target;
  config.packer.dram_bw_target_pct = pack_dram_target;
  config.packer.plateau_samples = pack_plateau_samples;
  config.packer.fast_ramp = pack_fast_ramp;
  config.preflight.auto_enabled = preflight_auto;
  // With tokens, JobSpec.user is who the token says: tasks run as that user.
  config.run_jobs_as_user = !tokens_file.empty();
  config.allow_root_jobs = allow_root_jobs;
  config.slurm_env = slurm_env;
  config.preflight.timeout = ToDuration(preflight_timeout);
  config.preflight.policy.min_busbw_ratio = preflight_ratio;
  config.preflight.max_failures = preflight_max_failures;
  config.preflight.auto_drain_exclusions = auto_drain_exclusions;
  config.preflight.auto_drain_window = ToDuration(auto_drain_window);
  config.rendezvous_fanout_threads = fanout_threads;
  if (absl::StatusOr<int64_t> b = trainctl::ParseByteSize(preflight_bytes);
      b.ok() && *b >= 4 && *b <= (int64_t{4} << 30)) {
    config.preflight.bytes = *b;
  } else {
    TC_LOG_ERROR("--preflight-bytes: expected a size from 4 bytes to 4GiB, e.g. "
                 "64MiB; got {}",
                 preflight_bytes);
    return 1;
  }
  // Accounting (GPU-hours allocated and used, history): kept in the state
  // store; the core hands it each ended attempt, the transport queries it.
  auto accounting = trainctl::coord::Accounting::Open(state_store);
  if (!accounting.ok()) {
    TC_LOG_ERROR("cannot load the accounting records: {}", accounting.status().ToString());
    return 1;
  }
  {
    trainctl::coord::Accounting* acct = accounting->get();
    trainctl::coord::PrometheusMetrics* m = metrics.get();
    config.hooks.on_attempt_ended = [acct, m](const trainctl::v1::UsageRecord& r) {
      if (absl::Status s = acct->Record(r); !s.ok()) {
        TC_LOG_ERROR("accounting: job {} attempt {} not recorded: {}", r.job_id(), r.attempt(),
                     s.ToString());
      }
      if (m != nullptr) m->ObserveAttemptUsage(r);
    };
  }
  using Core = trainctl::coord::Coordinator;
  auto core = Core::Create(config, state_store, &clock);
  if (!core.ok()) {
    TC_LOG_ERROR("cannot load state: {}", core.status().ToString());
    return 1;
  }
  // Security: the tokens and TLS credentials before the services that use
  // them.
  std::unique_ptr<trainctl::coord::TokenAuthenticator> tokens;
  if (!tokens_file.empty()) {
    auto loaded = trainctl::coord::TokenAuthenticator::FromFile(tokens_file);
    if (!loaded.ok()) {
      TC_LOG_ERROR("--tokens-file: {}", std::string(loaded.status().message()));
      return 1;
    }
    tokens = std::move(*loaded);
  }
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (!tls.cert.empty()) {
    auto made = trainctl::coord::MakeServerTlsCredentials(tls);
    if (!made.ok()) {
      TC_LOG_ERROR("{}", std::string(made.status().message()));
      return 1;
    }
    credentials = std::move(*made);
  }
  // Tokens made by `trainctl token create` and the audit trail: kept in the
  // state store (so a restart and an etcd failover keep them), owned here,
  // used by the transport only.
  auto token_store = trainctl::coord::TokenStore::Open(state_store);
  if (!token_store.ok()) {
    TC_LOG_ERROR("cannot load the token store: {}", token_store.status().ToString());
    return 1;
  }
  auto audit = trainctl::coord::AuditLog::Open(state_store);
  if (!audit.ok()) {
    TC_LOG_ERROR("cannot load the audit trail: {}", audit.status().ToString());
    return 1;
  }
  trainctl::coord::SecurityConfig security;
  security.tokens = tokens.get();
  security.token_store = token_store->get();
  security.audit = audit->get();
  security.accounting = accounting->get();
  security.require_agent_cert = credentials != nullptr;
  security.clock = &clock;
  // Retention: each kept kind loses up to 1,000 of its oldest records a
  // tick, in short transactions, until none is older than its flag; the
  // next pass comes an hour after that.
  struct Retention {
    const char* what;
    absl::Duration keep;
    std::function<absl::StatusOr<int64_t>(absl::Time before, int64_t max)> prune;
    absl::Time next = absl::InfinitePast();
  };
  std::vector<Retention> retention;
  if (!audit_retention.empty()) {
    retention.push_back({"audit events", *trainctl::ParseLongDuration(audit_retention),
                         [&](absl::Time before, int64_t max) {
                           return (*audit)->Prune(before, max);
                         }});
  }
  if (!accounting_retention.empty()) {
    retention.push_back({"accounting records",
                         *trainctl::ParseLongDuration(accounting_retention),
                         [&](absl::Time before, int64_t max) {
                           return (*accounting)->Prune(absl::ToUnixMillis(before), max);
                         }});
  }
  auto run_retention = [&] {
    constexpr int64_t kBatch = 1000;
    for (Retention& r : retention) {
      if (clock.Now() < r.next) continue;
      absl::StatusOr<int64_t> pruned = r.prune(clock.Now() - r.keep, kBatch);
      if (!pruned.ok()) {
        TC_LOG_WARN("retention of {}: {}", r.what, pruned.status().ToString());
      } else if (*pruned > 0) {
        TC_LOG_INFO("retention: deleted {} {} older than {}", *pruned, r.what,
                    absl::FormatDuration(r.keep));
      }
      if (!pruned.ok() || *pruned < kBatch) r.next = clock.Now() + absl::Hours(1);
    }
  };
  // The first pass before serving: usage never answers for a window that
  // retention is about to cut.
  run_retention();
  trainctl::coord::SessionRelay::Options session_options;
  session_options.shell_grace = ToDuration(shell_grace);
  session_options.clock = &clock;  // the core's: one time for jobs and sessions
  trainctl::coord::GrpcCoordinatorServices services(core->get(), security, session_options);
  int port = 0;
  auto server = trainctl::coord::StartCoordinatorServer(services, listen, &port,
                                                        credentials);
  if (!server.ok()) {
    TC_LOG_ERROR("{}", server.status().ToString());
    return 1;
  }
  if (config.advertise_address.empty()) {
    // Port 0 binds a free port; tell tasks the real one.
    std::string host = listen.substr(0, listen.rfind(':'));
    if (host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
    (*core)->SetAdvertiseAddress(absl::StrCat(host, ":", port));
  }
  TC_LOG_INFO("listening on port {}; state in {}; {}; {}", port,
              state_where,
              credentials != nullptr
                  ? "TLS on, agents need a client certificate naming their node"
                  : "no TLS",
              tokens != nullptr
                  ? absl::StrCat("user API needs a bearer token (", tokens->size(),
                                 " in --tokens-file, ", (*token_store)->size(),
                                 " made by `trainctl token create`)")
                  : "user API unauthenticated");
  if (credentials == nullptr && tokens == nullptr) {
    TC_LOG_WARN("WARNING: INSECURE MODE: no TLS and no --tokens-file. Anyone who can reach "
                "port {} can run commands on every node, read and cancel every "
                "job and register fake nodes. Use it on one machine only, "
                "listening on 127.0.0.1; for a cluster pass --tls-cert/--tls-key/"
                "--tls-ca and --tokens-file (deploy/make_certs.sh)",
                port);
  } else if (credentials == nullptr) {
    TC_LOG_WARN("no TLS: bearer tokens cross the network in clear text and any "
                "process that reaches port {} can register as an agent and run "
                "jobs' commands; pass --tls-cert/--tls-key/--tls-ca",
                port);
  } else if (tokens == nullptr) {
    TC_LOG_WARN("no --tokens-file: anyone who reaches port {} can submit, read "
                "and cancel every job (agents still need certificates)",
                port);
  }
  // Machine-readable line for scripts that start us with --listen ...:0.
  std::printf("trainctl-coordinator listening on port %d\n", port);
  if (metrics != nullptr) {
    std::printf("trainctl-coordinator metrics on port %d\n", metrics->port());
  }
  std::fflush(stdout);

  int exit_code = 0;
  // The clock of the core: timeouts are applied every 100 ms; the metrics'
  // gauges are refreshed about once a second.
  absl::Time next_refresh = absl::InfinitePast();
  while (!g_shutdown.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    if (ha.has_value() && ha->election->lost().HasBeenNotified()) {
      // Fenced already: no write of ours lands any more. Exit so a
      // supervisor restarts us as a standby.
      TC_LOG_ERROR("lost leadership (etcd lease not renewed); exiting");
      exit_code = 3;
      break;
    }
    (*core)->Tick();
    run_retention();
    if (metrics != nullptr && clock.Now() >= next_refresh) {
      metrics->Refresh((*core)->Stats());
      next_refresh = clock.Now() + absl::Seconds(1);
    }
  }
  TC_LOG_INFO("shutting down");
  // Hand over first: resigning lets a standby take over now rather than
  // after the lease; our later writes (if any) are fenced off.
  if (ha.has_value() && exit_code == 0) ha->election.reset();
  trainctl::coord::ShutdownServer(**server, **core, absl::Seconds(2));
  return exit_code;
}
