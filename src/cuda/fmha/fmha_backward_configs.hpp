// Registry of the compiled backward-kernel configurations, one entry per instantiation (a backward row
// of the kernel table cmake/attnkit_kernels.cmake: dtype, compiled head dim, tier, mask policy): tile
// sizes, warps, shared memory of each kernel, and the launcher. The default choice is a pure function
// of (dtype, head dims, policy, device limit); the tuner enumerates the same entries
// (attention_backward_config names them with fmha_backward_config_name()).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/dtype.hpp"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_configs.hpp"

namespace attnkit::cuda::fmha {

enum class FmhaBackwardPolicy : int32_t { box = 0, tile_list = 1 };

struct FmhaBackwardConfig {
  DType dtype = DType::f16;
  int head_dim = 0;  // compiled width: serves any D, Dv <= head_dim (multiples of 8)
  int block_m = 0;   // queries per Q tile
  int block_n = 0;   // keys per KV tile
  int warps = 0;
  int smem_bytes_dkdv = 0;  // dynamic shared memory of the dK/dV kernel (fast mode's, the larger)
  int smem_bytes_dq = 0;    // dynamic shared memory of the dQ kernel
  FmhaBackwardPolicy policy = FmhaBackwardPolicy::box;
  // 80: portable dK/dV kernel (SM80 and newer); 90: the Hopper dK/dV kernel (sm_90a, compute capability
  // 9.0 only), with the portable preprocess, tile lists and dQ kernels around it.
  int architecture = 80;
  int ctas_per_sm = 1;  // dK/dV CTAs resident per SM (the KV-parallel split and the heads per CTA count them)
  // The dK/dV kernel runs several KV heads per CTA where the launch allows (Sm90BackwardTraits::kSeveralHeadsPerCta).
  bool several_heads_per_cta = false;
};

// Everything one call needs: the kernels' params and, for tile-list policies, the mask to preprocess
// (the launcher fills in the workspace pointers of both).
struct FmhaBackwardLaunch {
  FmhaBackwardParams params{};
  BackwardListBuildParams lists{};
  bool deterministic = false;
};

// Caller-provided scratch (RunOptions::workspace); data == nullptr: the launcher allocates stream-ordered.
struct FmhaBackwardWorkspace {
  void* data = nullptr;
  int64_t bytes = 0;
};

struct FmhaBackwardKernel {
  FmhaBackwardConfig config;
  void (*launch)(const FmhaBackwardLaunch& launch, FmhaBackwardWorkspace workspace, cudaStream_t stream);
  int64_t (*workspace_bytes)(const FmhaBackwardLaunch& launch);
};

const std::vector<FmhaBackwardKernel>& fmha_backward_kernels();

// "bwd_bf16_d128_m64_n64_w4_box", "bwd_bf16_d128_m64_n128_w12_box_sm90"
std::string fmha_backward_config_name(const FmhaBackwardConfig& config);

// Validity predicate of a config on a device: its dK/dV code runs there (fmha_architecture_runs_on) and
// the larger of its kernels' shared memory fits the opt-in maximum per block.
bool fmha_backward_config_fits(const FmhaBackwardConfig& config, const FmhaDevice& device);

// The compiled head-dim width that serves max(D, Dv) for this dtype on some device, or 0 when none does.
int fmha_backward_compiled_width(DType dtype, int64_t head_dim, int64_t head_dim_v);

// The width a problem runs on: the narrowest compiled width >= max(D, Dv) with an entry of the dtype and
// policy that fits the device, or 0. Widths differ by device: the Hopper tier compiles D 32, the portable
// one not, so D 32 runs on width 32 on 9.0 and on 64 elsewhere (and with a positional bias).
int fmha_backward_width_on_device(DType dtype, int64_t head_dim, int64_t head_dim_v, FmhaBackwardPolicy policy,
                                  const FmhaDevice& device);

// The default kernel for a problem: the first registry entry (Hopper tier first) of the problem's dtype,
// width on the device (fmha_backward_width_on_device) and policy that fits the device, or nullptr.
// ATTNKIT_FMHA_BACKWARD_CONFIG=<config name> (benchmarks, tests) forces an entry when it can run the call.
const FmhaBackwardKernel* fmha_backward_default_kernel(DType dtype, int64_t head_dim, int64_t head_dim_v,
                                                       FmhaBackwardPolicy policy, const FmhaDevice& device);

// "float16 {64, 128}, bfloat16 {64, 128}": what this build's backward can run.
std::string fmha_backward_compiled_summary();

}  // namespace attnkit::cuda::fmha
