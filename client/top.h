#ifndef TRAINCTL_CLIENT_TOP_H_
#define TRAINCTL_CLIENT_TOP_H_

// `trainctl top`: a text frame of the whole cluster, like nvidia-smi or nvtop
// for many hosts. Rendering is a pure function of a TopFrame (top.proto), so
// `top --once` and tests print exactly what the live view redraws.

#include <string>
#include <vector>

#include "trainctl/v1/top.pb.h"

namespace trainctl::cli {

// How much history a frame asks for: the newest samples per job (at the
// coordinator's default 2 s period, 150 = the last 5 minutes).
inline constexpr int kTopHistorySamples = 150;

// `values` (0..max) as a sparkline of at most `width` characters (U+2581..
// U+2588, eight levels); longer series are averaged into `width` buckets,
// oldest left. Empty for no values.
std::string Sparkline(const std::vector<double>& values, double max, int width);

// One frame: a header line, a GPU table (node, GPU, model, utilization bar
// and %, memory used/total, power W, temperature C, jobs on it) and a table
// of the jobs on a GPU now (id, name, GPU utilization sparkline over the history, min/avg/max
// utilization %, peak GPU memory, CPU %, diagnosis codes). `width` is the
// terminal width in columns (0: 120). Lines end in "\n"; no escape codes.
std::string RenderTop(const v1::TopFrame& frame, int width);

}  // namespace trainctl::cli

#endif  // TRAINCTL_CLIENT_TOP_H_
