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
// per 128 keys), at the backward's own gathered rate. The smaller estimate wins; a tie goes to tiles. No fixed
// density threshold (DESIGN §3): for a uniformly scattered broadcast mask at S 8192, H 16 the default rates put the
// forward's crossover near 4.1 % true entries at D 64 and 0.8 % at D 128 (measured: the scattered path ahead at
// 3 % at D 64, behind at 1 % at D 128) and the backward's near 4.5 % and 3.3 % (measured: the scattered path ahead
// at 3 % at D 64 and at 1 % at D 128); masks whose entries cluster into fewer tiles move the crossover lower. The rates
// are in one place (ElementPathRates) so that measured figures (bench/bench_sparse_mask.py) can replace them.
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

// Device rates behind the estimates (only their ratios decide) and the scattered kernels' shape, fitted to one
// H100 run (2026-11-28, bf16, B1 H16 S8192, uniformly scattered broadcast masks plus the diagonal, docs/perf.md
// "Scattered element masks", after the residue-dealt lists and the lazy softmax base): the tile path with every
// tile partial takes 0.730-0.757 ms forward at D 64 and 0.945 at D 128, 2.69-2.76 and 4.50 ms backward; the
// scattered path 0.245 / 0.409 / 0.694 ms forward at D 64 and 0.1 / 1 / 3 % true entries, 0.998 at D 128 and 1 %,
// backward 0.869 / 1.344 / 2.148 ms at D 64 and 2.766 at D 128 and 1 %. With these rates every one of those rows is
// within 8 % and on the measured side of the crossover.
struct ElementPathRates {
  double tile_flops_per_second = 400e12;                // forward, D, Dv <= 64
  double tile_flops_per_second_wide = 610e12;           // forward, wider heads
  double tile_flops_per_second_backward = 300e12;       // the backward's 2.5x FLOPs, D, Dv <= 64
  double tile_flops_per_second_backward_wide = 355e12;  // ... wider heads
  double partial_tile_factor = 1.05;
  // The backward's partial tiles read a key-major bit matrix packed once per call (about 1.2x a full tile).
  double partial_tile_factor_backward = 1.19;
  double gathered_flops_per_second = 240e12;
  double gathered_flops_per_second_backward = 245e12;
  double l2_bytes_per_second = 6.5e12;
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
