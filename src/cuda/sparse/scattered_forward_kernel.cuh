// Forward kernel of the scattered-sparse path: gathered tensor-core attention over a bit-packed mask (the form
// staged with cp.async by every thread; on sm_90 at width 64 a producer warp stages with TMA instead:
// scattered_tma_pipeline.cuh).
//
// Algorithm. A CTA owns Warps x 16 query rows of one (batch, query head); each warp owns 16 of them and keeps
// their Q fragments, the fp32 output accumulator and the running max / sum in registers. The CTA streams the
// keys of its KV head in tiles of Tile keys (K and V staged with cp.async, two stages; a tile none of the CTA's
// rows attends is neither loaded nor walked: stream_listed_tiles). Per tile each warp copies the pre-pass's list
// of the union U of the keys its 16 rows attend (TileLists, built once per mask slice, not per head) next to the
// tile and walks it 16 keys at a time (ScatteredForwardRows, scattered_forward_rows.cuh: S = Q K_U^T on gathered
// K rows, the masked online softmax with a lazy base, O += P V_U on gathered V rows).
//
// Counts per (batch, head), with density rho and u = 1 - (1 - rho)^16 the chance that a key is in a warp's union
// (u ~ 0.15 at 1 %): tensor-core FLOPs 2 Sq Sk u (D + Dv) (most of a step's 16 x 16 products are masked: the
// price of keeping the warp in lockstep without divergence); shared-memory reads 2 (D + Dv) bytes per union key
// and warp, Sq Sk u 2 (D + Dv) / 16 in all; L2 -> shared traffic (Sq / (16 Warps)) Sk 2 (D + Dv) bytes (every
// CTA reads its whole KV head once); mask data 4 bytes per padded union entry plus 4 per tile and warp (the
// lists; reading the bit words would be Sq Sk / 8 bytes per head). At 1 %, Sq = Sk = 8192, H 16, D = Dv = 64,
// Warps 16: 41 GFLOP of mma, 2.6 GB of shared reads, 1.07 GB of K/V tiles from L2 (the bound on H100), about
// 50 MB of lists (the words: 134 MB).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/sparse/scattered_forward_rows.cuh"
#include "cuda/sparse/scattered_gather.cuh"
#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {

template <int Width>
inline constexpr int kScatteredTile = Width <= 64 ? 256 : 128;

// The shape every scattered kernel shares: Warps warps of 16 rows, tiles of kTile columns staged as
// [kTile][Width] elements, and two list buffers of kListEntries entries per warp (a padded list never
// exceeds its tile).
template <int Width, int Warps>
struct ScatteredTileShape {
  static constexpr int kTile = kScatteredTile<Width>;
  static constexpr int kThreads = Warps * 32;
  static constexpr int kRows = Warps * 16;
  static constexpr int kListEntries = kTile;
  static constexpr int kTileElements = kTile * Width;
};

template <class Element, int Width, int Warps>
struct ScatteredForwardTraits : ScatteredTileShape<Width, Warps> {
  using Shape = ScatteredTileShape<Width, Warps>;
  static constexpr int kSharedBytes =
      2 * 2 * Shape::kTileElements * int(sizeof(Element)) + Warps * 2 * Shape::kListEntries * 4;
};

// The forward (Rows ScatteredForwardRows, Params ScatteredForwardParams) and the dQ kernel (ScatteredGradQRows,
// ScatteredBackwardParams, scattered_backward_dq_kernel.cuh): rows of type Rows (load, step, store) walk the K / V
// tiles of their KV head.
template <class Element, int Width, int Warps, class Rows, class Params>
__global__ void __launch_bounds__(Warps * 32, 1) scattered_rows_kernel(const Params p) {
  using Traits = ScatteredForwardTraits<Element, Width, Warps>;
  constexpr int kTile = Traits::kTile;
  extern __shared__ __align__(256) unsigned char shared[];  // tiles at multiples of their row size
  Element* tiles = reinterpret_cast<Element*>(shared);      // [stage][K, V][kTile][Width]
  const int thread = static_cast<int>(threadIdx.x);
  const int warp = thread / 32;
  const int lane = thread % 32;
  uint32_t* lists = reinterpret_cast<uint32_t*>(tiles + 4 * Traits::kTileElements) + warp * 2 * Traits::kListEntries;

  const int32_t batch = static_cast<int32_t>(blockIdx.z);
  const int32_t head = static_cast<int32_t>(blockIdx.y);
  const int32_t kv_head = head / p.heads_per_kv;
  const int32_t first_row = static_cast<int32_t>(blockIdx.x) * Traits::kRows + warp * 16;

  Rows rows;
  rows.load(p, batch, head, first_row, lane);
  stream_key_value_steps<Element, Width, kTile, Traits::kThreads>(
      tiles, lists, p, batch, head, kv_head, first_row / 16, thread, lane,
      [&](uint32_t k_address, uint32_t v_address, const StepEntries& entries) {
        rows.step(p.scale_log2, k_address, v_address, entries, lane);
      });
  rows.store(p, batch, head, first_row, lane);
}

}  // namespace attnkit::cuda::sparse
