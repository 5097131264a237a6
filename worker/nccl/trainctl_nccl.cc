// C ABI over nccl_bootstrap.h (see trainctl_nccl.h). Nothing throws across it.

#include "worker/nccl/trainctl_nccl.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "worker/nccl/nccl_bootstrap.h"

namespace {

// Writes `status`'s message into err_buf and returns its code.
int Report(const absl::Status& status, char* err_buf, size_t err_len) {
  if (err_buf != nullptr && err_len > 0) {
    const std::string text(status.message());
    const size_t n = std::min(text.size(), err_len - 1);
    std::memcpy(err_buf, text.data(), n);
    err_buf[n] = '\0';
  }
  return static_cast<int>(status.code());
}

}  // namespace

extern "C" int trainctl_init_nccl_comm(void** comm_out, char* err_buf,
                                       size_t err_len) {
  if (comm_out == nullptr) {
    return Report(absl::InvalidArgumentError("comm_out is NULL"), err_buf,
                  err_len);
  }
  absl::StatusOr<ncclComm_t> comm = trainctl::worker::InitNcclCommFromEnv();
  if (!comm.ok()) return Report(comm.status(), err_buf, err_len);
  *comm_out = *comm;
  return Report(absl::OkStatus(), err_buf, err_len);
}

extern "C" int trainctl_exchange_unique_id(
    char id_inout[TRAINCTL_NCCL_UNIQUE_ID_BYTES], char* err_buf,
    size_t err_len) {
  if (id_inout == nullptr) {
    return Report(absl::InvalidArgumentError("id_inout is NULL"), err_buf,
                  err_len);
  }
  absl::StatusOr<std::string> id = trainctl::worker::ExchangeUniqueIdFromEnv(
      [&]() -> absl::StatusOr<std::string> {
        return std::string(id_inout, TRAINCTL_NCCL_UNIQUE_ID_BYTES);
      });
  if (!id.ok()) return Report(id.status(), err_buf, err_len);
  std::memcpy(id_inout, id->data(), TRAINCTL_NCCL_UNIQUE_ID_BYTES);
  return Report(absl::OkStatus(), err_buf, err_len);
}
