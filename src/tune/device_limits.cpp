#include "tune/device_limits.hpp"

#include <fstream>
#include <string>

namespace attnkit::tune {
namespace {

// sysfs prints cache sizes as e.g. "2048K".
int64_t read_cpu_l2_bytes() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index2/size");
  std::string text;
  if (!(in >> text) || text.empty()) return 1 << 20;
  int64_t scale = 1;
  if (text.back() == 'K') scale = 1024;
  if (text.back() == 'M') scale = 1024 * 1024;
  try {
    const int64_t value = std::stoll(text) * scale;
    return value > 0 ? value : 1 << 20;
  } catch (...) {
    return 1 << 20;
  }
}

}  // namespace

DeviceLimits cpu_device_limits(int32_t threads) {
  DeviceLimits limits;
  limits.processors = threads > 0 ? threads : 1;
  limits.max_smem_per_block = read_cpu_l2_bytes();
  limits.max_smem_per_processor = limits.max_smem_per_block;
  limits.max_threads_per_block = limits.processors;
  limits.max_threads_per_processor = limits.processors;
  limits.max_registers_per_thread = 0;  // not a CPU limit
  limits.registers_per_processor = 0;
  limits.max_blocks_per_processor = 1;
  // A scalar reference loop: a few GFLOP/s per core; memory shared by all cores.
  limits.peak_flops = 4e9 * limits.processors;
  limits.peak_bytes_per_second = 20e9;
  limits.launch_overhead_seconds = 5e-6;
  return limits;
}

DeviceLimits cuda_device_limits(int32_t compute_capability, int32_t multiprocessors) {
  DeviceLimits limits;
  limits.compute_capability = compute_capability;
  limits.processors = multiprocessors > 0 ? multiprocessors : 1;
  limits.max_threads_per_block = 1024;
  limits.max_registers_per_thread = 255;
  limits.registers_per_processor = 65536;
  limits.launch_overhead_seconds = 4e-6;
  // Per-SM dense fp16 tensor-core FLOP/s at boost clock and per-SM share of DRAM bandwidth.
  double flops_per_sm = 1024.0 * 2 * 1.41e9;  // A100: 312 TF/s over 108 SMs
  double bytes_per_sm = 2.0e12 / 108;
  switch (compute_capability) {
    case 90:
      limits.max_smem_per_block = 227 * 1024;
      limits.max_smem_per_processor = 228 * 1024;
      limits.max_threads_per_processor = 2048;
      limits.max_blocks_per_processor = 32;
      flops_per_sm = 989e12 / 132;  // H100 SXM
      bytes_per_sm = 3.35e12 / 132;
      break;
    case 100:
    case 120:
      limits.max_smem_per_block = (compute_capability == 100 ? 227 : 99) * 1024;
      limits.max_smem_per_processor = (compute_capability == 100 ? 228 : 100) * 1024;
      limits.max_threads_per_processor = compute_capability == 100 ? 2048 : 1536;
      limits.max_blocks_per_processor = 32;
      flops_per_sm = compute_capability == 100 ? 2250e12 / 148 : 210e12 / 84;
      bytes_per_sm = compute_capability == 100 ? 8e12 / 148 : 1.8e12 / 84;
      break;
    case 86:
    case 89:
      limits.max_smem_per_block = 99 * 1024;
      limits.max_smem_per_processor = 100 * 1024;
      limits.max_threads_per_processor = 1536;
      limits.max_blocks_per_processor = compute_capability == 89 ? 24 : 16;
      flops_per_sm = compute_capability == 89 ? 330e12 / 128 : 142e12 / 84;
      bytes_per_sm = compute_capability == 89 ? 1.0e12 / 128 : 0.94e12 / 84;
      break;
    default:  // 80 and anything unknown
      limits.max_smem_per_block = 163 * 1024;
      limits.max_smem_per_processor = 164 * 1024;
      limits.max_threads_per_processor = 2048;
      limits.max_blocks_per_processor = 32;
      break;
  }
  limits.peak_flops = flops_per_sm * limits.processors;
  limits.peak_bytes_per_second = bytes_per_sm * limits.processors;
  return limits;
}

}  // namespace attnkit::tune
