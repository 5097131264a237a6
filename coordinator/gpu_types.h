#ifndef TRAINCTL_COORDINATOR_GPU_TYPES_H_
#define TRAINCTL_COORDINATOR_GPU_TYPES_H_

// GPU types: the short, lower-case model name the coordinator derives from
// a GPU's product name (Gpu.gpu_type), which `trainctl submit --gpu-type`
// matches and `trainctl nodes` shows.

#include <string>

#include "absl/strings/string_view.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// The type of a GPU named `name` (NVML's product name, or what a fake GPU
// reports). The rule: lower-case the name, split it into words at every
// character other than a-z and 0-9, drop vendor and brand words (nvidia,
// tesla, geforce, quadro, amd, instinct, radeon), memory sizes ("80gb",
// "16g"), memory and form-factor words (hbm*, sxm*, pcie, nvl, ...); join
// "rtx"/"gtx"/"titan" with the word after it; the first word left is the
// type. "NVIDIA H100 80GB HBM3" -> "h100", "NVIDIA A100-SXM4-40GB" ->
// "a100", "Tesla V100-SXM2-16GB" -> "v100", "NVIDIA GeForce RTX 4090" ->
// "rtx4090", "NVIDIA L40S" -> "l40s", "H100" (a fake GPU) -> "h100". A name
// with no word left gives its first word ("NVIDIA" -> "nvidia"), an empty
// name "". The result is always of [a-z0-9] (a valid --gpu-type).
std::string GpuTypeOf(absl::string_view name);

// Sets Gpu.gpu_type of every GPU of `node` from its name (GpuTypeOf),
// replacing whatever the agent sent. Called when an agent registers.
void SetGpuTypes(v1::Node& node);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_GPU_TYPES_H_
