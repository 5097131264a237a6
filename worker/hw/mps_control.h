#ifndef TRAINCTL_WORKER_HW_MPS_CONTROL_H_
#define TRAINCTL_WORKER_HW_MPS_CONTROL_H_

// CUDA Multi-Process Service (MPS) per GPU, behind an interface: one MPS
// control daemon per GPU the agent offers (`nvidia-cuda-mps-control -d` with
// that GPU alone visible), each with its own pipe and log directory, so
// packed trials on a GPU share one MPS server there instead of time-slicing
// CUDA contexts. Facts used (NVIDIA MPS documentation, "Appendix: Tools and
// Interface Reference" and "Environment Variables"):
//   - CUDA_MPS_PIPE_DIRECTORY names where a daemon and its clients meet; one
//     per daemon, the same for the daemon and every client of it;
//   - CUDA_MPS_LOG_DIRECTORY holds the daemon's and server's logs;
//   - `echo quit | nvidia-cuda-mps-control` (same pipe directory) stops it;
//   - CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=2048MB": device ordinal, as the
//     client sees its devices, = limit) caps a client's device memory;
//   - CUDA_MPS_ACTIVE_THREAD_PERCENTAGE caps the share of SMs a client uses;
//   - an MPS server serves one user id at a time: clients of another user
//     wait until the current server's clients are gone.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace trainctl::worker {

// Starts and stops the MPS control daemon of each GPU. Implementations are
// thread-safe.
class MpsControl {
 public:
  virtual ~MpsControl() = default;
  // Starts the daemon of GPU `index` (UUID `uuid`, the only device it sees).
  // Errors: FAILED_PRECONDITION when the control program cannot run or
  // exits non-zero (the message names it and its exit status).
  virtual absl::Status Start(int index, const std::string& uuid) = 0;
  // Stops every daemon Start() started; returns the first error (INTERNAL
  // naming the GPU) after trying them all.
  virtual absl::Status StopAll() = 0;
  // The pipe directory of GPU `index`'s daemon (what its clients get as
  // CUDA_MPS_PIPE_DIRECTORY); empty when none was started for it.
  virtual std::string PipeDirectory(int index) const = 0;
};

// The environment an MPS client task on GPU pipe directory `pipe_directory`
// gets: CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for device
// 0 (the task sees only its GPU) from `memory_limit_bytes` rounded down to
// MiB (none when <= 0), and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE when
// `active_thread_pct` is in 1..99 (none otherwise: all SMs). Pure.
std::map<std::string, std::string> MpsClientEnv(const std::string& pipe_directory,
                                                int64_t memory_limit_bytes,
                                                int active_thread_pct);

// MpsControl running `control_binary` (nvidia-cuda-mps-control). GPU i's
// daemon uses <root>/gpu-<i>/pipe and <root>/gpu-<i>/log.
class DaemonMpsControl : public MpsControl {
 public:
  // Creates `root` (mode 0755: clients of every task account must reach the
  // pipes). Errors: INVALID_ARGUMENT when `root` is empty or so long that a
  // pipe path would pass the 107 bytes a UNIX socket path may have;
  // FAILED_PRECONDITION when `root` cannot be created or `control_binary`
  // is not found on PATH or is not executable.
  static absl::StatusOr<std::unique_ptr<DaemonMpsControl>> Create(
      std::string root, std::string control_binary = "nvidia-cuda-mps-control");

  absl::Status Start(int index, const std::string& uuid) override;
  absl::Status StopAll() override;
  std::string PipeDirectory(int index) const override;

 private:
  DaemonMpsControl(std::string root, std::string binary);
  // Runs the control program with the daemon's environment for GPU
  // `index`, `args` and `stdin_text` on its standard input; its exit status.
  absl::StatusOr<int> Run(int index, const std::string& uuid,
                          const std::vector<std::string>& args,
                          const std::string& stdin_text) const;

  const std::string root_;
  const std::string binary_;
  mutable absl::Mutex mu_;
  // GPU index -> UUID of the daemons started.
  std::map<int, std::string> started_ ABSL_GUARDED_BY(mu_);
};

// An MpsControl for tests: records what was started and stopped; Start()
// fails with FAILED_PRECONDITION while `fail` is set. Pipe directories are
// "/fake-mps/gpu-<i>/pipe". Thread-safe.
class FakeMpsControl : public MpsControl {
 public:
  absl::Status Start(int index, const std::string& uuid) override;
  absl::Status StopAll() override;
  std::string PipeDirectory(int index) const override;
  // GPU index -> UUID of the daemons running now.
  std::map<int, std::string> Running() const;
  void SetFailing(bool fail);

 private:
  mutable absl::Mutex mu_;
  std::map<int, std::string> running_ ABSL_GUARDED_BY(mu_);
  bool fail_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_MPS_CONTROL_H_
