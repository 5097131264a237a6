#ifndef TRAINCTL_COMMON_MALLOC_TUNING_H_
#define TRAINCTL_COMMON_MALLOC_TUNING_H_

// glibc malloc settings for processes that carry session streams (the
// coordinator, the agent, the CLI's exec and port-forward): output goes in
// messages of up to 1 MiB (proto/trainctl/v1/session.proto), and with
// glibc's defaults each such buffer is an mmap of its own, or heap the next
// free hands back to the kernel: every chunk then costs fresh pages (page
// faults, zeroing) in each process it passes. With a fixed mmap threshold of
// kStreamMmapThresholdBytes and a trim threshold of kStreamTrimThresholdBytes
// they are reused from the heap instead. Measured on loopback
// (bench/session_bench.py): one port-forward stream about 1.5x faster.

#include <malloc.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace trainctl {

// Allocations at least this large (4 MiB) are mmapped; smaller ones come
// from the heap.
inline constexpr size_t kStreamMmapThresholdBytes = 4 << 20;
// Free memory at the top of a heap beyond this (32 MiB) goes back to the
// kernel; what a process keeps unused is bounded by it per malloc arena.
inline constexpr size_t kStreamTrimThresholdBytes = 32 << 20;

// Sets glibc's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD to the values above
// (which also turns off glibc's own adjusting of them). Call once, first
// thing in main(). Returns whether both were set: false when the
// environment's GLIBC_TUNABLES sets malloc's own (left as the user chose)
// or glibc refused one (its default stays; nothing else to do).
inline bool TuneMallocForStreams() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return false;
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kStreamMmapThresholdBytes)) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, static_cast<int>(kStreamTrimThresholdBytes)) == 1;
  return mmap_ok && trim_ok;
}

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_MALLOC_TUNING_H_
