// `trainctl top`: a live view of every GPU and job, redrawn in place every
// --interval, or one frame (--once), or TopFrames as JSON. The rendering
// itself is client/top.h.

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/cli_internal.h"
#include "client/top.h"

namespace trainctl::cli::internal {

CLI::App* AddTopCommand(CLI::App& app, Flags& f) {
  CLI::App* top = app.add_subcommand(
      "top", "Live view of every GPU and job: utilization, memory, power, "
             "temperature, per-job history and diagnosis");
  top->add_option("-n,--interval", f.interval_s,
                  "Seconds between refreshes (default 2)")
      ->check(CLI::Range(0.1, 3600.0));
  top->add_flag("--once", f.once, "Print one frame and exit (scripts, tests)");
  top->add_option("--frames", f.frames,
                  "Stop after this many frames (as top -n); 0: until interrupted")
      ->check(CLI::NonNegativeNumber);
  top->add_option("-o,--output", f.output,
                  "Output format: table or json (a TopFrame per refresh)")
      ->check(CLI::IsMember({"table", "json"}));
  top->footer(Example("  trainctl top\n  trainctl top --once\n"
                      "  trainctl top --once -o json\n"
                      "  trainctl top -n 5 --frames 12 > gpu.log   # a minute, no escape codes"));
  return top;
}

int Session::Top(absl::Duration interval, bool once, bool json, int frames) {
  for (int drawn = 0;; ++drawn) {
    const bool first = drawn == 0;
    v1::TopFrame frame;
    v1::ListNodesResponse nodes;
    if (absl::Status st = Call(&Stub::ListNodes, v1::ListNodesRequest(), &nodes);
        !st.ok()) {
      return Fail(st);
    }
    v1::GetJobUsageRequest request;
    request.set_max_samples(kTopHistorySamples);
    v1::GetJobUsageResponse usage;
    if (absl::Status st = Call(&Stub::GetJobUsage, request, &usage); !st.ok()) {
      return Fail(st);
    }
    frame.set_time_ms(absl::ToUnixMillis(clock_.Now()));
    frame.mutable_nodes()->Swap(nodes.mutable_nodes());
    frame.mutable_jobs()->Swap(usage.mutable_jobs());
    if (json) {
      out_ << ToJson(frame);
    } else {
      if (terminal_ && !once) {
        // Home, clear to the end: redraw in place without flicker.
        out_ << (first ? "\x1b[2J\x1b[H" : "\x1b[H\x1b[J");
      } else if (!first) {
        out_ << "\n";  // a pipe or a file: frame after frame
      }
      out_ << RenderTop(frame, terminal_width_);
    }
    out_.flush();
    if (once || (frames > 0 && drawn + 1 >= frames)) return kExitOk;
    absl::SleepFor(interval);
  }
}

}  // namespace trainctl::cli::internal
