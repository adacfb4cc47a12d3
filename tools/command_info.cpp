// `attnkit info`: what this build contains and what it sees: version, C ABI version, backends,
// CUDA architectures, CUDA runtime/driver, GPUs (name, compute capability, SMs, memory) and the
// CPU threads the CPU backend uses; as text or, with --json, one document (fields in kJsonFields).
#include <cstdio>
#include <memory>
#include <string>

#include "attnkit/attnkit.h"
#include "attnkit/build_info.hpp"
#include "cli_json.hpp"
#include "commands.hpp"

namespace attnkit::cli {
namespace {

const char* const kJsonFields = R"(JSON output (--json): one document on stdout:
  version, abi_version, backends {cpu, cuda} (true when built in), cuda_archs (list),
  cuda_runtime, cuda_driver (null when none), cuda_devices: [{index, name, compute_capability
  (major*10 + minor), multiprocessors, memory_bytes}], cpu_threads)";

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (std::size_t i = 0; i < items.size(); ++i) {
    text += (i ? ", " : "") + items[i];
  }
  return text.empty() ? "none" : text;
}

std::string or_none(const std::string& text) { return text.empty() ? "none" : text; }

Json string_or_null(const std::string& text) { return text.empty() ? Json(nullptr) : Json(text); }

void print_text(const BuildInfo& info, const std::vector<DeviceInfo>& devices) {
  std::printf("attnkit %s\n", info.version.c_str());
  std::printf("C ABI version: %d\n", ATTNKIT_ABI_VERSION);
  std::printf("backends: cpu yes, cuda %s\n", info.cuda_compiled ? "yes" : "no (built without CUDA)");
  std::printf("CUDA archs compiled: %s\n", joined(info.cuda_archs).c_str());
  std::printf("CUDA runtime: %s, driver: %s\n", or_none(info.cuda_runtime_version).c_str(),
              or_none(info.cuda_driver_version).c_str());
  std::printf("CUDA devices: %zu\n", devices.size());
  for (const DeviceInfo& d : devices) {
    std::printf("  cuda:%d  %s  compute capability %d.%d  %d SMs  %.1f GiB\n", d.index, d.name.c_str(),
                d.compute_capability / 10, d.compute_capability % 10, d.multiprocessors,
                static_cast<double>(d.memory_bytes) / (1024.0 * 1024.0 * 1024.0));
  }
  std::printf("CPU threads: %d\n", info.cpu_threads);
}

Json document(const BuildInfo& info, const std::vector<DeviceInfo>& devices) {
  Json list = Json::array();
  for (const DeviceInfo& d : devices) {
    list.push_back(Json{{"index", d.index},
                        {"name", d.name},
                        {"compute_capability", d.compute_capability},
                        {"multiprocessors", d.multiprocessors},
                        {"memory_bytes", d.memory_bytes}});
  }
  return Json{{"version", info.version},
              {"abi_version", ATTNKIT_ABI_VERSION},
              {"backends", Json{{"cpu", true}, {"cuda", info.cuda_compiled}}},
              {"cuda_archs", info.cuda_archs},
              {"cuda_runtime", string_or_null(info.cuda_runtime_version)},
              {"cuda_driver", string_or_null(info.cuda_driver_version)},
              {"cuda_devices", list},
              {"cpu_threads", info.cpu_threads}};
}

}  // namespace

Command add_info_command(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("info", "Show version, compiled backends, CUDA archs and devices");
  auto json = std::make_shared<bool>(false);
  app->add_flag("--json", *json, "Print one JSON document on stdout instead of text (fields below)");
  app->footer(kJsonFields);
  return Command{app, [json] {
                   const BuildInfo info = build_info();
                   const auto devices = cuda_devices();
                   if (*json) {
                     print_json(document(info, devices));
                   } else {
                     print_text(info, devices);
                   }
                   return 0;
                 }};
}

}  // namespace attnkit::cli
