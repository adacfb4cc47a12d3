#include "cuda/tune/retention_config_space.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/retention/retention_chunk_registry.hpp"
#include "tune/roofline.hpp"

namespace attnkit::cuda::retention {
namespace {

constexpr const char* kDecodeId = "decode";

// One launch set: per job, the instance and its sequence split (equal sets run the same kernels alike).
struct JobLaunch {
  const ChunkKernel* kernel = nullptr;
  int32_t segments = 1;
  int64_t segment_tokens = 0;
  int64_t key_dim = 0;       // the job's Dk'
  int64_t value_dim = 0;     // the job's Dv'
  int32_t state_splits = 1;  // the state-only launch's parts a segment (the wgmma kernel's)
  friend bool operator==(const JobLaunch&, const JobLaunch&) = default;
};

struct Resolution {
  std::vector<JobLaunch> jobs;  // empty: the config cannot run the problem (see why)
  std::string why;
};

bool is_backward_space(const tune::ProblemSpec& spec) { return spec.op == tune::TuneOp::retention_backward; }

int64_t batch_heads_of(const tune::ProblemSpec& spec) { return spec.batch * spec.heads_q; }

JobLaunch chunk_launch(const tune::ProblemSpec& spec, int64_t key_dim, int64_t value_dim, int multiprocessors,
                       const ChunkShapeChoice& choice, int64_t sharing_jobs = 1) {
  const JobShape shape = chunk_job_shape(spec.dtype, key_dim, value_dim, batch_heads_of(spec), spec.tokens[0],
                                         multiprocessors, choice, sharing_jobs);
  return {shape.kernel, shape.segments, shape.segment_tokens, key_dim, value_dim, shape.state_splits};
}

// The launches `choice` makes on `spec` on the limits' device (retention_jobs.hpp's select_forward / select_backward
// with the choice on_device, as numbers; the limits carry no DRAM rate of the device, so the segment rule counts chain
// steps here, where the plans and the tuning runner weigh a D64 job's bytes too).
Resolution resolve(const ChunkShapeChoice& asked, bool decode_config, const tune::ProblemSpec& spec,
                   const tune::DeviceLimits& limits) {
  const ChunkShapeChoice choice = on_device(asked, limits.compute_capability);
  Resolution r;
  if (spec.dtype != DType::f16 && spec.dtype != DType::bf16) {
    r.why = "the CUDA retention kernels run float16 and bfloat16";
    return r;
  }
  const int multiprocessors = std::max(limits.processors, 1);
  const int64_t dk = spec.head_dim, dv = spec.head_dim_v, tokens = spec.tokens[0];
  if (!is_backward_space(spec)) {
    if (const ChunkKernel* decode = decode_kernel_for(spec.dtype, batch_heads_of(spec), tokens, dk, dv, choice)) {
      r.jobs.push_back({decode, 1, tokens, dk, dv, 1});
      return r;
    }
    if (decode_config) {
      r.why = "the decode kernel runs forwards of at most " + std::to_string(kDecodeMaxTokens) +
              " tokens with Dv a multiple of 64 and Dk " + chunk_head_dims_text();
      return r;
    }
    r.jobs.push_back(chunk_launch(spec, dk, dv, multiprocessors, choice));
  } else {
    // dQ and dK carry the state transposed (Dk' = Dv, Dv' = Dk); dV is the forward's shape. An empty sequence keeps
    // its jobs apart (select_backward).
    ChunkShapeChoice used = choice;
    if (tokens == 0) used.joint_backward = false;
    const BackwardSharing sharing = backward_sharing(used, dk, dv);
    const JobLaunch dq = chunk_launch(spec, dv, dk, multiprocessors, used, sharing.dq);
    r.jobs = {dq, dq, chunk_launch(spec, dk, dv, multiprocessors, used, sharing.dv)};
  }
  // The plans' swap to the Hopper wgmma kernel (retention_plan.cpp), on the limits' device.
  for (JobLaunch& launch : r.jobs) {
    if (!choice.wgmma || launch.kernel == nullptr) continue;
    const ChunkKernel* wgmma =
        wgmma_chunk_kernel_for(launch.kernel, wgmma_wide_dv(choice, launch.value_dim), limits.compute_capability);
    if (wgmma != nullptr) launch.kernel = wgmma;
  }
  // Parts of a segment in the state-only launch: the wgmma kernel's alone (retention_jobs.cpp, make_job).
  for (JobLaunch& launch : r.jobs) {
    if (launch.kernel != nullptr && !is_wgmma_chunk_kernel(*launch.kernel)) launch.state_splits = 1;
  }
  for (const JobLaunch& job : r.jobs) {
    if (job.kernel == nullptr) {
      r.jobs.clear();
      r.why = "no chunkwise instance for Dk' = " + std::to_string(job.key_dim) +
              ", Dv' = " + std::to_string(job.value_dim) + " (compiled head dims: " + chunk_head_dims_text() +
              "; value dims: multiples of 32)";
      return r;
    }
  }
  return r;
}

ChunkShapeChoice choice_of(const tune::Config& config) {
  ChunkShapeChoice choice;
  choice.value_block = static_cast<int>(config.param("value_block"));
  choice.segments = config.param("segments");
  choice.decode = config.param("decode") != 0;
  choice.wgmma = config.param("wgmma") != 0;
  return choice;
}

Resolution resolve(const tune::Config& config, const tune::ProblemSpec& spec, const tune::DeviceLimits& limits) {
  return resolve(choice_of(config), config.param("decode") != 0, spec, limits);
}

// The configs of one space, in the order the default and the duplicate rule read them (see the header).
std::vector<tune::Config> make_configs(bool forward) {
  std::vector<tune::Config> configs;
  auto add_config = [&](std::string id, int block, int64_t segments, int decode, int wgmma) {
    tune::Config config;
    config.id = std::move(id);
    config.params = {{"value_block", block}, {"segments", segments}, {"decode", decode}, {"wgmma", wgmma}};
    configs.push_back(std::move(config));
  };
  if (forward) add_config(kDecodeId, 0, 0, 1, 0);
  // (prefix, value block, wgmma): the mma.sync kernel's blocks, then the wgmma kernel's: CTAs of 128 value
  // columns where Dk 128 and Dv allow ("wide": no forced block), and each block of the mma.sync kernel.
  std::vector<std::tuple<std::string, int, int>> shapes;
  std::set<std::pair<int, std::string>> blocks;  // (value block, family), ascending blocks
  for (const ChunkKernel* kernel : chunk_kernels()) blocks.emplace(kernel->value_block, kernel->family);
  for (const auto& [block, family] : blocks) shapes.emplace_back(family + "_block" + std::to_string(block), block, 0);
  shapes.emplace_back("wgmma_wide", 0, 1);
  for (const auto& [block, family] : blocks) shapes.emplace_back("wgmma_block" + std::to_string(block), block, 1);
  for (const auto& [prefix, block, wgmma] : shapes) add_config(prefix + "_segfill", block, 0, 0, wgmma);
  for (const auto& [prefix, block, wgmma] : shapes) {
    for (const int64_t segments : kRetentionSegmentCounts) {
      add_config(prefix + "_seg" + std::to_string(segments), block, segments, 0, wgmma);
    }
  }
  return configs;
}

// Index in `configs` of the default: the first config whose launches are the rule's; -1 when none is.
int default_index(const std::vector<tune::Config>& configs, const tune::ProblemSpec& spec,
                  const tune::DeviceLimits& limits) {
  const Resolution rule = resolve(ChunkShapeChoice{}, false, spec, limits);
  if (rule.jobs.empty()) return -1;
  for (size_t i = 0; i < configs.size(); ++i) {
    if (resolve(configs[i], spec, limits).jobs == rule.jobs) return static_cast<int>(i);
  }
  return -1;
}

std::string resource_reason(const Resolution& r, const tune::DeviceLimits& limits) {
  for (const JobLaunch& job : r.jobs) {
    const tune::ResourceNeeds needs{job.kernel->shared_bytes, 0, job.kernel->threads};
    if (std::string why = tune::resource_violation(needs, limits); !why.empty()) return why;
  }
  return "";
}

std::string invalid_reason(const std::vector<tune::Config>& configs, const tune::Config& config,
                           const tune::ProblemSpec& spec, const tune::DeviceLimits& limits) {
  const Resolution mine = resolve(config, spec, limits);
  if (mine.jobs.empty()) return mine.why;
  if (std::string why = resource_reason(mine, limits); !why.empty()) return why;
  const int fallback = default_index(configs, spec, limits);
  const auto index = static_cast<int>(&config - configs.data());
  if (index == fallback) return "";
  if (fallback >= 0 && resolve(configs[static_cast<size_t>(fallback)], spec, limits).jobs == mine.jobs) {
    return "the same launches as the default, " + configs[static_cast<size_t>(fallback)].id;
  }
  for (int i = 0; i < index; ++i) {
    if (i != fallback && resolve(configs[static_cast<size_t>(i)], spec, limits).jobs == mine.jobs) {
      return "the same launches as " + configs[static_cast<size_t>(i)].id;
    }
  }
  return "";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void add(tune::CostEstimate& total, const tune::CostEstimate& part) {
  total.seconds += part.seconds;
  total.flops += part.flops;
  total.bytes += part.bytes;
  total.tiles += part.tiles;
  total.waves += part.waves;
}

// The launches of one job (see the header for what is counted).
tune::CostEstimate job_estimate(const JobLaunch& job, const tune::ProblemSpec& spec, const tune::DeviceLimits& limits) {
  const ChunkKernel& kernel = *job.kernel;
  const double element = static_cast<double>(dtype_size(spec.dtype));
  const double dk = static_cast<double>(job.key_dim);
  const double block = kernel.value_block;
  const double chunk = static_cast<double>(kRetentionChunk);
  const int32_t occupancy =
      tune::blocks_per_processor(tune::ResourceNeeds{kernel.shared_bytes, 0, kernel.threads}, limits);
  const int64_t slices = std::max<int64_t>(job.value_dim / kernel.value_block, 1);
  tune::TileWork main;
  main.tiles = batch_heads_of(spec) * slices * job.segments;
  if (std::string(kernel.family) == "decode") {
    // One token at a time against the state, on CUDA cores: the state read and written once.
    const double tokens = static_cast<double>(job.segment_tokens);
    main.flops_per_tile = tokens * 4.0 * dk * block;
    main.bytes_per_tile = tokens * element * (2.0 * dk + 2.0 * block) + 2.0 * dk * block * 4.0;
    return tune::roofline_estimate(main, limits.processors, occupancy, limits);
  }
  const auto chunks = static_cast<double>(ceil_div(job.segment_tokens, kRetentionChunk));
  const double state_bytes = dk * block * 4.0;
  const double chunk_flops = 2.0 * chunk * chunk * dk + 2.0 * chunk * chunk * block + 4.0 * chunk * dk * block;
  main.flops_per_tile = chunks * chunk_flops;
  // Segment s combines the s states before it; they are the same few for every CTA of a sequence, so
  // they come from L2: memory sees them about once per CTA.
  main.bytes_per_tile = chunks * chunk * element * (2.0 * dk + 2.0 * block) + (job.segments > 1 ? state_bytes : 0.0);
  tune::CostEstimate cost = tune::roofline_estimate(main, limits.processors, occupancy, limits);
  if (job.segments > 1) {
    // The state-only launch: state_splits parts a segment, one CTA each.
    const double part_chunks = std::ceil(chunks / job.state_splits);
    tune::TileWork states;
    states.tiles = main.tiles * job.state_splits;
    states.flops_per_tile = part_chunks * 2.0 * chunk * dk * block;
    states.bytes_per_tile = part_chunks * chunk * element * (dk + block) + state_bytes;
    add(cost, tune::roofline_estimate(states, limits.processors, occupancy, limits));
  }
  return cost;
}

tune::ConfigSpace make_space(tune::TuneOp op) {
  const bool forward = op == tune::TuneOp::retention_forward;
  tune::ConfigSpace space;
  space.op = op;
  space.backend = Backend::cuda;
  space.description =
      std::string(forward ? "retention forward" : "retention backward (dQ, dK, dV jobs)") +
      " v5: chunkwise kernel (output and state warps) value blocks and sequence segments (the rule's or a count; the "
      "segments' states in the rule's parts)" +
      ", on the mma.sync or (compute capability 9.0) the wgmma kernel" +
      (forward ? ", recurrent decode kernel for short calls" : "") + "; chunk 64";
  space.configs = make_configs(forward);
  // The validity rule compares a config with the others of its space, which the space holds: the lambdas
  // read them through `configs`, a copy that lives as long as the space's functions.
  const auto configs = std::make_shared<const std::vector<tune::Config>>(space.configs);
  space.invalid_reason = [configs](const tune::Config& config, const tune::ProblemSpec& spec,
                                   const tune::DeviceLimits& limits) {
    // `config` belongs to the registered space, whose configs equal *configs: find it there by id.
    for (const tune::Config& own : *configs) {
      if (own.id == config.id) return invalid_reason(*configs, own, spec, limits);
    }
    return std::string("not a config of this space");
  };
  space.estimate = [](const tune::Config& config, const tune::ProblemSpec& spec, const tune::DeviceLimits& limits) {
    tune::CostEstimate total;
    const Resolution r = resolve(config, spec, limits);
    for (const JobLaunch& job : r.jobs) add(total, job_estimate(job, spec, limits));
    return total;
  };
  space.default_config = [configs](const tune::ProblemSpec& spec, const tune::DeviceLimits& limits) {
    const int index = default_index(*configs, spec, limits);
    return index < 0 ? std::string() : (*configs)[static_cast<size_t>(index)].id;
  };
  return space;
}

}  // namespace

ChunkShapeChoice chunk_shape_of(const tune::Config& config) { return choice_of(config); }

tune::ConfigSpace retention_forward_space() { return make_space(tune::TuneOp::retention_forward); }

tune::ConfigSpace retention_backward_space() { return make_space(tune::TuneOp::retention_backward); }

void register_retention_spaces(tune::ConfigSpaceRegistry& registry) {
  if (chunk_kernels().empty()) return;
  registry.add(retention_forward_space());
  registry.add(retention_backward_space());
}

}  // namespace attnkit::cuda::retention
