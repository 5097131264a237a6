#include "bench/common/bench_util.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"
#include "trainctl/v1/bench.grpc.pb.h"

namespace trainctl::bench {

v1::LatencySummary Summarize(std::vector<double>& samples_us,
                             double floor_p50_us) {
  v1::LatencySummary s;
  s.set_count(static_cast<int64_t>(samples_us.size()));
  if (samples_us.empty()) return s;
  std::sort(samples_us.begin(), samples_us.end());
  auto pct = [&](double p) {
    // Nearest rank: the smallest sample with at least p% at or below it.
    size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * samples_us.size()));
    return samples_us[std::clamp<size_t>(rank, 1, samples_us.size()) - 1];
  };
  s.set_p50_us(pct(50));
  s.set_p90_us(pct(90));
  s.set_p99_us(pct(99));
  s.set_max_us(samples_us.back());
  s.set_mean_us(std::accumulate(samples_us.begin(), samples_us.end(), 0.0) /
                samples_us.size());
  if (floor_p50_us > 0) {
    s.set_p50_floor_multiple(s.p50_us() / floor_p50_us);
    s.set_p99_floor_multiple(s.p99_us() / floor_p50_us);
  }
  return s;
}

grpc::ChannelArguments ClientChannelArgs(int channel_id) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt("trainctl.bench.channel_id", channel_id);
  return args;
}

class PingServer::Service : public v1::BenchPing::CallbackService {
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* ctx,
                                 const v1::BenchPingRequest* req,
                                 v1::BenchPingResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

absl::StatusOr<std::unique_ptr<PingServer>> PingServer::Start() {
  auto s = std::unique_ptr<PingServer>(new PingServer());
  s->service_ = std::make_unique<Service>();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &s->port_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError("BenchPing: cannot listen on 127.0.0.1:0");
  }
  return s;
}

PingServer::~PingServer() {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
}

std::string PingServer::address() const { return absl::StrCat("127.0.0.1:", port_); }

absl::StatusOr<v1::LatencySummary> MeasureFloor(const std::string& address,
                                                int calls) {
  auto channel = grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), ClientChannelArgs(-1));
  auto stub = v1::BenchPing::NewStub(channel);
  std::vector<double> us;
  us.reserve(calls);
  for (int i = -100; i < calls; ++i) {
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::BenchPingRequest req;
    v1::BenchPingResponse resp;
    const auto t0 = std::chrono::steady_clock::now();
    grpc::Status st = stub->Ping(&ctx, req, &resp);
    const auto t1 = std::chrono::steady_clock::now();
    if (!st.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                          absl::StrCat("BenchPing.Ping to ", address, ": ",
                                       st.error_message()));
    }
    if (i >= 0) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return Summarize(us);
}

absl::StatusOr<double> ProcessCpuSeconds(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!f || !std::getline(f, line)) {
    return absl::NotFoundError(absl::StrCat("/proc/", pid, "/stat: no such process"));
  }
  // Fields after the ")" that closes comm: state is field 3, utime 14,
  // stime 15 (proc(5)).
  const size_t close = line.rfind(')');
  std::vector<std::string> fields =
      absl::StrSplit(line.substr(close + 2), ' ', absl::SkipEmpty());
  double utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) ||
      !absl::SimpleAtod(fields[12], &stime)) {
    return absl::NotFoundError(absl::StrCat("/proc/", pid, "/stat: unreadable"));
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int RaiseOpenFileLimit() {
  rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) != 0) return 1024;
  nofile.rlim_cur = nofile.rlim_max;
  setrlimit(RLIMIT_NOFILE, &nofile);
  getrlimit(RLIMIT_NOFILE, &nofile);
  return static_cast<int>(std::min<rlim_t>(nofile.rlim_cur, 1 << 20));
}

absl::StatusOr<int64_t> ProcessRssBytes(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (f && std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::vector<std::string> parts =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      int64_t kib = 0;
      if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kib)) return kib * 1024;
    }
  }
  return absl::NotFoundError(absl::StrCat("/proc/", pid, "/status: no VmRSS"));
}

double LoadAvg1m() {
  std::ifstream f("/proc/loadavg");
  double load = -1;
  if (!(f >> load)) return -1;
  return load;
}

v1::BenchHost HostNow() {
  v1::BenchHost h;
  h.set_cores(static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  h.set_load_avg_1m_start(LoadAvg1m());
  h.set_load_avg_1m_end(h.load_avg_1m_start());
  h.set_time_utc(absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()));
  if (const char* commit = std::getenv("TRAINCTL_GIT_COMMIT")) h.set_git_commit(commit);
  return h;
}

absl::Status WriteJson(const google::protobuf::Message& msg, const std::string& path) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(msg, &json, options).ok()) {
    return absl::InternalError("cannot print the result as JSON");
  }
  if (path.empty() || path == "-") {
    std::fputs(json.c_str(), stdout);
    return absl::OkStatus();
  }
  std::ofstream out(path);
  out << json;
  if (!out.good()) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace trainctl::bench
