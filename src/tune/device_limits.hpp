// What the pruner needs to know about a device: hard resource limits for the filters and peak
// throughputs for the roofline cost model (DESIGN §6.3). "Processor" is an SM on a GPU and a
// hardware thread on the CPU; a "block" is a CTA on a GPU and one worker thread on the CPU.
#pragma once
#include <cstdint>

namespace attnkit::tune {

struct DeviceLimits {
  int32_t compute_capability = 0;  // GPU: major * 10 + minor (which kernel tiers run); CPU: 0
  int32_t processors = 1;
  int64_t max_smem_per_block = 0;  // GPU: opt-in shared memory per CTA; CPU: L2 bytes per core
  int64_t max_smem_per_processor = 0;
  int32_t max_threads_per_block = 0;
  int32_t max_threads_per_processor = 0;
  int32_t max_registers_per_thread = 0;
  int64_t registers_per_processor = 0;
  int32_t max_blocks_per_processor = 1;
  double peak_flops = 0.0;             // whole device, for the tuned dtype's fastest path
  double peak_bytes_per_second = 0.0;  // whole device
  double launch_overhead_seconds = 0.0;
};

// The host CPU with `threads` workers (L2 size read from sysfs when available; peaks are rough
// per-core figures, which only scale the ranking, not its order within one problem).
DeviceLimits cpu_device_limits(int32_t threads);

// Published limits of NVIDIA architectures by compute capability (80, 86, 89, 90, 100, 120), for a
// device with `multiprocessors` SMs; unknown capabilities get SM80's.
DeviceLimits cuda_device_limits(int32_t compute_capability, int32_t multiprocessors);

}  // namespace attnkit::tune
