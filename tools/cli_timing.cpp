#include "cli_timing.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cli_device.hpp"

namespace attnkit::cli {

Timing measure(Device device, int warmup, int repeat, const std::function<void()>& work) {
  for (int i = 0; i < warmup; ++i) {
    work();
  }
  synchronize(device);
  std::vector<double> times;
  times.reserve(static_cast<std::size_t>(repeat));
  for (int i = 0; i < repeat; ++i) {
    times.push_back(time_milliseconds(device, work));
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
  const double per_second = milliseconds > 0.0 ? flops / (milliseconds * 1e-3) : 0.0;
  if (per_second >= 1e12) {
    std::snprintf(text, sizeof(text), "%.2f TFLOP/s", per_second * 1e-12);
  } else if (per_second >= 1e9) {
    std::snprintf(text, sizeof(text), "%.2f GFLOP/s", per_second * 1e-9);
  } else {
    std::snprintf(text, sizeof(text), "%.2f MFLOP/s", per_second * 1e-6);
  }
  return text;
}

void print_timing(const char* label, const Timing& timing, double flops) {
  std::printf("%-9s median %.4g ms (min %.4g ms) over %d runs after %d warm-up   %s\n", label, timing.median_ms,
              timing.min_ms, timing.runs, timing.warmup, throughput_text(flops, timing.median_ms).c_str());
}

}  // namespace attnkit::cli
