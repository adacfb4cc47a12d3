#include "cuda/tune/fmha_config_space.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <unordered_map>

#include "cuda/fmha/fmha_arguments.hpp"
#include "cuda/fmha/fmha_backward_arguments.hpp"
#include "cuda/fmha/fmha_box_shape.hpp"
#include "cuda/fmha_sm90/fmha_sm90_heads_per_cta.hpp"
#include "tune/attention_tile_work.hpp"
#include "tune/roofline.hpp"

namespace attnkit::cuda::fmha {
namespace {

int log2_of(int value) {
  int l = 0;
  while ((1 << l) < value) ++l;
  return l;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Hopper backward vs the portable one, useful FLOPs per second: dense S8k D128 on H100 294 vs 146 TF/s,
// na2d 128^2 K31 121 vs 62 (docs/perf.md, 2026-11-22).
constexpr double kSm90BackwardEfficiency = 2.0;

FmhaPolicyKind policy_of(const tune::Config& config) { return static_cast<FmhaPolicyKind>(config.param("policy")); }

// The device as the registries see it for this problem: a positional bias leaves only the portable tier.
FmhaDevice device_for(const tune::ProblemSpec& spec, const tune::DeviceLimits& limits) {
  FmhaDevice device{limits.compute_capability, static_cast<int>(limits.max_smem_per_block),
                    static_cast<int>(limits.processors)};
  device.portable_only = spec.positional_bias;
  return device;
}

// Why code built for `architecture` cannot run on a device of `capability`, or "" when it can.
std::string architecture_reason(int architecture, int capability) {
  if (fmha_architecture_runs_on(architecture, capability)) return "";
  return std::string(architecture == 90 ? "sm_90a code (compute capability 9.0 only)"
                                        : "SM80 code (compute capability 8.0 or newer)") +
         "; the device has compute capability " + std::to_string(capability / 10) + "." +
         std::to_string(capability % 10);
}

std::string invalid_reason(const tune::Config& config, const tune::ProblemSpec& spec,
                           const tune::DeviceLimits& limits) {
  const FmhaKernel* kernel = forward_kernel_of(config);
  if (kernel != nullptr) {
    if (std::string reason = architecture_reason(kernel->config.architecture, limits.compute_capability);
        !reason.empty()) {
      return reason;
    }
    if (spec.positional_bias && kernel->config.architecture == 90) {
      return std::string("the Hopper tier adds no relative positional bias (rpb); the portable tier does");
    }
  }
  const auto dtype = static_cast<DType>(config.param("dtype"));
  if (dtype != spec.dtype) return "built for " + std::string(dtype_name(dtype));
  const FmhaDevice device = device_for(spec, limits);
  const int width =
      fmha_width_on_device(spec.dtype, spec.head_dim, spec.head_dim_v, fmha_policy_for(spec.mask), device);
  if (config.param("head_dim") != width) {
    return "compiled for head dim " + std::to_string(config.param("head_dim")) +
           "; max(D, Dv) = " + std::to_string(std::max(spec.head_dim, spec.head_dim_v)) + " runs on width " +
           std::to_string(width);
  }
  const FmhaPolicyKind wanted = fmha_policy_for(spec.mask);
  if (policy_of(config) != wanted) {
    return std::string("policy ") + fmha_policy_name(policy_of(config)) + "; mask " +
           std::string(tune::mask_name(spec.mask)) + " runs on policy " + fmha_policy_name(wanted);
  }
  if (spec.mask == MaskKind::neighborhood && kernel != nullptr &&
      !fmha_config_serves_neighborhood(kernel->config, spec.token_dims)) {
    return "query tiles of " + std::to_string(kernel->config.block_m) + " rows: a neighborhood over " +
           std::to_string(spec.token_dims) + " dimensions needs tiles of a power of two rows";
  }
  return "";
}

// Whether `k` can stand in for `fallback`: the same dtype, compiled width and mask policy, and it fits the device.
bool runs_the_same_calls(const FmhaKernel& k, const FmhaKernel& fallback, const FmhaDevice& device) {
  return k.config.dtype == fallback.config.dtype && k.config.head_dim == fallback.config.head_dim &&
         k.config.policy == fallback.config.policy && fmha_config_fits(k.config, device);
}

// Whether `two_ctas` visits `spec` with the query boxes `fallback` gets (its smaller KV tiles halving only the KV
// boxes).
bool keeps_the_query_boxes(const tune::ProblemSpec& spec, const FmhaConfig& fallback, const FmhaConfig& two_ctas) {
  const BoxGeometry geometry = neighborhood_geometry(spec.token_dims, spec.neighborhood, spec.tokens);
  auto query_boxes = [&](const FmhaConfig& config) {
    return choose_box_shapes(geometry, log2_of(config.block_m), log2_of(config.block_n), false, KvTileOrigin::window)
        .q_log2;
  };
  return query_boxes(two_ctas) == query_boxes(fallback);
}

// Small windows leave a Hopper CTA latency-bound (its masked softmax and epilogue, not its products; docs/perf.md):
// the kernels built for two CTAs per SM overlap one CTA's softmax and epilogue with the other's products. Measured
// against the one-CTA 128-key kernel: at D 32 faster on every 2-D NAT/DiNAT stage (H100, 12-41 %) and on 3-D windows
// (H200, 5-20 %) but one, whose 64-key boxes change its query box (8x32x32 K3x7x7: Q 2x8x8 against 8x2x8, 12 %
// slower); at D 64 faster on 1-D and 2-D windows (H200, up to 38 %, one of 17 shapes 2 % slower) and slower on every
// 3-D window tried (4-18 %).
bool prefers_two_ctas_per_sm(const tune::ProblemSpec& spec, const FmhaConfig& fallback, const FmhaConfig& two_ctas) {
  if (spec.token_dims <= 2) return fallback.head_dim == 32 || fallback.head_dim == 64;
  return fallback.head_dim == 32 && keeps_the_query_boxes(spec, fallback, two_ctas);
}

// The keys of a neighborhood window: the product of its kernel sizes.
int64_t window_keys(const tune::ProblemSpec& spec) {
  int64_t keys = 1;
  for (int d = 0; d < spec.token_dims; ++d) keys *= spec.neighborhood[static_cast<size_t>(d)].kernel_size;
  return keys;
}

// The Hopper kernels of 64 query rows (one consumer warpgroup; four CTAs per SM up to D 64, two at D 128) halve the
// query boxes: on small windows they visit 17-35 % fewer (query, key) pairs than the 128-row kernels, and the other
// resident CTAs hide one CTA's setup, softmax and epilogue behind their products. Their 64-key tiles read K and V
// twice as often per product as a 128-row tile, which large windows pay for. Measured against the defaults before
// them (H200, bf16):
// - D 32 and 64, 36 windows of 1-3 dimensions: of the 34 up to 2048 keys, 30 faster (up to 46 %; 2-D K3-K31, dilated,
//   3-D K3x3x3-K7x15x15, 1-D K64-K1024), one level, one 7 % slower (64² K7 dilation 4); of the two of 4096 keys
//   (1-D), the causal one 2 % faster, the non-causal one 6 % slower. (Two more, 20² K3 and K5, ran 7-10 % slower
//   until heads per CTA counted a partial wave of four CTAs per SM by its fraction: now 25 % and 8 % faster.)
// - D 128 (against the one-CTA 128 x 128 kernel): with one head per CTA faster up to 169 keys (32² and 56² K7 11 and
//   18 %, 64² K13 5 %, 16³ K3 10 %, and 28² K7 dilation 4 64 % against the portable tile the visited-work model had
//   picked), level at 147 (8x32² K3x7x7) and 256 (1-D causal); since it runs several heads per CTA (7-34 % faster on
//   those windows) also faster at 289 keys (64² K17, 9 %) and 384 (1-D causal, 5 %), level at 361 (32² K19), and
//   slower from 441 keys (96² K21 6 %, 1-D K512 2 %, 56² K25 dilation 2 16 %, 16x64² K7x15x15 23 %, 128² K31 13 %).
inline constexpr int64_t kD128WindowKeysOf64Rows = 384;

bool prefers_query_tiles_of_64_rows(const tune::ProblemSpec& spec, int head_dim) {
  return window_keys(spec) <= (head_dim <= 64 ? 2048 : kD128WindowKeysOf64Rows);
}

bool is_hopper_kernel_of_rows(const FmhaConfig& config, int rows) {
  return config.architecture == 90 && config.block_m == rows;
}

// The Hopper kernel of `rows` query rows (64, 128, 192), built for `ctas_per_sm` CTAs per SM when that is not 0, that
// can stand in for `fallback`, or nullptr.
const FmhaKernel* hopper_kernel_of_rows(int rows, const FmhaKernel& fallback, const FmhaDevice& device,
                                        int ctas_per_sm = 0) {
  for (const auto& k : fmha_forward_kernels()) {
    if (is_hopper_kernel_of_rows(k.config, rows) && (ctas_per_sm == 0 || k.config.ctas_per_sm == ctas_per_sm) &&
        runs_the_same_calls(k, fallback, device)) {
      return &k;
    }
  }
  return nullptr;
}

// The Hopper default up to D 64 for windows the 64-row kernels leave: the two-CTA kernel where
// prefers_two_ctas_per_sm says so, else `fallback`.
const FmhaKernel* hopper_two_cta_default(const FmhaKernel& fallback, const tune::ProblemSpec& spec,
                                         const FmhaDevice& device) {
  const FmhaKernel* two_ctas = hopper_kernel_of_rows(128, fallback, device, 2);
  return two_ctas != nullptr && prefers_two_ctas_per_sm(spec, fallback.config, two_ctas->config) ? two_ctas : &fallback;
}

// The Hopper kernels of 192 query rows (three consumer warpgroups taking turns, up to D 64; dense, causal, 1-D windows)
// run a visited (query tile, KV tile) pair's rows at 0.78-0.89 of the 128-row kernel's cost per row (H200, bf16,
// D 64, forward, two rounds: dense S 512 / 1024 / 2048 at 0.87 / 0.83 / 0.89, causal 0.78 / 0.80 / 0.84; docs/perf.md):
// with three warpgroups each one's softmax hides behind two others' products instead of one. Their tiles pad the
// sequence and the causal diagonal more, which the visited work counts.
inline constexpr double kThreeConsumerGroupsRowCost = 0.85;

}  // namespace

tune::TileWork fmha_forward_tile_work(const FmhaConfig& config, const tune::ProblemSpec& spec) {
  // Flat query tiles: dense and causal masks, and 1-D windows on tiles whose rows are not a power of two.
  if (spec.mask != MaskKind::neighborhood || !fmha_query_tiles_are_power_of_two(config)) {
    return tune::attention_tile_work(spec, config.block_m, config.block_n);
  }
  const BoxGeometry geometry = neighborhood_geometry(spec.token_dims, spec.neighborhood, spec.tokens);
  // The forward kernels start KV tiles at the window's first key (BoxPolicy): the launch's shapes and visits.
  const BoxShapes shapes =
      choose_box_shapes(geometry, log2_of(config.block_m), log2_of(config.block_n), false, KvTileOrigin::window);
  const BoxVisitCounts visits = count_box_visits(geometry, shapes, KvTileOrigin::window);
  int64_t q_tiles = 1;
  for (int d = 0; d < spec.token_dims; ++d) {
    const int64_t group = ceil_div(spec.tokens[static_cast<size_t>(d)], geometry.dilation[static_cast<size_t>(d)]);
    q_tiles *= geometry.dilation[static_cast<size_t>(d)] *
               ceil_div(group, int64_t{1} << shapes.q_log2[static_cast<size_t>(d)]);
  }
  // Same per-tile accounting as attention_tile_work, with the box visits instead of flat ones.
  const double element = static_cast<double>(dtype_size(spec.dtype));
  const double d = static_cast<double>(spec.head_dim);
  const double dv = static_cast<double>(spec.head_dim_v);
  const double bm = config.block_m;
  const double bn = config.block_n;
  const double avg_visited = std::max(visits.visited / static_cast<double>(std::max<int64_t>(q_tiles, 1)), 1.0);
  // A partial KV tile pays for element masking on top of its MMA work.
  const double partial = std::max(visits.visited - visits.full, 0.0) / std::max(visits.visited, 1.0);
  tune::TileWork work;
  work.tiles = spec.batch * spec.heads_q * q_tiles;
  work.flops_per_tile = avg_visited * bm * bn * 2.0 * (d + dv) * (1.0 + 0.1 * partial);
  work.bytes_per_tile = (bm * d + avg_visited * bn * (d + dv) + bm * dv) * element + bm * 4.0;
  return work;
}

tune::ConfigSpace fmha_forward_space() {
  tune::ConfigSpace space;
  space.op = tune::TuneOp::attention_forward;
  space.backend = Backend::cuda;
  space.description =
      "fmha forward v3: block_m x block_n tiles (boxes for neighborhood masks, KV tiles at window origins), warps, "
      "stages, architecture (80: portable mma.sync tier, 90: sm_90a wgmma/TMA tier); policy box (dense, causal, "
      "neighborhood) or list (block, element masks)";
  std::set<std::string> seen;
  for (const auto& kernel : fmha_forward_kernels()) {
    const FmhaConfig& c = kernel.config;
    tune::Config config;
    config.id = fmha_config_name(c);
    if (!seen.insert(config.id).second) continue;  // an instantiation listed twice adds nothing
    config.params = {{"dtype", static_cast<int64_t>(c.dtype)},
                     {"head_dim", c.head_dim},
                     {"block_m", c.block_m},
                     {"block_n", c.block_n},
                     {"warps", c.warps},
                     {"stages", c.stages},
                     {"policy", static_cast<int64_t>(c.policy)}};
    config.resources.smem_bytes = c.smem_bytes;
    config.resources.registers_per_thread = c.registers_estimate;
    config.resources.threads = c.warps * 32;
    config.entry = &kernel;
    space.configs.push_back(std::move(config));
  }
  space.invalid_reason = [](const tune::Config& config, const tune::ProblemSpec& spec,
                            const tune::DeviceLimits& limits) { return invalid_reason(config, spec, limits); };
  space.estimate = [](const tune::Config& config, const tune::ProblemSpec& spec, const tune::DeviceLimits& limits) {
    const tune::TileWork work = fmha_forward_tile_work(forward_kernel_of(config)->config, spec);
    return tune::roofline_estimate(work, limits.processors, tune::blocks_per_processor(config.resources, limits),
                                   limits);
  };
  space.default_config = [](const tune::ProblemSpec& spec, const tune::DeviceLimits& limits) {
    const FmhaDevice device = device_for(spec, limits);
    const FmhaKernel* kernel = fmha_forward_default_for(spec, device);
    return kernel == nullptr ? std::string() : fmha_config_name(kernel->config);
  };
  return space;
}

double fmha_forward_tile_efficiency(const FmhaConfig& config) {
  // Relative MMA throughput per useful FLOP: 16 query rows per warp read each K/V operand from shared
  // memory twice as often per FLOP as 32 rows (dense S16k D128 on H100: 255.8 vs 313.5 TF/s, docs/perf.md).
  // The Hopper tier (wgmma, TMA, warp-specialised, 128 x 128 tiles) on the same scale: dense S16k D128 on
  // H100 527 vs 313.5 TF/s (docs/perf.md, 2026-11-22).
  if (config.architecture == 90) return 1.68;
  return config.block_m / config.warps >= 32 ? 1.0 : 0.82;
}

namespace {

// Visited work: padded (query tile, KV tile) pairs times their products' FLOPs.
double visited_work(const FmhaConfig& config, const tune::ProblemSpec& spec) {
  const tune::TileWork work = fmha_forward_tile_work(config, spec);
  return static_cast<double>(work.tiles) * work.flops_per_tile;
}

// Causal masks of at most kCausalKeysOf64Rows keys up to D 64 run on the Hopper kernel of 64 query rows (four CTAs
// per SM): their short, uneven KV loops (query tile t visits t + 1 tiles) leave each CTA's setup, first loads and
// epilogue a large share, which the other resident CTAs hide. Measured against the rule before (H200, bf16, D 64,
// forward, ms; docs/perf.md, session 54): S 512 B32 H16 0.101 against 0.117, S 768 B16 0.099 against 0.107, S 1024
// B16 0.148 against 0.169 and B4 0.053 against 0.060, S 2048 B8 0.250 against 0.250, S 2500 B4 H32 0.361 against
// 0.364; beyond, the 192-row kernel keeps them (S 4096 0.786 against 0.855, S 8192 0.704 against 0.857). At D 128 the
// 64-row kernel ran 15-23 % slower on causal S 512-2048: the larger kernels keep those.
inline constexpr int64_t kCausalKeysOf64Rows = 2048;

bool causal_prefers_query_tiles_of_64_rows(const tune::ProblemSpec& spec) {
  return spec.mask == MaskKind::causal && spec.head_dim <= 64 && spec.head_dim_v <= 64 &&
         spec.seq_k() <= kCausalKeysOf64Rows;
}

// Dense D 64 also weighs the Hopper kernel of two CTAs per SM (128 query rows, 64-key tiles): the second resident CTA
// hides one CTA's setup, first loads and epilogue, a share of the time that shrinks as a head's KV loop grows. Measured
// against the one-CTA 128-row kernel (H200, bf16, forward; docs/perf.md, session 54), time ratios at S 256 / 512 / 640
// / 1024 / 2048: 0.88 / 0.92 / 0.93 / 0.95 / 0.98; modelled as 1 - kTwoCtasFixedShare x min(1, 8 / KV tiles of 64).
inline constexpr double kTwoCtasFixedShare = 0.08;

double two_ctas_row_cost(const tune::ProblemSpec& spec) {
  const double kv_tiles = std::max(1.0, std::ceil(static_cast<double>(spec.seq_k()) / 64.0));
  return 1.0 - kTwoCtasFixedShare * std::min(1.0, 8.0 / kv_tiles);
}

// Dense and causal masks: short causal ones on the kernel of 64 query rows (above); else the least of the default
// kernel's visited work, the 192-row kernel's at its lower cost per row and, for dense D 64, the two-CTA kernel's at
// its own; the default whenever ATTNKIT_FMHA_CONFIG names a kernel.
const FmhaKernel* flat_default(const FmhaKernel& fallback, const tune::ProblemSpec& spec, const FmhaDevice& device) {
  if (forced_config_name(kForcedForwardConfigVariable) != nullptr) return &fallback;
  const FmhaKernel* rows_64 = hopper_kernel_of_rows(64, fallback, device);
  if (rows_64 != nullptr && causal_prefers_query_tiles_of_64_rows(spec)) return rows_64;
  const FmhaKernel* best = &fallback;
  double best_cost = visited_work(fallback.config, spec);
  if (const FmhaKernel* rows_192 = hopper_kernel_of_rows(192, fallback, device)) {
    const double cost = visited_work(rows_192->config, spec) * kThreeConsumerGroupsRowCost;
    if (cost < best_cost) best = rows_192, best_cost = cost;
  }
  const FmhaKernel* two_ctas = hopper_kernel_of_rows(128, fallback, device, 2);
  if (two_ctas != nullptr && spec.mask == MaskKind::none && spec.head_dim == 64 && spec.head_dim_v == 64) {
    const double cost = visited_work(two_ctas->config, spec) * two_ctas_row_cost(spec);
    if (cost < best_cost) best = two_ctas, best_cost = cost;
  }
  return best;
}

}  // namespace

const FmhaKernel* fmha_forward_default_for(const tune::ProblemSpec& spec, const FmhaDevice& device) {
  const FmhaKernel* fallback =
      fmha_default_kernel(spec.dtype, spec.head_dim, spec.head_dim_v, fmha_policy_for(spec.mask), device);
  if (fallback == nullptr) return nullptr;
  if (spec.mask == MaskKind::none || spec.mask == MaskKind::causal) return flat_default(*fallback, spec, device);
  if (spec.mask != MaskKind::neighborhood) return fallback;
  if (fallback->config.architecture == 90) {
    const FmhaKernel* rows_64 = hopper_kernel_of_rows(64, *fallback, device);
    if (rows_64 != nullptr && prefers_query_tiles_of_64_rows(spec, fallback->config.head_dim)) return rows_64;
    // 1-D windows beyond them run as banded dense attention on the kernel of 192 query rows where one is compiled
    // (D 64): L8192 K4096 D64 B4 H16 12-15 % faster than on the two-CTA kernel, causal or not, L16384 K2049 7 %
    // (H200; it was 4-60 % slower on windows of 64-1024 keys, where the 64-row kernel runs; docs/perf.md).
    const FmhaKernel* rows_192 = hopper_kernel_of_rows(192, *fallback, device);
    if (rows_192 != nullptr && spec.token_dims == 1 && forced_config_name(kForcedForwardConfigVariable) == nullptr) {
      return rows_192;
    }
    // The Hopper kernels up to head dim 64 run several heads per CTA (TMA path, dilated grids included), which
    // amortises the per-CTA cost the visited-work count below does not see: on an H100 the D 64 kernel beat the
    // portable 128 x 64 tile on every small window measured, 10-35 %, also where that tile visits half the keys
    // (na2d 56² K7 dilation 8: 0.260 vs 0.288 ms; docs/perf.md). They stay the default; the tuner may measure others.
    if (fallback->config.head_dim <= fmha_sm90::kSeveralHeadsMaxHeadDim)
      return hopper_two_cta_default(*fallback, spec, device);
  }
  // Neighborhoods: the tile whose visited work, weighted by its efficiency, is least. Smaller boxes waste
  // less of each visited KV tile on small windows (na2d 64x64 K13: +18 % with 64x64 tiles), larger ones
  // win on large windows and dense-like work. A pure function of the problem, as DESIGN §6.5 asks.
  auto weighted_work = [&](const FmhaConfig& config) {
    const tune::TileWork work = fmha_forward_tile_work(config, spec);
    return static_cast<double>(work.tiles) * work.flops_per_tile / fmha_forward_tile_efficiency(config);
  };
  const FmhaKernel* best = fallback;
  double best_cost = weighted_work(fallback->config);
  for (const auto& k : fmha_forward_kernels()) {
    // The Hopper kernels of 64 query rows run the windows prefers_query_tiles_of_64_rows names, none larger.
    if (&k == fallback || !runs_the_same_calls(k, *fallback, device) || is_hopper_kernel_of_rows(k.config, 64) ||
        !fmha_config_serves_neighborhood(k.config, spec.token_dims)) {
      continue;
    }
    const double cost = weighted_work(k.config);
    if (cost < best_cost) {
      best = &k;
      best_cost = cost;
    }
  }
  return best;
}

const FmhaKernel* fmha_forward_kernel_by_name(const std::string& id) {
  // Every dispatched call looks its kernel up by name: build the names once.
  static const std::unordered_map<std::string, const FmhaKernel*> by_name = [] {
    std::unordered_map<std::string, const FmhaKernel*> map;
    for (const auto& kernel : fmha_forward_kernels()) map.emplace(fmha_config_name(kernel.config), &kernel);
    return map;
  }();
  const auto it = by_name.find(id);
  return it == by_name.end() ? nullptr : it->second;
}

namespace {

// The Hopper dK/dV kernels of 64-key tiles (one MMA warpgroup, two CTAs per SM) visit the (query, key) pairs the
// 128-key kernel's two warpgroups visit by halves, but no warpgroup waits while its partner scores a visit it
// skips, and the other resident CTA hides one CTA's setup, dQ turns and epilogue. Measured against the 128-key
// kernel on neighborhood windows (H200, bf16, D 32 and 64): 27 of 28 faster (up to 38 % on dilated 2-D windows,
// 33 % on 3-D windows, 3-4 % on 1-D windows of 256-4096 keys), one 5 % slower (14² K7 D32, a window of a quarter
// of the image). Dense and causal masks keep the 128-key kernel.
bool prefers_backward_key_tiles_of_64(const tune::ProblemSpec& spec) { return spec.mask == MaskKind::neighborhood; }

}  // namespace

const FmhaBackwardKernel* fmha_backward_default_for(const tune::ProblemSpec& spec, const FmhaDevice& device) {
  const FmhaBackwardKernel* fallback = fmha_backward_default_kernel(spec.dtype, spec.head_dim, spec.head_dim_v,
                                                                    fmha_backward_policy_for(spec.mask), device);
  if (fallback == nullptr || fallback->config.architecture != 90 || !prefers_backward_key_tiles_of_64(spec) ||
      forced_config_name(kForcedBackwardConfigVariable) != nullptr) {
    return fallback;
  }
  for (const auto& k : fmha_backward_kernels()) {
    const FmhaBackwardConfig& c = k.config;
    if (c.architecture == 90 && c.block_n == 64 && c.dtype == fallback->config.dtype &&
        c.head_dim == fallback->config.head_dim && c.policy == fallback->config.policy &&
        fmha_backward_config_fits(c, device)) {
      return &k;
    }
  }
  return fallback;
}

tune::ConfigSpace fmha_backward_space() {
  tune::ConfigSpace space;
  space.op = tune::TuneOp::attention_backward;
  space.backend = Backend::cuda;
  space.description =
      "fmha backward v3: preprocess, dK/dV (KV-tile-centric) and dQ (Q-tile-centric) kernels; block_m x "
      "block_n tiles (boxes for neighborhood masks; Q tiles of a KV tile and KV tiles of a Q tile at window "
      "origins), warps, architecture of the dK/dV kernel (80: portable mma.sync, 90: sm_90a wgmma); policy box "
      "(dense, causal, neighborhood) or list (block, element masks)";
  std::set<std::string> seen;
  for (const auto& kernel : fmha_backward_kernels()) {
    const FmhaBackwardConfig& c = kernel.config;
    tune::Config config;
    config.id = fmha_backward_config_name(c);
    if (!seen.insert(config.id).second) continue;
    config.params = {{"dtype", static_cast<int64_t>(c.dtype)},
                     {"head_dim", c.head_dim},
                     {"block_m", c.block_m},
                     {"block_n", c.block_n},
                     {"warps", c.warps},
                     {"policy", static_cast<int64_t>(c.policy)},
                     {"architecture", c.architecture}};
    config.resources.smem_bytes = std::max(c.smem_bytes_dkdv, c.smem_bytes_dq);
    config.resources.threads = c.warps * 32;
    config.entry = &kernel;
    space.configs.push_back(std::move(config));
  }
  space.invalid_reason = [](const tune::Config& config, const tune::ProblemSpec& spec,
                            const tune::DeviceLimits& limits) -> std::string {
    if (const std::string reason =
            architecture_reason(static_cast<int>(config.param("architecture")), limits.compute_capability);
        !reason.empty()) {
      return reason;
    }
    if (spec.positional_bias && config.param("architecture") == 90) {
      return std::string("the Hopper tier adds no relative positional bias (rpb); the portable tier does");
    }
    const auto dtype = static_cast<DType>(config.param("dtype"));
    if (dtype != spec.dtype) return "built for " + std::string(dtype_name(dtype));
    const auto wanted = fmha_backward_policy_for(spec.mask);
    const FmhaDevice device = device_for(spec, limits);
    const int width = fmha_backward_width_on_device(spec.dtype, spec.head_dim, spec.head_dim_v, wanted, device);
    if (config.param("head_dim") != width) {
      return "compiled for head dim " + std::to_string(config.param("head_dim")) + "; this problem runs on width " +
             std::to_string(width) + " on this device";
    }
    if (config.param("policy") != static_cast<int64_t>(wanted)) return "another mask policy";
    return "";
  };
  space.estimate = [](const tune::Config& config, const tune::ProblemSpec& spec, const tune::DeviceLimits& limits) {
    tune::TileWork work = tune::attention_tile_work(spec, config.param("block_m"), config.param("block_n"));
    // The Hopper dK/dV kernel's MMA throughput relative to the portable one's (docs/perf.md).
    if (config.param("architecture") == 90) work.flops_per_tile /= kSm90BackwardEfficiency;
    return tune::roofline_estimate(work, limits.processors, tune::blocks_per_processor(config.resources, limits),
                                   limits);
  };
  space.default_config = [](const tune::ProblemSpec& spec, const tune::DeviceLimits& limits) {
    const FmhaBackwardKernel* kernel = fmha_backward_default_for(spec, device_for(spec, limits));
    return kernel == nullptr ? std::string() : fmha_backward_config_name(kernel->config);
  };
  return space;
}

const FmhaBackwardKernel* fmha_backward_kernel_by_name(const std::string& id) {
  static const std::unordered_map<std::string, const FmhaBackwardKernel*> by_name = [] {
    std::unordered_map<std::string, const FmhaBackwardKernel*> map;
    for (const auto& kernel : fmha_backward_kernels()) map.emplace(fmha_backward_config_name(kernel.config), &kernel);
    return map;
  }();
  const auto it = by_name.find(id);
  return it == by_name.end() ? nullptr : it->second;
}

void register_fmha_spaces(tune::ConfigSpaceRegistry& registry) {
  if (!fmha_forward_kernels().empty()) registry.add(fmha_forward_space());
  if (!fmha_backward_kernels().empty()) registry.add(fmha_backward_space());
}

}  // namespace attnkit::cuda::fmha
