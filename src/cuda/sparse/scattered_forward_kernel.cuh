// Forward kernel of the scattered-sparse path: gathered tensor-core attention over a bit-packed mask.
//
// Algorithm. A CTA owns Warps x 16 query rows of one (batch, query head); each warp owns 16 of them and keeps
// their Q fragments, the fp32 output accumulator and the running max / sum in registers. The CTA streams the
// keys of its KV head in tiles of Tile keys (K and V staged with cp.async, two stages; a tile none of the CTA's
// rows attends is neither loaded nor walked: stream_listed_tiles). Per tile each warp copies the pre-pass's list
// of the union U of the keys its 16 rows attend (TileLists, built once per mask slice, not per head) next to the
// tile and walks it 16 keys at a time: S = Q K_U^T (ldmatrix of the gathered K rows, mma m16n8k16), entries
// whose bit is clear set to -inf, online softmax in base 2 (scale * log2 e folded into the exponent's fma) with
// a lazy base: the rows' maxima are exchanged and the output rescaled only in a step where some score exceeds
// its row's base by more than kRescaleSlack (a warp vote decides), O += P V_U with the gathered V rows loaded
// transposed. A row without any key ends with O = 0 and LSE = -inf.
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

// How far (log2 units) a score may exceed its row's base before the base moves: probabilities up to 2^8
// (exact in fp16 / bf16 and fp32), so most steps skip the row-max exchange and the rescaling.
inline constexpr float kRescaleSlack = 8.0f;

template <class Element, int Width, int Warps>
__global__ void __launch_bounds__(Warps * 32, 1) scattered_forward_kernel(const ScatteredForwardParams p) {
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

  uint32_t q[Width / 16][4];
  load_a_fragments<Element, Width>(q, p.q, batch, head, first_row, p.seq_q, p.head_dim, lane);
  float acc[Width / 8][4];
  zero_c_fragments<Width>(acc);
  // row_max: per row, the base (log2 units, scale folded in) of every probability so far; raw_limit: the
  // raw score above which the base must move, kRescaleSlack above it.
  float row_max[2] = {-INFINITY, -INFINITY};
  float raw_limit[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  const int g = lane / 4;
  const int t = lane % 4;

  auto step = [&](uint32_t k_address, uint32_t v_address, const StepEntries& entries) {
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    gathered_scores<Element, Width>(s, q, k_address, entries, lane);
    float block_max[2] = {-INFINITY, -INFINITY};
    for_each_step_entry(entries, lane, [&](int block, int i, uint32_t, bool attended) {
      s[block][i] = attended ? s[block][i] : -INFINITY;
      block_max[i >> 1] = fmaxf(block_max[i >> 1], s[block][i]);
    });
    if (__any_sync(kFullWarp, block_max[0] > raw_limit[0] || block_max[1] > raw_limit[1])) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        block_max[half] = fmaxf(block_max[half], __shfl_xor_sync(kFullWarp, block_max[half], 1));
        block_max[half] = fmaxf(block_max[half], __shfl_xor_sync(kFullWarp, block_max[half], 2));
        const float new_max = fmaxf(row_max[half], block_max[half] * p.scale_log2);
        if (new_max > row_max[half]) {
          const float rescale = fast_exp2(row_max[half] - new_max);
          row_sum[half] *= rescale;
#pragma unroll
          for (int i = 0; i < Width / 8; ++i) {
            acc[i][2 * half] *= rescale;
            acc[i][2 * half + 1] *= rescale;
          }
          row_max[half] = new_max;
          raw_limit[half] = (new_max + kRescaleSlack) / p.scale_log2;
        }
      }
    }
    const float base[2] = {row_max[0] == -INFINITY ? 0.0f : row_max[0], row_max[1] == -INFINITY ? 0.0f : row_max[1]};
#pragma unroll
    for (int block = 0; block < 2; ++block) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[block][i] = fast_exp2(fmaf(s[block][i], p.scale_log2, -base[i >> 1]));
        row_sum[i >> 1] += s[block][i];
      }
    }
    uint32_t probabilities[4];
    pack_a_fragment<Element>(probabilities, s);
    gathered_accumulate<Element, Width>(acc, probabilities, v_address, entries, lane);
  };
  stream_key_value_steps<Element, Width, kTile, Traits::kThreads>(tiles, lists, p, batch, head, kv_head, first_row / 16,
                                                                  thread, lane, step);

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    row_sum[half] += __shfl_xor_sync(kFullWarp, row_sum[half], 1);
    row_sum[half] += __shfl_xor_sync(kFullWarp, row_sum[half], 2);
  }
  const float inverse_lo = row_sum[0] > 0.0f ? 1.0f / row_sum[0] : 0.0f;
  const float inverse_hi = row_sum[1] > 0.0f ? 1.0f / row_sum[1] : 0.0f;
  store_c_fragments<Element, Width>(acc, p.out, batch, head, first_row, p.seq_q, p.head_dim_v, inverse_lo, inverse_hi,
                                    lane);
  if (p.lse.data != nullptr && t == 0) {
    float* lse = static_cast<float*>(p.lse.data);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int32_t row = first_row + g + 8 * half;
      if (row >= p.seq_q) continue;
      const float value =
          row_sum[half] > 0.0f ? (row_max[half] + log2f(row_sum[half])) * 0.69314718055994531f : -INFINITY;
      lse[p.lse.offset(batch, row, head)] = value;
    }
  }
}

}  // namespace attnkit::cuda::sparse
