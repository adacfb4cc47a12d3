// `attnkit info`: what this build contains and what it sees: version, C ABI version, backends,
// CUDA architectures, CUDA runtime/driver, GPUs (name, compute capability, SMs, memory) and the
// CPU threads the CPU backend uses.
#include <cstdio>
#include <string>

#include "attnkit/attnkit.h"
#include "attnkit/build_info.hpp"
#include "commands.hpp"

namespace attnkit::cli {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (std::size_t i = 0; i < items.size(); ++i) {
    text += (i ? ", " : "") + items[i];
  }
  return text.empty() ? "none" : text;
}

std::string or_none(const std::string& text) { return text.empty() ? "none" : text; }

int print_info() {
  const BuildInfo info = build_info();
  std::printf("attnkit %s\n", info.version.c_str());
  std::printf("C ABI version: %d\n", ATTNKIT_ABI_VERSION);
  std::printf("backends: cpu yes, cuda %s\n", info.cuda_compiled ? "yes" : "no (built without CUDA)");
  std::printf("CUDA archs compiled: %s\n", joined(info.cuda_archs).c_str());
  std::printf("CUDA runtime: %s, driver: %s\n", or_none(info.cuda_runtime_version).c_str(),
              or_none(info.cuda_driver_version).c_str());
  const auto devices = cuda_devices();
  std::printf("CUDA devices: %zu\n", devices.size());
  for (const DeviceInfo& d : devices) {
    std::printf("  cuda:%d  %s  compute capability %d.%d  %d SMs  %.1f GiB\n", d.index, d.name.c_str(),
                d.compute_capability / 10, d.compute_capability % 10, d.multiprocessors,
                static_cast<double>(d.memory_bytes) / (1024.0 * 1024.0 * 1024.0));
  }
  std::printf("CPU threads: %d\n", info.cpu_threads);
  return 0;
}

}  // namespace

Command add_info_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("info", "Show version, compiled backends, CUDA archs and devices");
  return Command{app, print_info};
}

}  // namespace attnkit::cli
