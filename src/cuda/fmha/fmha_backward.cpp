// Host entry of the portable fused-attention backward on CUDA tensors.
//
// Kernels (fmha_backward_launch.cuh): preprocess (delta = rowsum(dO*O), LSE in log2 units) -> dK/dV,
// KV-tile-centric over the Q tiles that see each KV tile, GQA heads reduced in registers -> dQ in one of
// two modes. Block and element masks first build per-tile classes and their row and column lists.
//
// Modes (AttentionBackward::deterministic; the C ABI's `deterministic`):
//   fast (the default, deterministic == false): the dK/dV kernel also forms dQ partials dS K and adds
//     them into an fp32 workspace accumulator with reductions in L2 (red.global atomics on the portable
//     tier, TMA tensor reductions of whole tiles on the Hopper tier), which a small kernel converts into dQ
//     (fmha_backward_dq_accumulate.cuh): 5 tile products per (Q tile, KV tile) pair. Costs: 4 * B * Sq *
//     Hq * D more workspace bytes, and dQ varies in its last bits from run to run (the order of the
//     fp32 additions follows the scheduling). dK and dV are unaffected: bit-identical from run to run,
//     and to the deterministic mode's.
//   deterministic: every gradient bit-identical from run to run.
//     Hopper tier (compute capability 9.0): the same dK/dV kernel and the same dQ partials, added in a
//     fixed order — the KV tiles that meet a Q tile take turns on a counter per (batch, head, Q tile),
//     in descending tile order, launched in that order so that a CTA waits only for CTAs started before it
//     (fmha_backward_dq_order.hpp). Costs: the counters and a rank table in the workspace (a few bytes
//     per Q tile), and the waits (docs/perf.md).
//     Portable tier: a separate dQ kernel, Q-tile-centric over the KV tiles each Q tile sees, recomputes
//     S and dP (7 tile products per pair, about 1.4x the fast mode's FLOPs); every gradient is
//     accumulated in registers by exactly one CTA in a fixed order, no atomics.
// Both modes run the same dK/dV kernel instantiation (a runtime flag). ATTNKIT_DETERMINISTIC is the
// tuner's switch (never benchmark), not this one; the Python wrappers pass it on as `deterministic`.
//
// KV-parallel splitting (AttentionBackward::kv_splits, split_workspace_limit; fmha_backward_split.hpp):
// a KV tile's visits may be shared by several dK/dV CTAs whose fp32 partials a reduce kernel sums in a
// fixed order — chosen per call from the device's SM count, the same in both modes.
//
// Workspace: lse_log2 and delta (8 bytes per query row and head, rounded to whole Q tiles), for
// tile-list masks the tile classes and lists, the fp32 dQ accumulator (fast mode; the Hopper tier's
// deterministic mode too, with its turn counters and rank table), and with splits the partials; the
// plan's workspace_bytes() is exactly what its runs use for the config and mode it picked.
//
// Plans (core/op_plan.hpp): the checks, the kernel choice and the launch params (with the split choice
// and the launch order) are made once per call shape; a run points the params at the call's tensors.
#include "cuda/fmha/fmha_backward.hpp"

#include <memory>

#include "core/tuned_config.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/kernel_plan.hpp"
#include "cuda/fmha/fmha_backward_arguments.hpp"
#include "cuda/fmha/fmha_backward_configs.hpp"
#include "cuda/tune/fmha_backward_selection.hpp"

namespace attnkit::cuda::fmha {

using FmhaBackwardPlan = KernelPlan<AttentionBackward, FmhaBackwardKernel, FmhaBackwardLaunch, FmhaBackwardWorkspace,
                                    &rebind_backward_launch>;

detail::MadePlan<AttentionBackward> make_backward_plan(const AttentionBackward& problem,
                                                       const detail::AttentionShape& shape, const RunOptions& options,
                                                       BackwardTileShape* tile_shape) {
  const int device = problem.q.device.index;
  const DeviceGuard guard(device);
  const BackwardSelection selection = backward_selection(problem, shape, options);
  const FmhaBackwardKernel& kernel = *selection.kernel;
  if (tile_shape != nullptr) *tile_shape = BackwardTileShape{kernel.config.block_m, kernel.config.block_n};
  detail::MadePlan<AttentionBackward> made;
  made.plan = std::make_unique<FmhaBackwardPlan>(
      kernel, make_backward_launch(problem, shape, kernel.config, selection.multiprocessors), device,
      detail::tuned_config(selection.name, selection.source));
  made.reusable = !selection.provisional;
  return made;
}

}  // namespace attnkit::cuda::fmha
