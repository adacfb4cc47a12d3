// Problem descriptions for fused attention: dense, causal, neighborhood (1/2/3-D), block mask and
// element mask. Layouts (DESIGN §2): Q [B, *tokens, Hq, D], K [B, *tokens_kv, Hkv, D],
// V [B, *tokens_kv, Hkv, Dv], O [B, *tokens, Hq, Dv], LSE [B, *tokens, Hq] (fp32, natural log).
// Tokens are numbered row-major over their extents; that flat index is the "sequence position" used
// by causal, block and element masks.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include "attnkit/export.hpp"

#include "attnkit/backend.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit {

constexpr int kMaxTokenDims = 3;

// One dimension of a neighborhood (DESIGN §3): window w, dilation d, stride s, causal c.
struct NeighborhoodDim {
  int64_t kernel_size = 1;
  int64_t dilation = 1;
  int64_t stride = 1;
  bool causal = false;
};

enum class MaskKind : int32_t { none = 0, causal = 1, neighborhood = 2, block = 3, element = 4 };

// Which diagonal a dense causal mask keeps when Sq != Sk. top_left: query i sees keys [0, i]
// (torch SDPA's is_causal). bottom_right: query i sees keys [0, i + Sk - Sq] (FlashAttention >= 2.1,
// decoding with a KV cache). Identical when Sq == Sk.
enum class CausalAlignment : int32_t { top_left = 0, bottom_right = 1 };

// How a CUDA call runs an element mask (kind == element); only speed depends on it, never results.
//   tiles: the tensor-core tile-list path: each (Q tile, KV tile) is classified empty, full or partial and
//     every non-empty tile is computed in full, partial ones with the mask's bits. A mask with a true entry
//     in every tile (scattered, or dense-ish) visits every tile: the masked dense kernel.
//   scattered: the sparse path whose work follows the true entries (per query row, the attended keys),
//     for masks whose true entries are few and scattered so that tile skipping saves nothing. A call
//     forcing it where it cannot run (dtype, head dim, device) raises Status::unsupported saying why.
//   automatic: chosen per mask tensor from its measured density (true entries, non-empty tiles) by a cost
//     model (docs/design.md, "Element-mask paths"); the tiles path where the scattered path cannot run.
// The CPU backend has one element-mask path and ignores this choice.
enum class ElementMaskPath : int32_t { automatic = 0, tiles = 1, scattered = 2 };

struct AttentionMask {
  MaskKind kind = MaskKind::none;
  CausalAlignment causal_alignment = CausalAlignment::top_left;
  // kind == neighborhood: one entry per token dimension (dims = rank of *tokens); Q and KV tokens equal.
  int32_t dims = 0;
  std::array<NeighborhoodDim, kMaxTokenDims> neighborhood{};
  // kind == block: bool [B|1, Hq|1, ceil(Sq/block_q), ceil(Sk/block_k)]; a true block is attended in full.
  TensorView block_mask{};
  int64_t block_q = 0;
  int64_t block_k = 0;
  // kind == element: bool [B|1, Hq|1, Sq, Sk]; true = attend.
  TensorView element_mask{};
  // kind == element: which CUDA path runs it (see ElementMaskPath); anything but automatic only with
  // kind == element.
  ElementMaskPath element_path = ElementMaskPath::automatic;
  // kind == neighborhood, optional: relative positional bias (NATTEN <= 0.17's `rpb`), float32 or q's dtype,
  // [Hq, 2*K_0-1, ..., 2*K_{dims-1}-1]. The score of query i and key j gets
  // rpb[h, (j_0 - i_0)/d_0 + K_0 - 1, ...] added after scaling (j_n - i_n is a multiple of the dilation d_n
  // inside a window). Allowed with stride 1 and no causal dimension, as in NATTEN.
  TensorView rpb{};
};

ATTNKIT_API AttentionMask causal_mask(CausalAlignment alignment = CausalAlignment::top_left);
// kernel_size/dilation/stride/causal per token dimension; missing trailing lists default to 1/1/false.
ATTNKIT_API AttentionMask neighborhood_mask(std::initializer_list<int64_t> kernel_size,
                                            std::initializer_list<int64_t> dilation = {},
                                            std::initializer_list<int64_t> stride = {},
                                            std::initializer_list<bool> causal = {});
ATTNKIT_API AttentionMask block_sparse_mask(TensorView block_mask, int64_t block_q, int64_t block_k);
ATTNKIT_API AttentionMask element_sparse_mask(TensorView element_mask,
                                              ElementMaskPath path = ElementMaskPath::automatic);

struct AttentionForward {
  TensorView q, k, v;
  TensorView out;
  TensorView lse;               // optional output
  std::optional<double> scale;  // default 1/sqrt(D)
  AttentionMask mask{};
};

// Gradients of AttentionForward. `out` and `lse` are the forward's outputs (lse is required).
// Rows that attend no key get zero gradients.
struct AttentionBackward {
  TensorView q, k, v, out, lse, grad_out;
  TensorView grad_q, grad_k, grad_v;  // outputs, same shapes and dtypes as q, k, v
  std::optional<double> scale;
  AttentionMask mask{};
  // GPU only. false (default, fast): dQ partials are added with fp32 atomics, so dQ may differ in its last
  // bits between runs (dK, dV never do). true: every run bit-identical. On Hopper (compute capability 9.0)
  // the same partials are added in a fixed order, the KV tiles of a query tile taking turns: about 1.3x
  // the fast mode's time on dense and causal rows, 1.5-1.7x on 2-D / 3-D neighborhoods (docs/perf.md);
  // elsewhere a separate dQ kernel recomputes the scores.
  bool deterministic = false;
  // KV-parallel splitting (CUDA): the dK/dV work of each KV tile is shared by `kv_splits` CTAs, each over
  // a contiguous part of the tile's Q-tile visits; their fp32 partial dK and dV go to the workspace and
  // are summed in a fixed order (deterministic in both modes). 0 = automatic: split while it shortens
  // the dK/dV kernel by the cost model (a grid that leaves SMs idle), within split_workspace_limit; 1 =
  // never. At most kMaxBackwardKvSplits. The CPU backend ignores kv_splits and split_workspace_limit.
  int32_t kv_splits = 0;
  // Workspace bytes the automatic choice may spend on partials (kv_splits == 0): -1 = the default bound
  // kDefaultSplitWorkspaceBytes, 0 = never split automatically. An explicit kv_splits is not limited.
  int64_t split_workspace_limit = -1;
  // Optional output with mask.rpb: the gradient of the positional bias, shape and dtype of mask.rpb (summed
  // over the batch and every query). Absent: the bias's gradient is not computed.
  TensorView grad_rpb{};
};

inline constexpr int32_t kMaxBackwardKvSplits = 128;
inline constexpr int64_t kDefaultSplitWorkspaceBytes = int64_t{64} << 20;

ATTNKIT_API void attention_forward(const AttentionForward& problem, const RunOptions& options = {});
ATTNKIT_API void attention_backward(const AttentionBackward& problem, const RunOptions& options = {});

// Bytes of device scratch the call needs with these options (0 when none); pass that much memory as
// RunOptions::workspace to keep the call free of allocations (frameworks, CUDA graphs).
ATTNKIT_API int64_t attention_forward_workspace_size(const AttentionForward& problem, const RunOptions& options = {});
ATTNKIT_API int64_t attention_backward_workspace_size(const AttentionBackward& problem, const RunOptions& options = {});

}  // namespace attnkit
