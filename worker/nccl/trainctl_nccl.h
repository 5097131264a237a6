#ifndef TRAINCTL_WORKER_NCCL_TRAINCTL_NCCL_H_
#define TRAINCTL_WORKER_NCCL_TRAINCTL_NCCL_H_

/* C ABI of libtrainctl_nccl.so, for programs that cannot call C++ (Python via
 * ctypes). Both functions read trainctl's launch environment (DESIGN.md
 * section 4: TRAINCTL_COORDINATOR, TRAINCTL_JOB_ID, TRAINCTL_ATTEMPT,
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

#define TRAINCTL_NCCL_UNIQUE_ID_BYTES 128

#ifdef __cplusplus
extern "C" {
#endif

/* Creates this rank's NCCL communicator (C++: InitNcclCommFromEnv): selects
 * CUDA device LOCAL_RANK, exchanges the ncclUniqueId through the coordinator
 * and calls ncclCommInitRank. On success *comm_out is the ncclComm_t; the
 * caller releases it with ncclCommDestroy. */
int trainctl_init_nccl_comm(void** comm_out, char* err_buf, size_t err_len);

/* The id exchange alone, for programs that create the communicator
 * themselves: rank 0 passes its own ncclUniqueId bytes in `id_inout` and they
 * are published; on every other rank `id_inout` receives rank 0's bytes. */
int trainctl_exchange_unique_id(char id_inout[TRAINCTL_NCCL_UNIQUE_ID_BYTES],
                                char* err_buf, size_t err_len);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* TRAINCTL_WORKER_NCCL_TRAINCTL_NCCL_H_ */
