#ifndef TRAINCTL_WORKER_NCCL_TRAINCTL_NCCL_H_
#define TRAINCTL_WORKER_NCCL_TRAINCTL_NCCL_H_

/* C ABI of libtrainctl_nccl.so, for programs that cannot call C++ (Python via
 * ctypes). Both functions read trainctl's launch environment (docs/design.md
 * §4: TRAINCTL_COORDINATOR, TRAINCTL_JOB_ID, TRAINCTL_ATTEMPT,
 * TRAINCTL_TOKEN, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) and wait up
 * to 120 s for rank 0's id.
 *
 * Return value: 0 on success, otherwise an absl::StatusCode number (e.g. 4
 * DEADLINE_EXCEEDED, 7 PERMISSION_DENIED, 9 FAILED_PRECONDITION, 13 INTERNAL,
 * 14 UNAVAILABLE); then `err_buf` (if not NULL) holds a NUL-terminated message,
 * truncated to `err_len` bytes, naming the rank and the cause.
 *
 * The library carries its own copy of trainctl's generated protobuf code,
 * registered in the process's libprotobuf: load it into programs that do not
 * link trainctl's protos themselves (C++ programs use tc_nccl_bootstrap).
 *
 * Python:
 *   lib = ctypes.CDLL("libtrainctl_nccl.so")
 *   comm = ctypes.c_void_p(); err = ctypes.create_string_buffer(1024)
 *   if lib.trainctl_init_nccl_comm(ctypes.byref(comm), err, len(err)):
 *       raise RuntimeError(err.value.decode())
 */

#include <stddef.h>
#include <stdint.h>

#define TRAINCTL_NCCL_UNIQUE_ID_BYTES 128

#ifdef __cplusplus
extern "C" {
#endif

/* Creates this rank's NCCL communicator (C++: InitNcclCommFromEnv): selects
 * CUDA device LOCAL_RANK, exchanges the ncclUniqueId through the node's
 * rendezvous relay (TRAINCTL_RENDEZVOUS_SOCKET, set by the agent) or else
 * the coordinator, and calls ncclCommInitRank; with
 * TRAINCTL_NCCL_UNIQUE_IDS=K > 1 and NCCL >= 2.23, K root ranks publish an id
 * each and every rank calls ncclCommInitRankScalable with all K
 * (docs/rendezvous.md). On success *comm_out is the ncclComm_t; the caller
 * releases it with ncclCommDestroy. */
int trainctl_init_nccl_comm(void** comm_out, char* err_buf, size_t err_len);

/* The id exchange alone, for programs that create the communicator
 * themselves: rank 0 passes its own ncclUniqueId bytes in `id_inout` and they
 * are published; on every other rank `id_inout` receives rank 0's bytes.
 * Always one id (TRAINCTL_NCCL_UNIQUE_IDS does not apply). */
int trainctl_exchange_unique_id(char id_inout[TRAINCTL_NCCL_UNIQUE_ID_BYTES],
                                char* err_buf, size_t err_len);

/* ---- Metrics (trainctl_metrics.cc): a training process reports scalars to
 * the coordinator, authenticated by its attempt's TRAINCTL_TOKEN; read them
 * with `trainctl metrics JOB`. Reads TRAINCTL_COORDINATOR, TRAINCTL_JOB_ID,
 * TRAINCTL_ATTEMPT, TRAINCTL_TOKEN and RANK at the first call. Thread-safe.
 *
 * Points are buffered and sent in batches, one RPC and one durable write per
 * batch: when 64 are buffered, when the oldest is 1 s old (checked at the next
 * report), and at trainctl_flush_metrics(). A crash loses at most the points
 * not yet flushed; call trainctl_flush_metrics() before exit and wherever a
 * point must be durable.
 *
 * Return value: 0, or an absl::StatusCode number (3 INVALID_ARGUMENT: bad key,
 * non-finite value, negative step; 7 PERMISSION_DENIED: not this attempt's
 * token; 8 RESOURCE_EXHAUSTED: the job's cap of stored points; 9
 * FAILED_PRECONDITION: not in a trainctl task; 14 UNAVAILABLE: coordinator
 * unreachable, points kept for the next flush). trainctl_metrics_last_error
 * gives the message of this thread's last failed call.
 *
 * Python:
 *   lib = ctypes.CDLL("libtrainctl_nccl.so")
 *   lib.trainctl_report_metric.argtypes = [ctypes.c_char_p, ctypes.c_double, ctypes.c_int64]
 *   lib.trainctl_report_metric(b"loss", loss, step)
 *   atexit.register(lib.trainctl_flush_metrics)
 */

/* Reports one scalar, e.g. ("loss", 0.25, 1200); `key` is 1-128 bytes of
 * [A-Za-z0-9_.:/-]. */
int trainctl_report_metric(const char* key, double value, int64_t step);

/* Reports `n` scalars of the same step (keys[i] = values[i]). */
int trainctl_report_metrics(const char* const* keys, const double* values,
                            size_t n, int64_t step);

/* Sends every buffered point and waits until the coordinator stored them. */
int trainctl_flush_metrics(void);

/* Copies this thread's last metrics error message into buf (NUL-terminated,
 * truncated to len bytes); returns its full length. */
size_t trainctl_metrics_last_error(char* buf, size_t len);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* TRAINCTL_WORKER_NCCL_TRAINCTL_NCCL_H_ */
