// The automatic choice of an element mask's CUDA path (ElementMaskPath, attention.hpp): a cost model over
// what a small device pass measures once per mask tensor (its true entries, and its non-empty and full
// tiles for the tile path's tile shape). A pure function of its inputs, so it is the same on every run and
// testable without a GPU; the CUDA plans (cuda/mask_path) measure and cache, this file only decides.
//
// The model (docs/design.md, "Element-mask paths"), per (batch, head), with rho a slice's fraction of true
// entries:
//   tiles:     every non-empty (Q tile, KV tile) is a full tile product on tensor cores (2 bm bn (D + Dv)
//              FLOPs); a partial tile (some entries false) costs partial_tile_factor times a full one
//              (partial_tile_factor_backward in the backward; its bits or mask bytes are loaded and applied).
//   scattered: the kernels of cuda/sparse (their file comments give these counts): a warp of 16 query rows
//              walks the union of the keys its rows attend, u = 1 - (1 - rho)^16 of them for uniformly
//              scattered entries, on tensor cores: 2 Sq Sk u (D + Dv) FLOPs at a gathered rate; each CTA of
//              R rows streams its KV head from L2 to shared memory: (Sq / R) Sk (D + Dv) elements.
//   both:      the byte mask read once per call (classified or packed to bits), Q, K, V, O streamed.
// Backward: tiles 2.5x the forward's FLOPs (DESIGN §5's count); scattered the dQ kernel (2 Sq Sk u (2D + Dv)
// FLOPs, K/V streamed per 128 query rows) plus the dK/dV kernel (2 Sq Sk u (2D + 2Dv) FLOPs, Q/dO streamed
// per 128 keys). The smaller estimate wins; a tie goes to tiles. No fixed density threshold (DESIGN §3):
// for a uniformly scattered broadcast mask at S 8192, H 16, D = Dv = 64 the default rates put the crossover
// near 1.5 % true entries at D 64 and 0.15 % at D 128 (forward; measured: between 1 and 3 %, and between 0.1
// and 1 %); the backward's crossover lies between 1 and 3 % at D 64 as well; masks whose entries cluster
// into fewer tiles move the crossover lower.
// The rates are estimates for an H100-class GPU, in one place (ElementPathRates) so that measured figures
// (bench/bench_sparse_mask.py) can replace them.
#pragma once
#include <cstdint>

#include "attnkit/attention.hpp"

namespace attnkit::detail {

// What the measuring pass reports over every mask slice ([B|1] x [Hq|1] of the mask tensor).
struct ElementMaskStats {
  int64_t slices = 0;          // mask batch x mask heads
  int64_t true_entries = 0;    // over every slice
  int64_t nonempty_tiles = 0;  // (slice, Q tile, KV tile) with at least one true entry
  int64_t full_tiles = 0;      // of those, tiles whose every in-sequence entry is true
};

// The call's sizes as the model needs them.
struct ElementPathProblem {
  int64_t batch = 0;
  int64_t heads_q = 0;
  int64_t seq_q = 0;
  int64_t seq_k = 0;
  int64_t head_dim = 0;
  int64_t head_dim_v = 0;
  int64_t element_bytes = 2;  // of q, k, v
  bool backward = false;
  int block_m = 0;  // the tile path's tile shape (the tiles the stats count)
  int block_n = 0;
};

// Device rates behind the estimates (only their ratios decide) and the scattered kernels' shape. The tile
// rate is what the tile kernels reach on a dense bf16 D64 problem (S 8192, H 16: 0.81 ms on an H100 and on
// an H200); the partial-tile factor is the measured cost of an all-partial scattered mask over that (D 64:
// 0.851 / 0.804 ms, D 128: 1.073 / 1.072 ms on an H200, the mask classified with 16-byte loads). The gathered rate and
// the L2 streaming rate are fitted to the scattered kernels' times on an H200 (2026-11-26, bf16, B1 H16 S8192,
// uniformly scattered masks, docs/perf.md): forward D 64 0.35 / 0.78 / 1.39 / 2.21 ms and D 128 0.97 / 1.94 / 3.36
// / 5.25 ms at 0.1 / 1 / 3 / 10 % true entries; these rates put every measured row on the right side of the tile path's
// time (estimates within about 15 %).
struct ElementPathRates {
  double tile_flops_per_second = 330e12;       // D, Dv <= 64
  double tile_flops_per_second_wide = 520e12;  // wider heads (unmasked D 128: 1.05 ms on an H200)
  double partial_tile_factor = 1.05;
  // The backward's partial tiles read a key-major bit matrix packed once per call: 1.4x a full tile on an H200
  // (S 8192, H 16, D 64: 3.66 ms against an unmasked backward of 2.63 ms).
  double partial_tile_factor_backward = 1.4;
  double gathered_flops_per_second = 100e12;
  double l2_bytes_per_second = 4.5e12;
  double memory_bytes_per_second = 3.0e12;
  int union_rows = 16;                // query rows (keys in dK/dV) sharing one union list: a warp's
  int forward_cta_rows_narrow = 256;  // query rows per forward CTA for D, Dv <= 64
  int forward_cta_rows_wide = 128;    // ... for wider heads
  int backward_cta_rows = 128;        // rows (keys) per dQ (dK/dV) CTA
};

struct ElementPathCosts {
  double tiles_seconds = 0;
  double scattered_seconds = 0;
};

ElementPathCosts element_path_costs(const ElementPathProblem& problem, const ElementMaskStats& stats,
                                    const ElementPathRates& rates = {});

// tiles or scattered (never automatic): the path with the smaller estimate, tiles on a tie.
ElementMaskPath choose_element_path(const ElementPathProblem& problem, const ElementMaskStats& stats,
                                    const ElementPathRates& rates = {});

}  // namespace attnkit::detail
