#include "worker/hw/cuda_driver_hold.h"

#include <dlfcn.h>

#include <atomic>

#include "absl/strings/str_cat.h"

namespace trainctl::worker {

absl::Status HoldCudaDriver(const std::string& library) {
  static std::atomic<bool> held{false};
  if (held.load()) return absl::OkStatus();
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return absl::UnavailableError(
        absl::StrCat("cannot load ", library, ": ", err ? err : "unknown error"));
  }
  // CUresult cuInit(unsigned int Flags); CUresult is an int-sized enum.
  using CuInit = int (*)(unsigned int);
  auto cu_init = reinterpret_cast<CuInit>(dlsym(handle, "cuInit"));
  if (cu_init == nullptr) {
    dlclose(handle);
    return absl::UnavailableError(absl::StrCat(library, " has no cuInit"));
  }
  if (const int r = cu_init(0); r != 0) {
    // Left loaded: unloading a driver library that failed half-way is not safer.
    return absl::UnavailableError(absl::StrCat("cuInit(0) failed: CUresult ", r));
  }
  held.store(true);
  return absl::OkStatus();  // `handle` stays open for the process's life.
}

}  // namespace trainctl::worker
