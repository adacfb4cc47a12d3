// Device launcher of the portable forward kernel, instantiated once per row of the kernel table
// (cmake/attnkit_kernels.cmake) by a generated .cu named for its config id calling make_fmha_kernel.
//
// Box policy: one launch. Tile-list policy: a stream-ordered workspace (cudaMallocAsync), the two
// preprocessing kernels (fmha_tile_list_build.cuh), the main kernel, then cudaFreeAsync on the same
// stream; nothing synchronises with the host, so the call can be captured into a CUDA graph. Every
// launch is checked with cudaGetLastError and failures throw Status::cuda_error.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/kernel_attributes.hpp"
#include "cuda/fmha/fmha_box_policy.cuh"
#include "cuda/fmha/fmha_configs.hpp"
#include "cuda/fmha/fmha_kernel.cuh"
#include "cuda/fmha/fmha_tile_list_build.cuh"
#include "cuda/fmha/fmha_tile_list_policy.cuh"
#include "cuda/fmha/fmha_traits.cuh"

namespace attnkit::cuda::fmha {

inline int64_t round_up_bytes(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Byte sizes of the tile-list workspace's parts (each 256-byte aligned), with the tile counts filled in.
struct TileListWorkspaceLayout {
  int64_t classes = 0, entries = 0, counts = 0, bits = 0;
  int64_t total() const { return classes + entries + counts + bits; }
};

template <class Traits>
TileListWorkspaceLayout tile_list_workspace_layout(TileListBuildParams& b) {
  b.q_tiles = static_cast<int32_t>((b.seq_q + Traits::kBlockM - 1) / Traits::kBlockM);
  b.kv_tiles = static_cast<int32_t>((b.seq_k + Traits::kBlockN - 1) / Traits::kBlockN);
  b.blocks_align_with_tiles =
      b.kind == TileMaskKind::block && b.block_q % Traits::kBlockM == 0 && b.block_k % Traits::kBlockN == 0;
  const int64_t mask_bh = static_cast<int64_t>(b.mask_batch) * b.mask_heads;
  const int64_t tiles = mask_bh * b.q_tiles * b.kv_tiles;
  TileListWorkspaceLayout layout;
  layout.classes = round_up_bytes(tiles);
  layout.entries = round_up_bytes(tiles * 4);
  layout.counts = round_up_bytes(mask_bh * b.q_tiles * 4);
  layout.bits = b.blocks_align_with_tiles ? 0 : round_up_bytes(tiles * Traits::kBitWords * Traits::kThreads * 4);
  return layout;
}

template <class Traits, template <class> class PolicyTemplate>
int64_t fmha_workspace_bytes(const FmhaLaunch& request) {
  if constexpr (std::is_same_v<PolicyTemplate<Traits>, TileListPolicy<Traits>>) {
    TileListBuildParams b = request.tile_list;
    return tile_list_workspace_layout<Traits>(b).total();
  } else {
    return 0;
  }
}

// Runs the preprocessing into the caller's workspace (or a stream-ordered allocation) and fills
// launch.params.list. Returns the memory the launcher allocated (to be freed on `stream` after the main
// kernel), or nullptr when the caller's workspace was used.
template <class Traits>
void* build_tile_lists(FmhaLaunch& launch, FmhaWorkspace workspace, cudaStream_t stream) {
  TileListBuildParams& b = launch.tile_list;
  const TileListWorkspaceLayout layout = tile_list_workspace_layout<Traits>(b);
  const int64_t mask_bh = static_cast<int64_t>(b.mask_batch) * b.mask_heads;
  if (b.q_tiles > 65535 || mask_bh > 65535) {
    throw Error(Status::unsupported,
                "mask: " + std::to_string(b.q_tiles) + " query tiles and " + std::to_string(mask_bh) +
                    " mask (batch x head) slices; allowed: at most 65535 of each on the CUDA backend (sequence "
                    "length up to " +
                    std::to_string(65535 * Traits::kBlockM) + ")");
  }
  void* memory = nullptr;
  char* base = nullptr;
  if (workspace.data != nullptr) {
    if (workspace.bytes < layout.total()) {
      throw Error(Status::invalid_argument,
                  "options.workspace_bytes: " + std::to_string(workspace.bytes) + " bytes for a mask that needs " +
                      std::to_string(layout.total()) +
                      "; allowed: at least attention_forward_workspace_size() bytes, or no workspace");
    }
    base = static_cast<char*>(workspace.data);
  } else {
    check_cuda(cudaMallocAsync(&memory, static_cast<size_t>(layout.total()), stream),
               "cudaMallocAsync (tile-list workspace)");
    base = static_cast<char*>(memory);
  }
  b.classes = reinterpret_cast<uint8_t*>(base);
  b.entries = reinterpret_cast<uint32_t*>(base + layout.classes);
  b.counts = reinterpret_cast<int32_t*>(base + layout.classes + layout.entries);
  b.bits = layout.bits ? reinterpret_cast<uint32_t*>(base + layout.classes + layout.entries + layout.counts) : nullptr;

  if (b.blocks_align_with_tiles) {
    const int64_t tiles = mask_bh * b.q_tiles * b.kv_tiles;
    const auto ctas = static_cast<unsigned>((tiles + kAlignedClassifyThreads - 1) / kAlignedClassifyThreads);
    classify_aligned_block_tiles_kernel<Traits::kBlockM, Traits::kBlockN>
        <<<ctas, kAlignedClassifyThreads, 0, stream>>>(b, tiles);
  } else {
    classify_tiles_kernel<Traits>
        <<<dim3(b.kv_tiles, b.q_tiles, static_cast<unsigned>(mask_bh)), Traits::kThreads, 0, stream>>>(b);
  }
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) {
    compact_tile_lists_kernel<Traits><<<dim3(b.q_tiles, static_cast<unsigned>(mask_bh)), 32, 0, stream>>>(b);
    status = cudaGetLastError();
  }
  if (status != cudaSuccess) {
    if (memory != nullptr) cudaFreeAsync(memory, stream);
    throw_cuda_error(status, "tile-list preprocessing launch");
  }

  TileListArgs& list = launch.params.list;
  list.entries = b.entries;
  list.counts = b.counts;
  list.bits = b.bits;
  list.q_tiles = b.q_tiles;
  list.kv_tiles = b.kv_tiles;
  list.mask_batch = b.mask_batch;
  list.mask_heads = b.mask_heads;
  return memory;
}

template <class Traits, template <class> class PolicyTemplate>
void launch_fmha_forward(const FmhaLaunch& request, FmhaWorkspace caller_workspace, cudaStream_t stream) {
  using Policy = PolicyTemplate<Traits>;
  FmhaLaunch launch = request;
  void* workspace = nullptr;
  if constexpr (std::is_same_v<Policy, TileListPolicy<Traits>>) {
    workspace = build_tile_lists<Traits>(launch, caller_workspace, stream);
  }

  auto* kernel = &fmha_forward_kernel<Traits, Policy>;
  cudaError_t status = cudaSuccess;
  if (Traits::kSmemBytes > 48 * 1024) status = raise_dynamic_shared_memory_once(kernel, Traits::kSmemBytes);
  if (status == cudaSuccess) {
    const FmhaParams& p = launch.params;
    kernel<<<dim3(p.total_q_tiles, p.heads_q, p.batch), Traits::kThreads, Traits::kSmemBytes, stream>>>(p);
    status = cudaGetLastError();
  }
  if (workspace != nullptr) {
    const cudaError_t freed = cudaFreeAsync(workspace, stream);
    if (status == cudaSuccess) status = freed;
  }
  check_cuda(status, "fused attention forward kernel launch");
}

template <class Element, int HeadDim, int BlockM, int BlockN, int Warps, template <class> class PolicyTemplate>
FmhaKernel make_fmha_kernel(DType dtype, FmhaPolicyKind policy) {
  using Traits = FmhaTraits<Element, HeadDim, BlockM, BlockN, Warps>;
  // fp32 accumulators of O and S, the fp16/bf16 P operand, plus addressing and softmax state.
  constexpr int kAccumulators =
      (Traits::kBlockM * Traits::kHeadDim + Traits::kBlockM * Traits::kBlockN) / Traits::kThreads;
  constexpr int kEstimate = kAccumulators + Traits::kBlockM * Traits::kBlockN / Traits::kThreads / 2 + 48;
  FmhaConfig config;
  config.dtype = dtype;
  config.head_dim = HeadDim;
  config.block_m = Traits::kBlockM;
  config.block_n = Traits::kBlockN;
  config.warps = Traits::kWarps;
  config.stages = 2;
  config.smem_bytes = Traits::kSmemBytes;
  config.registers_estimate = kEstimate < 255 ? kEstimate : 255;
  config.policy = policy;
  return FmhaKernel{config, &launch_fmha_forward<Traits, PolicyTemplate>,
                    &fmha_workspace_bytes<Traits, PolicyTemplate>};
}

}  // namespace attnkit::cuda::fmha
