// trainctl-nccl-allreduce: creates an NCCL communicator, all-reduces a float
// buffer (sum) and prints the bandwidth, like nccl-tests' all_reduce_perf with
// one size.
//
//   trainctl submit --nodes 2 --gpus-per-node 1 -- trainctl-nccl-allreduce
//       (--mode trainctl, the default: InitNcclCommFromEnv from the launch env)
//   trainctl-nccl-allreduce --mode hand --rank 0 --nranks 2 --id-file /tmp/id &
//   trainctl-nccl-allreduce --mode hand --rank 1 --nranks 2 --id-file /tmp/id
//       (no trainctl: rank 0 writes its ncclUniqueId to the file, the others
//        poll for it; device = rank modulo the visible devices)
//
// Rank 0 prints one human line and one JSON line with rank, world_size,
// comm_ready_ms (process start -> ncclCommInitRank returned, on rank 0),
// comm_ready_max_ms (the slowest rank's), bytes, avg_time_us, algbw_gbps,
// busbw_gbps and correct (every element on every rank equals the expected
// sum).
//
// --preflight (what a trainctl agent runs for a gang's pre-flight,
// docs/preflight.md): every rank prints one result line, "trainctl-preflight: "
// and a v1::PreflightProbeResult as JSON (rank, comm_ready_ms, busbw_gbps,
// intra_node_busbw_gbps, error, timed_out), and exits 1 on any failure. A
// watchdog gives up after --timeout-ms (timed_out). When the gang spans
// several nodes with more than one rank on this one, it also all-reduces
// among this node's ranks only (ncclCommSplit by GROUP_RANK):
// intra_node_busbw_gbps, the NVLink figure.
//
// Bandwidths as nccl-tests defines them (doc/PERFORMANCE.md): algbw = bytes /
// time; for all-reduce busbw = algbw * 2 * (n - 1) / n, the per-link traffic
// of a ring, comparable to the hardware's peak bandwidth whatever n is. GB/s is
// 1e9 bytes per second there and here. The reduction is out of place, as
// nccl-tests' default.

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <thread>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "common/units.h"
#include "cuda_runtime_api.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "nccl.h"
#include "trainctl/v1/preflight.pb.h"
#include "worker/nccl/nccl_bootstrap.h"
#include "worker/nccl/rank_env.h"
#include "worker/nccl/rendezvous_client.h"

namespace trainctl::worker {
namespace {

struct Flags {
  std::string mode = "trainctl";
  std::string bytes = "256MiB";
  int iters = 20;
  int warmup = 5;
  // --mode hand only.
  int rank = -1;
  int nranks = 0;
  std::string id_file;
  absl::Duration id_wait = absl::Seconds(120);
  // --preflight: one result line per rank, a watchdog after timeout_ms.
  bool preflight = false;
  int64_t timeout_ms = 0;
};

#define CUDA_OK(expr)                                                   \
  do {                                                                  \
    cudaError_t e_ = (expr);                                            \
    if (e_ != cudaSuccess) {                                            \
      return absl::InternalError(absl::StrFormat(                       \
          "%s failed: %s", #expr, cudaGetErrorString(e_)));             \
    }                                                                   \
  } while (0)

#define NCCL_OK(expr)                                                   \
  do {                                                                  \
    ncclResult_t r_ = (expr);                                           \
    if (r_ != ncclSuccess) {                                            \
      return absl::InternalError(absl::StrFormat(                       \
          "%s failed: %s (%s)", #expr, ncclGetErrorString(r_),          \
          ncclGetLastError(nullptr)));                                  \
    }                                                                   \
  } while (0)

// Seconds since boot, on the clock /proc/<pid>/stat's starttime uses.
double BootSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// When this process started (exec), in seconds since boot: field 22 of
// /proc/self/stat, in clock ticks (proc(5)). Falls back to `fallback`.
double ProcessStartBootSeconds(double fallback) {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // The command name (field 2) is in parentheses and may hold spaces.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return fallback;
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(paren + 2), ' ');
  // fields[0] is field 3 (state), so field 22 is fields[19].
  int64_t ticks = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &ticks)) {
    return fallback;
  }
  return static_cast<double>(ticks) / sysconf(_SC_CLK_TCK);
}

// --mode hand: rank 0 writes its id to `path` (atomically: temp file +
// rename); the others poll until it is there.
absl::StatusOr<ncclUniqueId> HandExchange(const Flags& flags) {
  ncclUniqueId id;
  if (flags.rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    const std::string tmp = flags.id_file + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(id.internal, sizeof(id.internal));
      if (!out) return absl::InternalError("cannot write " + tmp);
    }
    std::error_code ec;
    std::filesystem::rename(tmp, flags.id_file, ec);
    if (ec) return absl::InternalError("cannot rename to " + flags.id_file);
    return id;
  }
  const absl::Time deadline = absl::Now() + flags.id_wait;
  while (absl::Now() < deadline) {
    std::ifstream in(flags.id_file, std::ios::binary);
    if (in.read(id.internal, sizeof(id.internal)) &&
        in.gcount() == sizeof(id.internal)) {
      return id;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(absl::StrFormat(
      "rank %d: %s did not appear within %s: is rank 0 running with the same "
      "--id-file?",
      flags.rank, flags.id_file, absl::FormatDuration(flags.id_wait)));
}

absl::StatusOr<ncclComm_t> InitHand(const Flags& flags) {
  if (flags.rank < 0 || flags.nranks < 1 || flags.rank >= flags.nranks ||
      flags.id_file.empty()) {
    return absl::InvalidArgumentError(
        "--mode hand needs --rank R --nranks N --id-file PATH with 0 <= R < N");
  }
  int devices = 0;
  CUDA_OK(cudaGetDeviceCount(&devices));
  CUDA_OK(cudaSetDevice(flags.rank % devices));
  TC_ASSIGN_OR_RETURN(ncclUniqueId id, HandExchange(flags));
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, flags.nranks, id, flags.rank));
  return comm;
}

absl::Status Run(const Flags& flags, double process_start_s) {
  TC_ASSIGN_OR_RETURN(const int64_t bytes_flag, ParseByteSize(flags.bytes));
  const size_t count = static_cast<size_t>(bytes_flag) / sizeof(float);
  const size_t bytes = count * sizeof(float);
  if (count == 0 || flags.iters < 1 || flags.warmup < 0) {
    return absl::InvalidArgumentError(
        "need --bytes >= 4, --iters >= 1 and --warmup >= 0");
  }

  ncclComm_t comm = nullptr;
  if (flags.mode == "hand") {
    TC_ASSIGN_OR_RETURN(comm, InitHand(flags));
  } else {
    TC_ASSIGN_OR_RETURN(comm, InitNcclCommFromEnv());
  }
  const double comm_ready_ms = (BootSeconds() - process_start_s) * 1e3;
  int rank = 0, nranks = 1;
  NCCL_OK(ncclCommUserRank(comm, &rank));
  NCCL_OK(ncclCommCount(comm, &nranks));

  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float* send = nullptr;
  float* recv = nullptr;
  float* scalar = nullptr;
  CUDA_OK(cudaMalloc(&send, bytes));
  CUDA_OK(cudaMalloc(&recv, bytes));
  CUDA_OK(cudaMalloc(&scalar, 2 * sizeof(float)));

  // Rank r contributes r + 1 everywhere, so every element of the sum is
  // n (n + 1) / 2: small integers, exact in float whatever the order of
  // additions.
  {
    std::vector<float> host(count, static_cast<float>(rank + 1));
    CUDA_OK(cudaMemcpy(send, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  CUDA_OK(cudaMemset(recv, 0, bytes));

  // The slowest rank's time to communicator ready.
  float ready = static_cast<float>(comm_ready_ms);
  CUDA_OK(cudaMemcpy(scalar, &ready, sizeof(float), cudaMemcpyHostToDevice));
  NCCL_OK(ncclAllReduce(scalar, scalar, 1, ncclFloat, ncclMax, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  float ready_max = 0;
  CUDA_OK(cudaMemcpy(&ready_max, scalar, sizeof(float), cudaMemcpyDeviceToHost));

  for (int i = 0; i < flags.warmup; ++i) {
    NCCL_OK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream));
  }
  CUDA_OK(cudaStreamSynchronize(stream));

  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  CUDA_OK(cudaEventRecord(start, stream));
  for (int i = 0; i < flags.iters; ++i) {
    NCCL_OK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream));
  }
  CUDA_OK(cudaEventRecord(stop, stream));
  CUDA_OK(cudaEventSynchronize(stop));
  float elapsed_ms = 0;
  CUDA_OK(cudaEventElapsedTime(&elapsed_ms, start, stop));

  // Check every element here, then agree on the verdict across ranks (min of
  // 1/0 flags) so rank 0 reports everyone's.
  int64_t wrong = 0;
  {
    std::vector<float> host(count);
    CUDA_OK(cudaMemcpy(host.data(), recv, bytes, cudaMemcpyDeviceToHost));
    const float want = static_cast<float>(nranks) * (nranks + 1) / 2;
    for (float v : host) wrong += (v != want);
  }
  float ok_here = wrong == 0 ? 1.0f : 0.0f;
  CUDA_OK(cudaMemcpy(scalar + 1, &ok_here, sizeof(float), cudaMemcpyHostToDevice));
  NCCL_OK(ncclAllReduce(scalar + 1, scalar + 1, 1, ncclFloat, ncclMin, comm, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  float ok_all = 0;
  CUDA_OK(cudaMemcpy(&ok_all, scalar + 1, sizeof(float), cudaMemcpyDeviceToHost));
  const bool correct = ok_all == 1.0f;

  const double avg_s = elapsed_ms / 1e3 / flags.iters;
  const double algbw = static_cast<double>(bytes) / avg_s / 1e9;
  const double busbw = algbw * 2.0 * (nranks - 1) / nranks;

  if (wrong != 0) {
    std::cerr << absl::StrFormat("rank %d: %d of %d elements wrong\n", rank,
                                 wrong, count);
  }
  if (rank == 0) {
    std::cout << absl::StrFormat(
                     "all_reduce sum float: %d ranks, %s, avg %.1f us, algbw "
                     "%.2f GB/s, busbw %.2f GB/s, %s; communicator ready after "
                     "%.0f ms (slowest rank %.0f ms)",
                     nranks, FormatBytes(static_cast<int64_t>(bytes)),
                     avg_s * 1e6, algbw, busbw,
                     correct ? "correct" : "WRONG", comm_ready_ms, ready_max)
              << std::endl;
    google::protobuf::Struct report;
    auto& f = *report.mutable_fields();
    f["rank"].set_number_value(rank);
    f["world_size"].set_number_value(nranks);
    f["mode"].set_string_value(flags.mode);
    f["comm_ready_ms"].set_number_value(comm_ready_ms);
    f["comm_ready_max_ms"].set_number_value(ready_max);
    f["bytes"].set_number_value(static_cast<double>(bytes));
    f["iters"].set_number_value(flags.iters);
    f["avg_time_us"].set_number_value(avg_s * 1e6);
    f["algbw_gbps"].set_number_value(algbw);
    f["busbw_gbps"].set_number_value(busbw);
    f["correct"].set_bool_value(correct);
    // How the communicator was made: NCCL's version, the ids asked for
    // (TRAINCTL_NCCL_UNIQUE_IDS) and whether ncclCommInitRankScalable took
    // them, and where the rendezvous went (the node relay or the
    // coordinator).
    int nccl_version = 0;
    (void)ncclGetVersion(&nccl_version);
    f["nccl_version"].set_number_value(nccl_version);
    absl::StatusOr<trainctl::worker::RankEnv> rank_env = trainctl::worker::RankEnvFromEnv();
    const int ids = rank_env.ok() ? rank_env->nccl_unique_ids : 1;
    f["unique_ids"].set_number_value(ids);
    f["scalable_init"].set_bool_value(ids > 1 && trainctl::worker::NcclHasScalableInit());
    f["rendezvous"].set_string_value(
        rank_env.ok() ? trainctl::worker::RendezvousAddress(*rank_env) : "");
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    if (!google::protobuf::util::MessageToJsonString(report, &json, options).ok()) {
      return absl::InternalError("cannot print the JSON report");
    }
    std::cout << json << std::endl;
  }

  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(send);
  cudaFree(recv);
  cudaFree(scalar);
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
  if (!correct) {
    return absl::DataLossError("all-reduce result is wrong on some rank");
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- --preflight

constexpr char kResultPrefix[] = "trainctl-preflight: ";

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  int out = fallback;
  if (v == nullptr || !absl::SimpleAtoi(v, &out)) return fallback;
  return out;
}

// Prints the result line (once per process: the watchdog and the main path
// race for it).
std::atomic<bool> g_printed{false};
// comm_ready_ms once ncclCommInitRank returned (0 before), for the watchdog.
std::atomic<double> g_comm_ready_ms{0};
void PrintResult(const v1::PreflightProbeResult& result) {
  if (g_printed.exchange(true)) return;
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(result, &json, options).ok()) {
    json = "{}";
  }
  std::cout << kResultPrefix << json << std::endl;
}

// Average seconds of one all-reduce of `count` floats on `comm`.
absl::StatusOr<double> TimeAllReduce(ncclComm_t comm, float* send, float* recv,
                                     size_t count, int warmup, int iters,
                                     cudaStream_t stream) {
  for (int i = 0; i < warmup; ++i) {
    NCCL_OK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream));
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  CUDA_OK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) {
    NCCL_OK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream));
  }
  CUDA_OK(cudaEventRecord(stop, stream));
  CUDA_OK(cudaEventSynchronize(stop));
  float elapsed_ms = 0;
  CUDA_OK(cudaEventElapsedTime(&elapsed_ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return elapsed_ms / 1e3 / iters;
}

// busbw of an all-reduce of `bytes` over `n` ranks taking `avg_s`, GB/s.
double BusBw(size_t bytes, double avg_s, int n) {
  const double algbw = static_cast<double>(bytes) / avg_s / 1e9;
  return algbw * 2.0 * (n - 1) / std::max(n, 1);
}

absl::Status RunPreflight(const Flags& flags, double process_start_s,
                          v1::PreflightProbeResult& result) {
  TC_ASSIGN_OR_RETURN(const int64_t bytes_flag, ParseByteSize(flags.bytes));
  const size_t count = static_cast<size_t>(bytes_flag) / sizeof(float);
  const size_t bytes = count * sizeof(float);
  if (count == 0 || flags.iters < 1 || flags.warmup < 0) {
    return absl::InvalidArgumentError(
        "need --bytes >= 4, --iters >= 1 and --warmup >= 0");
  }
  TC_ASSIGN_OR_RETURN(ncclComm_t comm, InitNcclCommFromEnv(
      flags.timeout_ms > 0 ? absl::Milliseconds(flags.timeout_ms)
                           : absl::Seconds(120)));
  result.set_comm_ready_ms((BootSeconds() - process_start_s) * 1e3);
  g_comm_ready_ms.store(result.comm_ready_ms());
  int rank = 0, nranks = 1;
  NCCL_OK(ncclCommUserRank(comm, &rank));
  NCCL_OK(ncclCommCount(comm, &nranks));
  result.set_rank(rank);

  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float* send = nullptr;
  float* recv = nullptr;
  CUDA_OK(cudaMalloc(&send, bytes));
  CUDA_OK(cudaMalloc(&recv, bytes));
  {
    std::vector<float> host(count, static_cast<float>(rank + 1));
    CUDA_OK(cudaMemcpy(send, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  TC_ASSIGN_OR_RETURN(const double avg_s, TimeAllReduce(comm, send, recv, count,
                                                        flags.warmup, flags.iters,
                                                        stream));
  result.set_busbw_gbps(BusBw(bytes, avg_s, nranks));
  // The result must be right, not only fast: every element is n (n + 1) / 2.
  {
    std::vector<float> host(count);
    CUDA_OK(cudaMemcpy(host.data(), recv, bytes, cudaMemcpyDeviceToHost));
    const float want = static_cast<float>(nranks) * (nranks + 1) / 2;
    int64_t wrong = 0;
    for (float v : host) wrong += (v != want);
    if (wrong != 0) {
      return absl::DataLossError(absl::StrFormat(
          "%d of %d elements of the all-reduce are wrong", wrong, count));
    }
  }

  // NVLink figure: an all-reduce among this node's ranks only, when the gang
  // spans nodes and this node has several of its ranks.
  const int local_world = EnvInt("LOCAL_WORLD_SIZE", 1);
  const int groups = EnvInt("GROUP_WORLD_SIZE", 1);
  if (local_world > 1 && groups > 1) {
    ncclComm_t intra = nullptr;
    NCCL_OK(ncclCommSplit(comm, EnvInt("GROUP_RANK", 0), EnvInt("LOCAL_RANK", 0),
                          &intra, nullptr));
    int n = 1;
    NCCL_OK(ncclCommCount(intra, &n));
    TC_ASSIGN_OR_RETURN(const double intra_s, TimeAllReduce(intra, send, recv, count,
                                                           flags.warmup, flags.iters,
                                                           stream));
    result.set_intra_node_busbw_gbps(BusBw(bytes, intra_s, n));
    ncclCommDestroy(intra);
  }
  cudaFree(send);
  cudaFree(recv);
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
  return absl::OkStatus();
}

// --preflight: the watchdog, the run, the result line; the exit code.
int PreflightMain(const Flags& flags, double process_start_s) {
  v1::PreflightProbeResult result;
  result.set_rank(EnvInt("RANK", 0));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog;
  if (flags.timeout_ms > 0) {
    watchdog = std::thread([&] {
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, std::chrono::milliseconds(flags.timeout_ms),
                      [&] { return done; })) {
        return;
      }
      v1::PreflightProbeResult late;
      late.set_rank(EnvInt("RANK", 0));
      late.set_timed_out(true);
      late.set_comm_ready_ms(g_comm_ready_ms.load());
      late.set_error(absl::StrFormat(
          "gave up after %d ms (--timeout-ms) waiting for the other ranks (%s)",
          flags.timeout_ms,
          late.comm_ready_ms() > 0 ? "in the all-reduce"
                                   : "before the communicator was ready"));
      PrintResult(late);
      std::_Exit(1);
    });
  }
  absl::Status status = RunPreflight(flags, process_start_s, result);
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  if (watchdog.joinable()) watchdog.join();
  if (!status.ok()) {
    result.set_error(std::string(status.message()));
    result.set_timed_out(absl::IsDeadlineExceeded(status));
  }
  PrintResult(result);
  return status.ok() ? 0 : 1;
}

}  // namespace
}  // namespace trainctl::worker

int main(int argc, char** argv) {
  const double main_s = trainctl::worker::BootSeconds();
  const double process_start_s =
      trainctl::worker::ProcessStartBootSeconds(main_s);
  trainctl::worker::Flags flags;
  CLI::App app{"NCCL all-reduce bandwidth check for trainctl jobs"};
  app.add_option("--mode", flags.mode,
                 "trainctl: bootstrap from trainctl's launch environment; "
                 "hand: --rank/--nranks/--id-file")
      ->check(CLI::IsMember({"trainctl", "hand"}))
      ->capture_default_str();
  app.add_option("--bytes", flags.bytes, "buffer size, e.g. 256MiB")
      ->capture_default_str();
  app.add_option("--iters", flags.iters, "timed iterations")->capture_default_str();
  app.add_option("--warmup", flags.warmup, "untimed iterations first")
      ->capture_default_str();
  app.add_option("--rank", flags.rank, "--mode hand: this process's rank");
  app.add_option("--nranks", flags.nranks, "--mode hand: number of ranks");
  app.add_option("--id-file", flags.id_file,
                 "--mode hand: rank 0 writes the ncclUniqueId here, others read it");
  app.add_flag("--preflight", flags.preflight,
               "pre-flight mode (trainctl agents use it): every rank prints one "
               "'trainctl-preflight: {json}' result line and exits 1 on failure");
  app.add_option("--timeout-ms", flags.timeout_ms,
                 "--preflight: give up (timed_out) after this many ms; 0: never");
  CLI11_PARSE(app, argc, argv);

  if (flags.preflight) {
    return trainctl::worker::PreflightMain(flags, process_start_s);
  }
  absl::Status status = trainctl::worker::Run(flags, process_start_s);
  if (!status.ok()) {
    std::cerr << "trainctl-nccl-allreduce: " << status.message() << std::endl;
    return 1;
  }
  return 0;
}
