#include "cpu/tune/cpu_attention_space.hpp"

#include <algorithm>
#include <string>

#include "tune/attention_tile_work.hpp"
#include "tune/roofline.hpp"

namespace attnkit::tune {
namespace {

constexpr int64_t kKeyBlock = 64;  // keys a worker scores at a time, for the working-set estimate

int64_t working_set_bytes(const Config& config, const ProblemSpec& spec) {
  const int64_t qb = config.param("query_block");
  const int64_t element = static_cast<int64_t>(dtype_size(spec.dtype));
  // fp32 accumulators for the Q block's outputs and scores, plus one streamed K/V block.
  return qb * (spec.head_dim + spec.head_dim_v + kKeyBlock) * 4 +
         kKeyBlock * (spec.head_dim + spec.head_dim_v) * element;
}

int32_t workers(const Config& config, const DeviceLimits& limits) {
  const int64_t threads = config.param("threads");
  return static_cast<int32_t>(threads == 0 ? limits.processors : std::min<int64_t>(threads, limits.processors));
}

}  // namespace

ConfigSpace cpu_attention_space(TuneOp op) {
  ConfigSpace space;
  space.op = op;
  space.backend = Backend::cpu;
  space.description =
      "cpu attention v2: query_block = forward rows per task, backward least rows per slice; threads = worker "
      "threads (0 = all available)";
  for (const int64_t query_block : {16, 32, 64, 128}) {
    for (const int64_t threads : {0, 1, 2, 4, 8, 16, 32, 64}) {
      Config config;
      config.id = std::string("q")
                      .append(std::to_string(query_block))
                      .append(threads == 0 ? "-all" : "-t")
                      .append(threads == 0 ? "" : std::to_string(threads));
      config.params = {{"query_block", query_block}, {"threads", threads}};
      config.resources.threads = static_cast<int32_t>(threads);
      space.configs.push_back(std::move(config));
    }
  }
  space.invalid_reason = [](const Config& config, const ProblemSpec& spec, const DeviceLimits& limits) -> std::string {
    if (config.param("threads") == limits.processors) {
      return "same as threads=all on this CPU (" + std::to_string(limits.processors) + " threads)";
    }
    const int64_t bytes = working_set_bytes(config, spec);
    if (limits.max_smem_per_block > 0 && bytes > limits.max_smem_per_block) {
      return "working set " + std::to_string(bytes) + " bytes > L2 " + std::to_string(limits.max_smem_per_block);
    }
    return "";
  };
  space.estimate = [](const Config& config, const ProblemSpec& spec, const DeviceLimits& limits) {
    const TileWork work = attention_tile_work(spec, config.param("query_block"), kKeyBlock);
    return roofline_estimate(work, workers(config, limits), 1, limits);
  };
  const int64_t default_block =
      op == TuneOp::attention_backward ? cpu::kDefaultBackwardQueryBlock : cpu::kDefaultForwardQueryBlock;
  space.default_config = [default_block](const ProblemSpec&, const DeviceLimits&) {
    return std::string("q").append(std::to_string(default_block)).append("-all");
  };
  return space;
}

cpu::CpuAttentionConfig cpu_attention_config(const Config& config) {
  cpu::CpuAttentionConfig result;
  result.query_block = config.param("query_block");
  result.threads = static_cast<int32_t>(config.param("threads"));
  return result;
}

void register_cpu_attention_spaces(ConfigSpaceRegistry& registry) {
  registry.add(cpu_attention_space(TuneOp::attention_forward));
  registry.add(cpu_attention_space(TuneOp::attention_backward));
}

}  // namespace attnkit::tune
