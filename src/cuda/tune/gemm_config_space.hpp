// The tuner's config space of the CUDA GEMM (DESIGN §5, §6.3), built from the kernel registry
// (gemm_registry.hpp): one tune::Config per entry of gemm_kernels() -- the Hopper and SM80 rows of
// cmake/attnkit_gemm_kernels.cmake and the entries outside the table -- named by the entry's name (its row
// id, e.g. sm90_bf16_ak_bk_128x256x64_c2x1_coop, or simt_f16), so entries added to the registry appear
// here without a change. A config holds its entry (tune::Config::entry).
//
// The problem is the gemm's canonical form (problem_spec.hpp, gemm_shape.hpp): M, N, K, the batch, the
// majorness of op(A) and op(B) and whether fp32 may use TF32. The tuner sees no pointers or strides, so
// validity and estimates use the packed problem of those sizes (gemm_tuning_shape: leading dimensions equal
// to the contiguous extents, 16-byte aligned placeholder addresses); a call whose operands are strided or
// misaligned is checked again by its plan (gemm_selection.hpp).
//  - validity: the entry's dtype, the architecture it was built for, its math (TF32 only when allowed; exact_only
//    entries only when not) and majorness (gemm_kernel_matches, or a TF32 K-major-B row on a transposed B:
//    gemm_kernel_transposes_b), then gemm_kernel_refusal on the packed problem, which accepts a row that runs the
//    problem with operands staged (gemm_staging.hpp);
//  - estimate: the registry's waves cost model (gemm_tile_cost) for data-parallel rows; split-K and
//    stream-K rows spread the same tile work evenly over the SMs (what they are for) and pay a second
//    launch (split-K's ordered sum of fp32 partials); the SIMT entries run at the CUDA cores' rate. Each is
//    scaled by its math (TF32 half the 16-bit tensor-core rate, 3xTF32 a sixth) and, for SM80 rows on a 9.0
//    device, by mma.sync's share of wgmma's rate; the time is at least the bytes moved over the bandwidth,
//    staged copies included;
//  - default: select_gemm_kernel's choice for the packed problem (the registry's rule, which honours
//    ATTNKIT_GEMM_CONFIG like the attention registries honour theirs), a pure function of the problem.
#pragma once
#include <string>

#include "cuda/gemm/gemm_kernel.hpp"
#include "cuda/gemm/gemm_shape.hpp"
#include "cuda/gemm/gemm_staging.hpp"
#include "tune/config_space_registry.hpp"

namespace attnkit::cuda::gemm {

// Params of a config, by name: dtype (the DType value), tier, math (GemmTier / GemmMath values), a_k_major,
// b_k_major (1, 0, or -1 for either), architecture, tile_m, tile_n, stream_k, split_k.
tune::ConfigSpace gemm_space();
void register_gemm_space(tune::ConfigSpaceRegistry& registry);

// The registry entry a config of gemm_space() holds.
inline const GemmKernel* gemm_kernel_of(const tune::Config& config) {
  return static_cast<const GemmKernel*>(config.entry);
}

// The tuner's problem of a call in canonical form (what the plan asks the tuner about).
tune::ProblemSpec gemm_spec_of(const GemmShape& shape, bool allow_tf32);
// The packed problem of a spec (see above).
GemmShape gemm_tuning_shape(const tune::ProblemSpec& spec);
bool gemm_spec_allows_tf32(const tune::ProblemSpec& spec);
// The GEMM registry's view of a tuner device: capability, SMs, opt-in shared memory.
GemmDevice gemm_device_of(const tune::DeviceLimits& limits);

// Why `kernel` cannot compute `shape` on `device` ("" when it can; the staging it needs in *staging): the
// dtype, architecture, math and majorness checks, then gemm_kernel_refusal.
std::string gemm_config_refusal(const GemmKernel& kernel, const GemmShape& shape, const GemmDevice& device,
                                bool allow_tf32, GemmStaging* staging);

// The estimate described above, of `kernel` on `shape`.
tune::CostEstimate gemm_estimate(const GemmKernel& kernel, const GemmShape& shape, const tune::DeviceLimits& limits);

}  // namespace attnkit::cuda::gemm
