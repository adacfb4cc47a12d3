// The identity of the machine and software a timing was measured with (DESIGN §6.2). A cache file
// holds the timings of exactly one device key; any difference — another GPU model or SM count,
// another CUDA runtime or driver, another attnkit version, a rebuilt kernel set — makes the timings
// foreign. The CPU backend's key is the CPU model name and worker thread count.
#pragma once
#include <cstdint>
#include <string>

#include "attnkit/backend.hpp"
#include "attnkit/build_info.hpp"

namespace attnkit::tune {

class ConfigSpaceRegistry;

struct DeviceKey {
  Backend backend = Backend::cpu;
  std::string name;
  int32_t processors = 0;          // SM count, or CPU worker threads
  int32_t compute_capability = 0;  // major*10 + minor; 0 on the CPU
  std::string cuda_runtime;
  std::string cuda_driver;
  std::string library_version;
  std::string kernel_set_hash;

  friend bool operator==(const DeviceKey&, const DeviceKey&) = default;
};

// One line naming every field, e.g. "backend=cpu name=... processors=8 cc=0 cuda_runtime= ...".
std::string canonical_device_text(const DeviceKey& key);
// 16 hex digits of the stable hash of the canonical text; names the device's cache file.
std::string device_key_hash(const DeviceKey& key);
// "" when equal, else the differing fields with both values, e.g.
// "library_version '0.0.9' (this build: '0.1.0'); kernel_set_hash 'ab..' (this build: 'cd..')".
std::string describe_key_difference(const DeviceKey& found, const DeviceKey& expected);

// The host CPU with `threads` workers (0 = all available), this library and `registry`'s CPU spaces.
DeviceKey cpu_device_key(int32_t threads, const ConfigSpaceRegistry& registry);
// A CUDA device as listed by attnkit::cuda_devices(), with this build's CUDA runtime and driver.
DeviceKey cuda_device_key(const DeviceInfo& device, const ConfigSpaceRegistry& registry);

// Worker threads of the CPU backend when RunOptions::num_threads is 0.
int32_t cpu_worker_threads();
// "model name" of /proc/cpuinfo, or "unknown cpu".
std::string cpu_model_name();

}  // namespace attnkit::tune
