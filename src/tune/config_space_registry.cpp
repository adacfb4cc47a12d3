#include "tune/config_space_registry.hpp"

#include <algorithm>
#include <set>

#include "attnkit/error.hpp"
#include "tune/backend_config_spaces.hpp"
#include "tune/stable_hash.hpp"

namespace attnkit::tune {

void ConfigSpaceRegistry::add(ConfigSpace space) {
  const std::string what = "config space " + std::string(op_name(space.op)) + "/" + backend_name(space.backend);
  if (find(space.op, space.backend) != nullptr) {
    throw Error(Status::invalid_argument, what + ": registered twice; allowed: one space per (op, backend)");
  }
  if (space.configs.empty()) throw Error(Status::invalid_argument, what + ": has no configs; allowed: at least one");
  if (!space.estimate) throw Error(Status::invalid_argument, what + ": has no estimate function; it is required");
  std::set<std::string> ids;
  for (const auto& config : space.configs) {
    if (config.id.empty() || !ids.insert(config.id).second) {
      throw Error(Status::invalid_argument, what + ": config id '" + config.id + "' is empty or repeated");
    }
  }
  spaces_.push_back(std::make_unique<ConfigSpace>(std::move(space)));
}

const ConfigSpace* ConfigSpaceRegistry::find(TuneOp op, Backend backend) const {
  for (const auto& space : spaces_) {
    if (space->op == op && space->backend == backend) return space.get();
  }
  return nullptr;
}

std::vector<const ConfigSpace*> ConfigSpaceRegistry::spaces(Backend backend) const {
  std::vector<const ConfigSpace*> result;
  for (const auto& space : spaces_) {
    if (space->backend == backend) result.push_back(space.get());
  }
  std::sort(result.begin(), result.end(), [](const ConfigSpace* a, const ConfigSpace* b) { return a->op < b->op; });
  return result;
}

std::string ConfigSpaceRegistry::kernel_set_hash(Backend backend) const {
  uint64_t h = stable_hash(backend_name(backend));
  for (const ConfigSpace* space : spaces(backend)) {
    h = stable_hash(op_name(space->op), h);
    h = stable_hash(space->description, h);
    for (const auto& config : space->configs) {
      std::string line = config.id;
      for (const auto& [name, value] : config.params) line += ";" + name + "=" + std::to_string(value);
      line += ";smem=" + std::to_string(config.resources.smem_bytes) +
              ";regs=" + std::to_string(config.resources.registers_per_thread) +
              ";threads=" + std::to_string(config.resources.threads) + "\n";
      h = stable_hash(line, h);
    }
  }
  return hash_hex(h);
}

const ConfigSpaceRegistry& builtin_config_spaces() {
  static const ConfigSpaceRegistry registry = [] {
    ConfigSpaceRegistry r;
    register_cpu_config_spaces(r);
    register_cuda_config_spaces(r);
    return r;
  }();
  return registry;
}

}  // namespace attnkit::tune
