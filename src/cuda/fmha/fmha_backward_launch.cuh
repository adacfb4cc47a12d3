// Device launcher of the portable backward, instantiated once per row of the kernel table
// (cmake/attnkit_kernels.cmake) by a generated .cu named for its config id calling make_fmha_backward_kernel.
//
// Sequence on the caller's stream: (tile-list masks: classify + row and column compaction, + row ranks
// for ordered dQ) -> preprocess (lse_log2, delta) -> dK/dV kernel -> dQ kernel (the portable tier's
// deterministic mode), or (p.accumulate_dq: fast mode, and the Hopper tier's deterministic mode with
// ordered additions) zero the fp32 dQ accumulator (and the turn counters) -> preprocess -> dK/dV kernel
// adding dQ partials -> convert kernel (dQ = scale * accumulator), which small problems fold into the dK/dV
// kernel's last CTA (fmha_backward_dq_convert.cuh): two launches in all for a small dense backward. Scratch comes from
// RunOptions::workspace when the caller passes it (an error names the size needed when it is too small), else from one
// stream-ordered cudaMallocAsync freed with cudaFreeAsync after the last kernel: nothing synchronises
// with the host, so the call can be captured into a CUDA graph. Scratch layout (each part 256-byte
// aligned): lse_log2 and delta (4 bytes per (batch, query head, tile row) each), then for tile-list
// masks the classes (1 byte per tile), row and column entries (4 bytes per tile each) and counts (and
// for ordered dQ the rank table, 4 bytes per tile; box policies: the visitor bounds, 8 bytes per Q tile
// position and dilation group of each dimension), then with p.accumulate_dq the dQ accumulator (4 * B *
// Sq * Hq * D bytes) and for ordered dQ its turn counters (4 bytes per (batch, query head, Q tile)) and
// for the fused convert the count of finished dK/dV CTAs (4 bytes), then with KV-parallel splitting the fp32 dK and dV
// partials (fmha_backward_split.hpp), summed by the reduce kernel after the dK/dV kernel.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/kernel_attributes.hpp"
#include "cuda/common/mask_bits_by_key.hpp"
#include "cuda/fmha/fmha_backward_configs.hpp"
#include "cuda/fmha/fmha_backward_dkdv.cuh"
#include "cuda/fmha/fmha_backward_dq.cuh"
#include "cuda/fmha/fmha_backward_dq_accumulate.cuh"
#include "cuda/fmha/fmha_backward_dq_convert.cuh"
#include "cuda/fmha/fmha_backward_dq_order.cuh"
#include "cuda/fmha/fmha_backward_lists.cuh"
#include "cuda/fmha/fmha_backward_preprocess.cuh"
#include "cuda/fmha/fmha_backward_split.cuh"
#include "cuda/fmha/fmha_backward_split.hpp"
#include "cuda/fmha/fmha_backward_traits.cuh"

namespace attnkit::cuda::fmha {

inline int64_t backward_round_up(int64_t bytes) { return (bytes + 255) / 256 * 256; }

struct BackwardWorkspaceLayout {
  int64_t lse_log2 = 0, delta = 0, classes = 0, q_entries = 0, q_counts = 0, kv_entries = 0, kv_counts = 0;
  int64_t turn_table = 0;    // ordered dQ: tile lists' rank table, or the box policies' visitor bounds
  int64_t key_bits = 0;      // element masks: the mask packed key-major
  int64_t dq_accum = 0;      // p.accumulate_dq only
  int64_t dq_turns = 0;      // ordered dQ only; zeroed with dq_accum
  int64_t dq_done = 0;       // the fused dQ convert only; zeroed with dq_accum
  int64_t rpb_partials = 0;  // the positional bias's gradient only; zeroed with dq_accum
  int64_t kv_partials = 0;   // kv_splits > 1 only: dK partials, then dV partials
  int64_t total() const {
    return lse_log2 + delta + classes + q_entries + q_counts + kv_entries + kv_counts + turn_table + key_bits +
           dq_accum + dq_turns + dq_done + rpb_partials + kv_partials;
  }
  // The zeroed region: dq_accum, dq_turns, dq_done, rpb_partials.
  int64_t zeroed_bytes() const { return dq_accum + dq_turns + dq_done + rpb_partials; }
  int64_t dq_accum_offset() const { return total() - kv_partials - zeroed_bytes(); }
  int64_t kv_partials_offset() const { return total() - kv_partials; }
};

template <class Traits, bool kLists>
BackwardWorkspaceLayout backward_workspace_layout(const FmhaBackwardLaunch& launch) {
  const FmhaBackwardParams& p = launch.params;
  BackwardWorkspaceLayout layout;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.total_q_tiles * Traits::kBlockM;
  layout.lse_log2 = backward_round_up(rows * 4);
  layout.delta = backward_round_up(rows * 4);
  if constexpr (kLists) {
    const BackwardListBuildParams& b = launch.lists;
    const int64_t mask_bh = static_cast<int64_t>(b.mask_batch) * b.mask_heads;
    const int64_t tiles = mask_bh * b.q_tiles * b.kv_tiles;
    layout.classes = backward_round_up(tiles);
    layout.q_entries = backward_round_up(tiles * 4);
    layout.q_counts = backward_round_up(mask_bh * b.q_tiles * 4);
    layout.kv_entries = backward_round_up(tiles * 4);
    layout.kv_counts = backward_round_up(mask_bh * b.kv_tiles * 4);
    if (p.ordered_dq) layout.turn_table = backward_round_up(tiles * 4);
    if (b.kind == TileMaskKind::element) {
      layout.key_bits = backward_round_up(mask_bh * b.seq_k * query_bit_words(b.seq_q) * 4);
    }
  } else if (p.ordered_dq) {
    layout.turn_table = backward_round_up(visitor_bounds_count(p) * int64_t{sizeof(VisitorBounds)});
  }
  if (p.accumulate_dq) layout.dq_accum = backward_round_up(p.dq_accum.batch_stride * p.batch * 4);
  if (p.ordered_dq)
    layout.dq_turns = backward_round_up(static_cast<int64_t>(p.batch) * p.heads_q * p.total_q_tiles * 4);
  if (fuses_dq_convert(p, Traits::kBlockM, Traits::kHeadDim)) layout.dq_done = backward_round_up(4);
  if (p.grad_rpb.data != nullptr) {
    layout.rpb_partials = backward_round_up(static_cast<int64_t>(p.kv_splits) * p.batch * p.heads_q * p.total_kv_tiles *
                                            p.rpb_entries * 4);
  }
  if (p.kv_splits > 1) {
    layout.kv_partials = backward_round_up(p.kv_splits * kv_split_partial_bytes(p, Traits::kBlockN, Traits::kHeadDim));
  }
  return layout;
}

template <class Traits, bool kLists>
int64_t backward_workspace_bytes(const FmhaBackwardLaunch& launch) {
  return backward_workspace_layout<Traits, kLists>(launch).total();
}

// Always raised (once per kernel and device): the kernels' static shared memory (schedule state) counts
// against the 48 KiB default too, so a dynamic size just under it can still fail to launch.
template <class Kernel>
cudaError_t allow_shared_memory(Kernel* kernel, int bytes) {
  return raise_dynamic_shared_memory_once(kernel, bytes);
}

// Only the policy's own kernels are instantiated in each .cu file.
template <class Traits, bool kLists>
auto dkdv_kernel_of() {
  if constexpr (kLists) {
    return &fmha_backward_dkdv_kernel<Traits, KvListSchedule, true>;
  } else {
    return &fmha_backward_dkdv_kernel<Traits, KvBoxSchedule, false>;
  }
}

template <class Traits, bool kLists>
auto dq_kernel_of() {
  if constexpr (kLists) {
    return &fmha_backward_dq_kernel<Traits, QListSchedule, true>;
  } else {
    return &fmha_backward_dq_kernel<Traits, QBoxSchedule, false>;
  }
}

// The dK/dV kernel of a backward family: the portable one here; the Hopper tier brings its own
// (fmha_sm90_backward_launch.cuh) and reuses everything else of this launcher.
template <class Traits, bool kLists>
struct PortableDkDv {
  static cudaError_t launch(const FmhaBackwardParams& p, dim3 grid, cudaStream_t stream) {
    // One instantiation serves both modes; fast mode needs one more shared tile (dS), the positional
    // bias's gradient one more (fp32 dS).
    auto* kernel = dkdv_kernel_of<Traits, kLists>();
    if (const cudaError_t status = allow_shared_memory(kernel, Traits::kSmemBytesDkDvBias); status != cudaSuccess) {
      return status;
    }
    const int smem = p.grad_rpb.data != nullptr ? Traits::kSmemBytesDkDvBias
                     : p.accumulate_dq          ? Traits::kSmemBytesDkDvFast
                                                : Traits::kSmemBytesDkDv;
    kernel<<<grid, Traits::kThreads, smem, stream>>>(p);
    return cudaGetLastError();
  }
};

template <class Traits, bool kLists, class DkDv>
cudaError_t launch_backward_kernels(FmhaBackwardLaunch& launch, char* base, const BackwardWorkspaceLayout& layout,
                                    cudaStream_t stream) {
  FmhaBackwardParams& p = launch.params;
  p.lse_log2 = reinterpret_cast<float*>(base);
  p.delta = reinterpret_cast<float*>(base + layout.lse_log2);
  if constexpr (kLists) {
    BackwardListBuildParams& b = launch.lists;
    char* at = base + layout.lse_log2 + layout.delta;
    b.classes = reinterpret_cast<uint8_t*>(at);
    at += layout.classes;
    b.q_entries = reinterpret_cast<uint32_t*>(at);
    at += layout.q_entries;
    b.q_counts = reinterpret_cast<int32_t*>(at);
    at += layout.q_counts;
    b.kv_entries = reinterpret_cast<uint32_t*>(at);
    at += layout.kv_entries;
    b.kv_counts = reinterpret_cast<int32_t*>(at);
    at += layout.kv_counts;
    b.turn_table = p.ordered_dq ? reinterpret_cast<uint32_t*>(at) : nullptr;
    at += layout.turn_table;
    b.key_bits = b.kind == TileMaskKind::element ? reinterpret_cast<uint32_t*>(at) : nullptr;
    const unsigned mask_bh = static_cast<unsigned>(b.mask_batch * b.mask_heads);
    if (b.key_bits != nullptr) {
      MaskBytes mask;
      mask.data = b.mask;
      for (int d = 0; d < 4; ++d) mask.stride[d] = b.mask_stride[d];
      mask.batches = b.mask_batch;
      mask.heads = b.mask_heads;
      mask.rows = b.seq_q;
      mask.columns = b.seq_k;
      if (const cudaError_t status = launch_mask_bits_by_key(mask, b.key_bits, stream); status != cudaSuccess) {
        return status;
      }
      p.list.key_bits = b.key_bits;
      p.list.key_words = query_bit_words(b.seq_q);
    }
    if (b.kind == TileMaskKind::block && b.block_q >= Traits::kBlockM && b.block_k >= Traits::kBlockN) {
      const int64_t tiles = int64_t{mask_bh} * b.q_tiles * b.kv_tiles;
      const auto ctas = static_cast<unsigned>((tiles + kLargeBlockClassifyThreads - 1) / kLargeBlockClassifyThreads);
      classify_large_block_tiles_kernel<Traits::kBlockM, Traits::kBlockN>
          <<<ctas, kLargeBlockClassifyThreads, 0, stream>>>(b, tiles);
    } else {
      classify_backward_tiles_kernel<Traits::kBlockM, Traits::kBlockN>
          <<<dim3(b.kv_tiles, b.q_tiles, mask_bh), 128, 0, stream>>>(b);
    }
    compact_backward_rows_kernel<Traits::kBlockM, Traits::kBlockN><<<dim3(b.q_tiles, mask_bh), 32, 0, stream>>>(b);
    compact_backward_columns_kernel<Traits::kBlockM, Traits::kBlockN><<<dim3(b.kv_tiles, mask_bh), 32, 0, stream>>>(b);
    if (p.ordered_dq) {
      rank_backward_rows_kernel<Traits::kBlockM, Traits::kBlockN><<<dim3(b.q_tiles, mask_bh), 32, 0, stream>>>(b);
    }
    if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
    p.dq_turn_table = b.turn_table;
    p.list.q_entries = b.q_entries;
    p.list.q_counts = b.q_counts;
    p.list.kv_entries = b.kv_entries;
    p.list.kv_counts = b.kv_counts;
  } else if (p.ordered_dq) {
    auto* bounds = reinterpret_cast<VisitorBounds*>(base + layout.lse_log2 + layout.delta);
    const int64_t entries = visitor_bounds_count(p);
    fmha_backward_visitor_bounds_kernel<Traits>
        <<<static_cast<unsigned>((entries + 127) / 128), 128, 0, stream>>>(p, bounds);
    if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
    p.visitor_bounds = bounds;
  }

  char* const zeroed = base + layout.dq_accum_offset();
  if (p.accumulate_dq) {
    p.dq_accum.data = zeroed;
    if (p.ordered_dq) p.dq_turns = reinterpret_cast<uint32_t*>(zeroed + layout.dq_accum);
    if (layout.dq_done > 0) p.dq_done = reinterpret_cast<uint32_t*>(zeroed + layout.dq_accum + layout.dq_turns);
  }
  if (layout.rpb_partials > 0) {
    p.rpb_partial = reinterpret_cast<float*>(zeroed + layout.dq_accum + layout.dq_turns + layout.dq_done);
  }
  if (const int64_t zero_bytes = layout.zeroed_bytes(); zero_bytes > 0) {  // multiples of 256 bytes
    if (reinterpret_cast<uintptr_t>(zeroed) % 16 == 0) {
      p.zero_fill = zeroed;
      p.zero_fill_chunks = zero_bytes / 16;
    } else if (const cudaError_t status = cudaMemsetAsync(zeroed, 0, static_cast<size_t>(zero_bytes), stream);
               status != cudaSuccess) {
      return status;
    }
  }
  const dim3 q_grid(p.total_q_tiles, p.heads_q, p.batch);
  fmha_backward_preprocess_kernel<Traits><<<q_grid, 128, 0, stream>>>(p);
  if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;

  const dim3 kv_grid(p.total_kv_tiles, p.heads_kv, p.batch);
  if (p.kv_splits > 1) {
    p.dk_partial = reinterpret_cast<float*>(base + layout.kv_partials_offset());
    p.dv_partial = p.dk_partial + p.kv_splits * kv_split_partial_bytes(p, Traits::kBlockN, Traits::kHeadDim) / 8;
  }
  const auto kv_head_groups = static_cast<unsigned>((p.heads_kv + p.heads_per_cta - 1) / p.heads_per_cta);
  if (const cudaError_t status = DkDv::launch(p, dim3(p.total_kv_tiles * p.kv_splits, kv_head_groups, p.batch), stream);
      status != cudaSuccess) {
    return status;
  }
  if (p.kv_splits > 1) {
    fmha_backward_dkdv_reduce_kernel<Traits><<<kv_grid, 128, 0, stream>>>(p);
    if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  }
  if (p.rpb_partial != nullptr) {
    const dim3 rpb_grid(static_cast<unsigned>((p.rpb_entries + 127) / 128), static_cast<unsigned>(p.heads_q));
    fmha_backward_rpb_reduce_kernel<128><<<rpb_grid, 128, 0, stream>>>(p);
    if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  }

  if (p.accumulate_dq) {
    if (p.dq_done != nullptr) return cudaSuccess;  // converted by the dK/dV kernel's last CTA
    fmha_backward_dq_convert_kernel<Traits><<<q_grid, 128, 0, stream>>>(p);
    return cudaGetLastError();
  }
  auto* dq = dq_kernel_of<Traits, kLists>();
  if (const cudaError_t status = allow_shared_memory(dq, Traits::kSmemBytesDq); status != cudaSuccess) return status;
  dq<<<q_grid, Traits::kThreads, Traits::kSmemBytesDq, stream>>>(p);
  return cudaGetLastError();
}

template <class Traits, bool kLists, class DkDv = PortableDkDv<Traits, kLists>>
void launch_fmha_backward(const FmhaBackwardLaunch& request, FmhaBackwardWorkspace caller, cudaStream_t stream) {
  FmhaBackwardLaunch launch = request;
  const BackwardWorkspaceLayout layout = backward_workspace_layout<Traits, kLists>(launch);
  if constexpr (kLists) {
    const int64_t mask_bh = static_cast<int64_t>(launch.lists.mask_batch) * launch.lists.mask_heads;
    if (launch.lists.q_tiles > 65535 || mask_bh > 65535) {
      throw Error(Status::unsupported,
                  "mask: " + std::to_string(launch.lists.q_tiles) + " query tiles and " + std::to_string(mask_bh) +
                      " mask (batch x head) slices; allowed: at most 65535 of each in the CUDA backward (sequence "
                      "length up to " +
                      std::to_string(65535 * Traits::kBlockM) + ")");
    }
  }
  void* memory = nullptr;
  char* base = nullptr;
  if (caller.data != nullptr) {
    if (caller.bytes < layout.total()) {
      throw Error(Status::invalid_argument,
                  "options.workspace_bytes: " + std::to_string(caller.bytes) + " bytes for a backward that needs " +
                      std::to_string(layout.total()) +
                      "; allowed: at least attention_backward_workspace_size() bytes, or no workspace");
    }
    base = static_cast<char*>(caller.data);
  } else {
    check_cuda(cudaMallocAsync(&memory, static_cast<size_t>(layout.total()), stream),
               "cudaMallocAsync (backward workspace)");
    base = static_cast<char*>(memory);
  }
  cudaError_t status = cudaSuccess;
  try {
    status = launch_backward_kernels<Traits, kLists, DkDv>(launch, base, layout, stream);
  } catch (...) {  // e.g. the driver refused a tensor map: free the workspace first
    if (memory != nullptr) cudaFreeAsync(memory, stream);
    throw;
  }
  if (memory != nullptr) {
    const cudaError_t freed = cudaFreeAsync(memory, stream);
    if (status == cudaSuccess) status = freed;
  }
  check_cuda(status, "fused attention backward kernel launch");
}

template <class Element, int HeadDim, bool kLists>
FmhaBackwardKernel make_fmha_backward_kernel(DType dtype) {
  using Traits = FmhaBackwardTraits<Element, HeadDim, 64, 64, 4>;
  FmhaBackwardConfig config;
  config.dtype = dtype;
  config.head_dim = HeadDim;
  config.block_m = Traits::kBlockM;
  config.block_n = Traits::kBlockN;
  config.warps = Traits::kWarps;
  config.smem_bytes_dkdv = Traits::kSmemBytesDkDvFast;  // the larger of the two modes'
  config.smem_bytes_dq = Traits::kSmemBytesDq;
  config.policy = kLists ? FmhaBackwardPolicy::tile_list : FmhaBackwardPolicy::box;
  config.architecture = 80;
  config.ctas_per_sm = 2;
  return FmhaBackwardKernel{config, &launch_fmha_backward<Traits, kLists>, &backward_workspace_bytes<Traits, kLists>};
}

}  // namespace attnkit::cuda::fmha
