#ifndef TRAINCTL_WORKER_TORCH_STORE_H_
#define TRAINCTL_WORKER_TORCH_STORE_H_

// PyTorch TCPStores hosted by the agent for the gangs whose rank 0 runs on
// this node, so the store is listening before any rank reaches
// init_process_group("env://") — what torchrun's agent does (the ranks get
// TORCHELASTIC_USE_AGENT_STORE=True and all connect as clients;
// torch/distributed/rendezvous.py). Without it rank 0 creates the store late
// and a rank refused before then backs off for 0.15-0.74 s
// (bench/results/ddp_probe_cuda_hold.json).
//
// The stores are PyTorch's own (torch.distributed.TCPStore) in a helper
// process started once with torch imported (worker/nccl/python/
// torch_store_host.py): no reimplementation of TCPStore's wire protocol,
// which changes between PyTorch versions.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainctl::worker {

// Opens and closes the store of one job attempt, listening on its
// MASTER_PORT. Thread-safe.
class TorchStore {
 public:
  virtual ~TorchStore() = default;
  // Starts a store for `world_size` ranks listening on `port` (TCP, every
  // interface); an older store on that port is replaced.
  // Errors: UNAVAILABLE when the host process is gone or does not answer in
  // time; FAILED_PRECONDITION with PyTorch's message when the store cannot
  // be created (e.g. the port is in use).
  virtual absl::Status Open(int port, int world_size) = 0;
  // Stops the store on `port`, if any. No errors (logged).
  virtual void Close(int port) = 0;
};

// TorchStore over the helper process (torch_store_host.py's line protocol).
class TorchStoreHost : public TorchStore {
 public:
  // Starts `argv` (e.g. {"python3", ".../torch_store_host.py"}; its stderr
  // goes to the agent's) and waits up to `ready_timeout` for its "ready"
  // line. Ignores SIGPIPE in this process (a dead helper must not kill the
  // agent on the next request).
  // Errors: INVALID_ARGUMENT for an empty argv; UNAVAILABLE when the
  // program cannot be started, exits (e.g. no torch), or is not ready in
  // time.
  // Open and Close wait up to `request_timeout` for each reply.
  static absl::StatusOr<std::unique_ptr<TorchStoreHost>> Start(
      const std::vector<std::string>& argv, absl::Duration ready_timeout,
      absl::Duration request_timeout = absl::Seconds(10));

  // Closes the helper's stdin (it closes its stores and exits), waits up to
  // 5 s, then kills it.
  ~TorchStoreHost() override;
  TorchStoreHost(const TorchStoreHost&) = delete;
  TorchStoreHost& operator=(const TorchStoreHost&) = delete;

  // The PyTorch version the helper reported.
  const std::string& torch_version() const { return version_; }

  // Errors as TorchStore (UNAVAILABLE after the request timeout).
  absl::Status Open(int port, int world_size) override;
  void Close(int port) override;

 private:
  TorchStoreHost(pid_t pid, int to_fd, int from_fd, absl::Duration request_timeout);
  // Writes `request` and reads one reply line within `timeout`; marks the
  // helper broken (every later call fails) on a write error, EOF or timeout.
  absl::StatusOr<std::string> RequestLocked(const std::string& request,
                                            absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  const pid_t pid_;
  const absl::Duration request_timeout_;
  int to_fd_ ABSL_GUARDED_BY(mu_);
  int from_fd_ ABSL_GUARDED_BY(mu_);
  std::string pending_ ABSL_GUARDED_BY(mu_);  // Read past the last line.
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  std::string version_;
};

// Reads one '\n'-terminated line from `fd` into `line` (without the '\n'),
// keeping bytes read past it in `pending`. Errors: DEADLINE_EXCEEDED when no
// full line arrives by `deadline`; UNAVAILABLE at EOF or on a read error.
absl::Status ReadLineBefore(int fd, absl::Time deadline, std::string& pending,
                            std::string& line);

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_TORCH_STORE_H_
