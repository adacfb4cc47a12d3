// Registry of the compiled forward-kernel configurations (one entry per instantiation, i.e. per row of
// the kernel table cmake/attnkit_kernels.cmake this build compiles): head dim, tile sizes, warps,
// pipeline stages, shared memory, a register estimate, the mask policy, and the launcher.
// The default choice is a pure function of (dtype, head dims, policy, device limit); the tuner
// (a later issue) enumerates the same entries.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/dtype.hpp"
#include "cuda/fmha/fmha_params.hpp"

namespace attnkit::cuda::fmha {

enum class FmhaPolicyKind : int32_t { box = 0, tile_list = 1 };

struct FmhaConfig {
  DType dtype = DType::f16;
  int head_dim = 0;  // compiled width: serves any D, Dv <= head_dim (multiples of 8)
  int block_m = 0;
  int block_n = 0;
  int warps = 0;
  int stages = 0;              // K and V buffers in flight (K(j+1) overlaps P*V(j), V(j) overlaps Q*K(j)^T)
  int smem_bytes = 0;          // dynamic shared memory per CTA
  int registers_estimate = 0;  // per thread, from ptxas -v of the sm_90a build
  FmhaPolicyKind policy = FmhaPolicyKind::box;
  // 80: the portable tier (any SM80+ device); 90: the Hopper tier (sm_90a code: compute capability 9.0 only).
  int architecture = 80;
  // CTAs the kernel is built to keep resident on one SM (its launch bounds and register split).
  int ctas_per_sm = 1;
};

// Everything one launch needs: the kernel's params and, for tile-list policies, the mask to
// preprocess (its workspace fields are filled by the launcher).
struct FmhaLaunch {
  FmhaParams params{};
  TileListBuildParams tile_list{};
  int32_t multiprocessors = 0;  // SMs of the device the launch runs on (Hopper forward: heads per CTA); 0 unknown
};

// Caller-provided scratch (RunOptions::workspace); data == nullptr: the launcher allocates stream-ordered.
struct FmhaWorkspace {
  void* data = nullptr;
  int64_t bytes = 0;
};

struct FmhaKernel {
  FmhaConfig config;
  void (*launch)(const FmhaLaunch& launch, FmhaWorkspace workspace, cudaStream_t stream);
  int64_t (*workspace_bytes)(const FmhaLaunch& launch);  // 0 for box policies
};

const std::vector<FmhaKernel>& fmha_forward_kernels();

std::string fmha_config_name(const FmhaConfig& config);  // "bf16_d128_m128_n64_w4_s2_box", "..._sm90"
const char* fmha_policy_name(FmhaPolicyKind policy);

// What a config's validity depends on: the device's compute capability (major * 10 + minor) and its
// opt-in shared memory per block.
struct FmhaDevice {
  int capability = 0;
  int max_shared_bytes_optin = 0;
  int multiprocessors = 0;
  // The call needs what only the portable tier computes (a relative positional bias): Hopper-tier
  // configs do not fit it.
  bool portable_only = false;
};

// Whether a config's code runs on a device of `capability` (major * 10 + minor): the portable tier on
// 8.0 and newer, the Hopper tier (sm_90a) on 9.0 only.
bool fmha_config_runs_on(const FmhaConfig& config, int capability);
// The same rule for any kernel built for `architecture` (80: SM80 and newer; 90: sm_90a, 9.0 only).
bool fmha_architecture_runs_on(int architecture, int capability);

// Validity predicate of a config on a device: its code runs there (fmha_config_runs_on) and its shared
// memory fits the opt-in maximum per block.
bool fmha_config_fits(const FmhaConfig& config, const FmhaDevice& device);

// Whether a config's query tiles are a power of two rows (boxes of any shape); the Hopper kernels of 192 query
// rows' are not.
bool fmha_query_tiles_are_power_of_two(const FmhaConfig& config);

// Whether a config's tiles can be the boxes of a neighborhood over `token_dims` dimensions: query and key tiles of a
// power of two rows serve every neighborhood; the Hopper kernels of 192 query rows serve 1-D ones (a flat query side,
// as for dense and causal masks).
bool fmha_config_serves_neighborhood(const FmhaConfig& config, int64_t token_dims);

// Environment variables that force a registry entry by name (benchmarks, config sweeps, tests); the
// selection bypasses the tuner while one is set.
inline constexpr const char* kForcedForwardConfigVariable = "ATTNKIT_FMHA_CONFIG";
inline constexpr const char* kForcedBackwardConfigVariable = "ATTNKIT_FMHA_BACKWARD_CONFIG";

// The config name environment variable `variable` forces, or nullptr when it is unset or empty.
const char* forced_config_name(const char* variable);

// The narrowest head dim >= max(D, Dv) among the registry entries `accepts` takes, or 0 when it takes none:
// the width rule of both directions' registries (fmha_compiled_width, fmha_width_on_device and their
// backward twins).
template <class Kernels, class Accepts>
int narrowest_width(const Kernels& kernels, int64_t head_dim, int64_t head_dim_v, const Accepts& accepts) {
  const int64_t needed = head_dim > head_dim_v ? head_dim : head_dim_v;
  int best = 0;
  for (const auto& k : kernels) {
    if (k.config.head_dim < needed || !accepts(k.config)) continue;
    if (best == 0 || k.config.head_dim < best) best = k.config.head_dim;
  }
  return best;
}

// The compiled head-dim width that serves max(D, Dv), or 0 when none does (for this dtype).
int fmha_compiled_width(DType dtype, int64_t head_dim, int64_t head_dim_v);

// The narrowest compiled width >= max(D, Dv) with a kernel of this dtype and policy that fits the device,
// or 0 (a build whose Hopper kernels include a width its portable ones lack serves that width elsewhere
// with the next wider portable kernel).
int fmha_width_on_device(DType dtype, int64_t head_dim, int64_t head_dim_v, FmhaPolicyKind policy,
                         const FmhaDevice& device);

// The default kernel for a problem: the first fitting entry of fmha_width_on_device's width and the policy, or
// nullptr when none is compiled or fits the device.
const FmhaKernel* fmha_default_kernel(DType dtype, int64_t head_dim, int64_t head_dim_v, FmhaPolicyKind policy,
                                      const FmhaDevice& device);

// "float16 {64, 128}, bfloat16 {64, 128}": what this build can run, for error messages and skips.
// "bf16 {64, 128}, f16 {64, 128}": the compiled head-dim widths per dtype of a kernel list.
std::string compiled_widths_summary(const std::vector<std::pair<DType, int>>& kernels);
std::string fmha_compiled_summary();

}  // namespace attnkit::cuda::fmha
