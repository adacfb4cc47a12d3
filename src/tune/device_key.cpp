#include "tune/device_key.hpp"

#include <fstream>
#include <sstream>

#include "attnkit/version.hpp"
#include "tune/config_space_registry.hpp"
#include "tune/stable_hash.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace attnkit::tune {

std::string canonical_device_text(const DeviceKey& key) {
  std::ostringstream out;
  out << "backend=" << backend_name(key.backend) << " name=" << key.name << " processors=" << key.processors
      << " cc=" << key.compute_capability << " cuda_runtime=" << key.cuda_runtime << " cuda_driver=" << key.cuda_driver
      << " library_version=" << key.library_version << " kernel_set_hash=" << key.kernel_set_hash;
  return out.str();
}

std::string device_key_hash(const DeviceKey& key) { return hash_hex(stable_hash(canonical_device_text(key))); }

std::string describe_key_difference(const DeviceKey& found, const DeviceKey& expected) {
  std::string text;
  auto field = [&](const char* name, const std::string& a, const std::string& b) {
    if (a == b) return;
    if (!text.empty()) text += "; ";
    text += std::string(name) + " '" + a + "' (this build: '" + b + "')";
  };
  field("backend", backend_name(found.backend), backend_name(expected.backend));
  field("name", found.name, expected.name);
  field("processors", std::to_string(found.processors), std::to_string(expected.processors));
  field("compute_capability", std::to_string(found.compute_capability), std::to_string(expected.compute_capability));
  field("cuda_runtime", found.cuda_runtime, expected.cuda_runtime);
  field("cuda_driver", found.cuda_driver, expected.cuda_driver);
  field("library_version", found.library_version, expected.library_version);
  field("kernel_set_hash", found.kernel_set_hash, expected.kernel_set_hash);
  return text;
}

int32_t cpu_worker_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const auto start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "unknown cpu";
}

DeviceKey cpu_device_key(int32_t threads, const ConfigSpaceRegistry& registry) {
  DeviceKey key;
  key.backend = Backend::cpu;
  key.name = cpu_model_name();
  key.processors = threads > 0 ? threads : cpu_worker_threads();
  key.library_version = version_string();
  key.kernel_set_hash = registry.kernel_set_hash(Backend::cpu);
  return key;
}

DeviceKey cuda_device_key(const DeviceInfo& device, const ConfigSpaceRegistry& registry) {
  const BuildInfo build = build_info();
  DeviceKey key;
  key.backend = Backend::cuda;
  key.name = device.name;
  key.processors = device.multiprocessors;
  key.compute_capability = device.compute_capability;
  key.cuda_runtime = build.cuda_runtime_version;
  key.cuda_driver = build.cuda_driver_version;
  key.library_version = version_string();
  key.kernel_set_hash = registry.kernel_set_hash(Backend::cuda);
  return key;
}

}  // namespace attnkit::tune
