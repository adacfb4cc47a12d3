// Host entry of the portable fused-attention backward on CUDA tensors.
//
// Kernels (fmha_backward_launch.cuh): preprocess (delta = rowsum(dO*O), LSE in log2 units) -> dK/dV,
// KV-tile-centric over the Q tiles that see each KV tile, GQA heads reduced in registers -> dQ,
// Q-tile-centric over the KV tiles each Q tile sees. Block and element masks first build per-tile
// classes and their row and column lists.
//
// Determinism: every gradient is accumulated in registers by exactly one CTA in a fixed order, with no
// atomics, so results are bit-identical from run to run in both modes; AttentionBackward::deterministic
// and ATTNKIT_DETERMINISTIC are accepted and currently select the same kernels. (The alternative, dQ
// accumulated with fp32 atomics inside the dK/dV kernel, saves the dQ kernel's recomputation of S and
// dP — 5 instead of 7 tile products — at the price of run-to-run rounding differences and a
// B*Sq*Hq*D*4-byte fp32 accumulator; it is not implemented yet.)
//
// Workspace: lse_log2 and delta (8 bytes per query row and head, rounded to whole Q tiles) plus, for
// tile-list masks, the tile classes and lists; backward_workspace_size() returns exactly what
// run_backward() uses for the config it picks.
#include "cuda/fmha/fmha_backward.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/fmha/fmha_backward_arguments.hpp"
#include "cuda/fmha/fmha_backward_configs.hpp"
#include "cuda/tune/fmha_backward_selection.hpp"

namespace attnkit::cuda::fmha {
namespace {

const FmhaBackwardKernel& backward_kernel(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                          const RunOptions& options) {
  return *backward_selection(problem, shape, options).kernel;
}

}  // namespace

void run_backward(const AttentionBackward& problem, const detail::AttentionShape& shape, const RunOptions& options) {
  const DeviceGuard guard(problem.q.device.index);
  const FmhaBackwardKernel& kernel = backward_kernel(problem, shape, options);
  const FmhaBackwardLaunch launch = make_backward_launch(problem, shape, kernel.config);
  kernel.launch(launch, FmhaBackwardWorkspace{options.workspace, options.workspace_bytes},
                static_cast<cudaStream_t>(options.stream));
}

int64_t backward_workspace_size(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                const RunOptions& options) {
  const DeviceGuard guard(problem.q.device.index);
  const FmhaBackwardKernel& kernel = backward_kernel(problem, shape, options);
  return kernel.workspace_bytes(make_backward_launch(problem, shape, kernel.config));
}

}  // namespace attnkit::cuda::fmha
