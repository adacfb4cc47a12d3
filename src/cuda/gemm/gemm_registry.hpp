// The GEMM kernels of this build, in selection order: the Hopper rows of cmake/attnkit_gemm_kernels.cmake,
// then its SM80 rows, then the SIMT fallbacks (gemm_simt.hpp). A problem runs on the first entry of its
// dtype and math whose A / B majorness match and that accepts the shape on the device, directly or with
// its misaligned operands (or an N that is not a multiple of 8) staged (gemm_staging.hpp). When that
// entry's output tiles would occupy fewer than half the SMs, the first split-K entry that accepts the
// problem runs it instead (gemm_split_k.hpp: batch 1, a K that divides into slices, at least three slices
// a tile), else the first such stream-K entry; the SIMT entry accepts everything.
// ATTNKIT_GEMM_CONFIG=<name> forces an entry (tests, benchmarks).
#pragma once
#include <string>
#include <vector>

#include "cuda/gemm/gemm_kernel.hpp"
#include "cuda/gemm/gemm_staging.hpp"

namespace attnkit::cuda::gemm {

inline constexpr const char* kForcedGemmConfigVariable = "ATTNKIT_GEMM_CONFIG";

const std::vector<const GemmKernel*>& gemm_kernels();

// The device's limits, read once per device.
const GemmDevice& gemm_device(int index);

// Whether code built for `architecture` (0 any, 80 SM80+, 90 sm_90a) runs on compute capability `capability`.
bool gemm_architecture_runs_on(int architecture, int capability);

// Whether `kernel` computes problems of `shape`'s dtype with this math choice and majorness (not the
// alignment or device checks: GemmKernel::refusal).
bool gemm_kernel_matches(const GemmKernel& kernel, const GemmShape& shape, bool allow_tf32);

// A kernel and the operands it needs staged (none when it addresses the problem directly).
struct GemmChoice {
  const GemmKernel* kernel = nullptr;
  GemmStaging staging;
  // The kernel's name, with "+staged" when operands are staged (the plan's config name).
  std::string name() const;
};

// Whether `kernel` computes `shape` on `device`, directly or staged: the staging in *staging; else why not.
std::string gemm_kernel_refusal(const GemmKernel& kernel, const GemmShape& shape, const GemmDevice& device,
                                GemmStaging* staging);

// The entry a problem runs on (forced by ATTNKIT_GEMM_CONFIG, else the rule above).
// Throws Status::unsupported when the forced entry is unknown or refuses the problem.
GemmChoice select_gemm_kernel(const GemmShape& shape, const GemmDevice& device, bool allow_tf32);

}  // namespace attnkit::cuda::gemm
