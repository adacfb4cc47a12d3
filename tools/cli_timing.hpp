// Timing of a run: `warmup` untimed calls, then `repeat` timed calls on the run's device; the
// median is reported, with throughput counting only useful FLOPs (DESIGN §5).
#pragma once
#include <functional>
#include <string>

#include "attnkit/tensor.hpp"
#include "progress_reporter.hpp"
#include "run_report.hpp"

namespace attnkit::cli {

struct Timing {
  double median_ms = 0.0;
  double min_ms = 0.0;
  int runs = 0;
  int warmup = 0;
};

// `what` names the work in the progress line ("forward", "backward", "gemm").
Timing measure(Device device, int warmup, int repeat, const std::function<void()>& work, const ProgressOutput& progress,
               const std::string& what);

// "12.3 TFLOP/s", "45.6 GFLOP/s" or "7.8 MFLOP/s", whichever unit keeps the number >= 1.
std::string throughput_text(double flops, double milliseconds);

// Text: "<label>:  median 1.234 ms (min 1.2 ms) over 10 runs after 1 warm-up   41.2 GFLOP/s".
// JSON: document()[key] = {median_ms, min_ms, runs, warmup, flops_per_second}.
void report_timing(RunReport& report, const std::string& label, const char* key, const Timing& timing, double flops);

}  // namespace attnkit::cli
