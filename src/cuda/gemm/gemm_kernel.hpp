// The GEMM kernel registry's entry (one per compiled instance: the SIMT fallback, the SM80 and Hopper
// rows of cmake/attnkit_gemm_kernels.cmake) and the runner a plan holds. An entry says which problems
// it computes (dtype, math, the majorness of A and B, the architecture) and makes a runner for one
// canonical shape: everything CUTLASS's can_implement / workspace query / initialize do once happens
// there, a run only points the kernel at the call's tensors and launches it.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "attnkit/dtype.hpp"
#include "cuda/gemm/gemm_shape.hpp"

namespace attnkit::cuda::gemm {

// narrow: the SIMT kernel for a few rows of A (gemm_narrow.hpp: fp32, and 16-bit for M <= 4), bound by B's bytes;
// listed before the others.
enum class GemmTier : int32_t { simt = 0, sm80 = 1, sm90 = 2, narrow = 3 };

// What the multiply-adds are: fp32 FMA (simt), tensor cores on f16/bf16, TF32 tensor cores (fp32 in,
// about 1e-3 relative error per product), or 3xTF32 (fp32 in, split into big + small TF32 parts:
// fp32-level error on tensor cores).
enum class GemmMath : int32_t { simt = 0, tensor = 1, tf32 = 2, fast_f32 = 3 };

struct GemmDevice {
  int index = 0;
  int capability = 0;  // major * 10 + minor
  int multiprocessors = 0;
  int max_shared_bytes_optin = 0;
};

class GemmRunner {
 public:
  virtual ~GemmRunner() = default;
  virtual int64_t workspace_bytes() const = 0;
  // `shape` is the plan's shape bound to the call's pointers; `workspace` has workspace_bytes().
  virtual void run(const GemmShape& shape, float alpha, float beta, void* workspace, cudaStream_t stream) const = 0;
};

struct GemmKernel {
  const char* name = "";
  GemmTier tier = GemmTier::simt;
  DType dtype = DType::f32;
  GemmMath math = GemmMath::simt;
  int a_k_major = -1;  // 1: A must be K-major, 0: MN-major, -1: any (SIMT)
  int b_k_major = -1;
  int architecture = 0;  // 0 any; 80: SM80 and newer; 90: sm_90a (compute capability 9.0 only)
  int tile_m = 0;        // the output tile (0: SIMT)
  int tile_n = 0;
  bool stream_k = false;           // splits the K loop among CTAs for grids smaller than the device (needs workspace)
  bool split_k = false;            // K slices with fp32 partials and an ordered sum, gemm_split_k.hpp (needs workspace)
  bool overlaps_epilogue = false;  // ping-pong: one tile's epilogue runs under the next tile's main loop
  bool staged_epilogue = false;    // the wide-tile rows: the epilogue through shared memory, not TMA stores
  bool exact_only = false;  // fp32 in fp32 FMA: never run when TF32 is allowed (a TF32 row is faster there), else
                            // forced or tuned only (the automatic choice, gemm_registry.cpp, measured it slower)
  // Empty when the kernel computes `shape` on `device`, else why not (alignment, extents, ...).
  std::string (*refusal)(const GemmShape& shape, const GemmDevice& device) = nullptr;
  std::unique_ptr<GemmRunner> (*make_runner)(const GemmShape& shape, const GemmDevice& device) = nullptr;
};

}  // namespace attnkit::cuda::gemm
