#include "cli_timing.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cli_device.hpp"

namespace attnkit::cli {
namespace {

double flops_per_second(double flops, double milliseconds) {
  return milliseconds > 0.0 ? flops / (milliseconds * 1e-3) : 0.0;
}

}  // namespace

Timing measure(Device device, int warmup, int repeat, const std::function<void()>& work, const ProgressOutput& progress,
               const std::string& what) {
  ProgressReporter reporter(progress, "timing " + what, warmup + repeat, "runs");
  for (int i = 0; i < warmup; ++i) {
    work();
    reporter.advance();
  }
  synchronize(device);
  std::vector<double> times;
  times.reserve(static_cast<std::size_t>(repeat));
  for (int i = 0; i < repeat; ++i) {
    times.push_back(time_milliseconds(device, work));
    reporter.advance();
  }
  std::sort(times.begin(), times.end());
  const std::size_t n = times.size();
  Timing timing;
  timing.median_ms = n % 2 == 1 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  timing.min_ms = times.front();
  timing.runs = repeat;
  timing.warmup = warmup;
  return timing;
}

std::string throughput_text(double flops, double milliseconds) {
  char text[64];
  const double per_second = flops_per_second(flops, milliseconds);
  if (per_second >= 1e12) {
    std::snprintf(text, sizeof(text), "%.2f TFLOP/s", per_second * 1e-12);
  } else if (per_second >= 1e9) {
    std::snprintf(text, sizeof(text), "%.2f GFLOP/s", per_second * 1e-9);
  } else {
    std::snprintf(text, sizeof(text), "%.2f MFLOP/s", per_second * 1e-6);
  }
  return text;
}

void report_timing(RunReport& report, const std::string& label, const char* key, const Timing& timing, double flops) {
  report.line("%-9s median %.4g ms (min %.4g ms) over %d runs after %d warm-up   %s", (label + ":").c_str(),
              timing.median_ms, timing.min_ms, timing.runs, timing.warmup,
              throughput_text(flops, timing.median_ms).c_str());
  report.document()[key] = Json{{"median_ms", timing.median_ms},
                                {"min_ms", timing.min_ms},
                                {"runs", timing.runs},
                                {"warmup", timing.warmup},
                                {"flops_per_second", flops_per_second(flops, timing.median_ms)}};
}

}  // namespace attnkit::cli
