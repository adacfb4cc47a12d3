// The GEMM kernels of this build, in selection order: the narrow fp32 kernel for decode-like M (gemm_narrow.hpp,
// its own tier), the Hopper rows of cmake/attnkit_gemm_kernels.cmake, then its SM80 rows, then the SIMT fallbacks
// (gemm_simt.hpp). A problem runs on a row of its dtype and math
// whose A / B majorness match and that accepts the shape on the device, directly or with its misaligned
// operands (or an N that is not a multiple of 8) staged (gemm_staging.hpp). The first such row fixes the tier
// and math (Hopper before SM80, TF32 before 3xTF32); among the accepting rows of that tier and math
// (choose_gemm_candidate): the split-K row (gemm_split_k.hpp: batch 1, small grids, a K that divides into
// slices, at least three slices a tile) whose tiles pad the output least (decode-like M: the swapped rows' 64
// columns), else the data-parallel row of the smallest waves estimate
// (gemm_tile_cost: small tiles for small grids, 128 x 256 for large ones), replaced by the first stream-K row
// when its output tiles would occupy fewer than half the SMs, or when the stream-K row's evenly spread work costs
// less (a partial last wave: gemm_stream_k_cost); the SIMT entry accepts everything.
// ATTNKIT_GEMM_CONFIG=<name> forces an entry (tests, benchmarks).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/gemm/gemm_kernel.hpp"
#include "cuda/gemm/gemm_staging.hpp"

namespace attnkit::cuda::gemm {

inline constexpr const char* kForcedGemmConfigVariable = "ATTNKIT_GEMM_CONFIG";

const std::vector<const GemmKernel*>& gemm_kernels();

// The device's limits, read once per device.
const GemmDevice& gemm_device(int index);

// Whether code built for `architecture` (0 any, 80 SM80+, 90 sm_90a) runs on compute capability `capability`.
bool gemm_architecture_runs_on(int architecture, int capability);

// Whether `kernel` computes problems of `shape`'s dtype with this math choice and majorness (not the
// alignment or device checks: GemmKernel::refusal).
bool gemm_kernel_matches(const GemmKernel& kernel, const GemmShape& shape, bool allow_tf32);

// Whether `kernel`, a TF32 Hopper row for a K-major B, runs `shape` (fp32, A as the row wants it, B MN-major)
// with B transposed into the workspace (transposed_b_staging). The automatic choice takes such rows instead of
// the MN-major ones where gemm_transposed_b_pays; a forced config or the tuner may take them anywhere.
bool gemm_kernel_transposes_b(const GemmKernel& kernel, const GemmShape& shape, bool allow_tf32);

// The waves cost model. A data-parallel row runs ceil(M / tile_m) * ceil(N / tile_n) * batch output tiles,
// `multiprocessors` at a time: its time is about waves * (the work of one tile, tile_m * tile_n * K) / the
// fraction of peak its tile sustains (gemm_tile_efficiency). Small problems leave most SMs idle on large tiles
// (1024^3: 32 tiles of 128 x 256 on 132 SMs), large ones pay the small tiles' lower efficiency. A tile whose
// epilogue does not overlap a main loop (every schedule but ping-pong) also pays the epilogue, counted as
// kGemmEpilogueDepth more of K: what decides short-K problems (batched 64 x 128 x 4096 x 128: K = 128).
// The fraction of the tensor cores' peak a tile of tile_m x tile_n sustains, relative to 128 x 256.
double gemm_tile_efficiency(int tile_m, int tile_n);
// The epilogue's time in K of the same tile's main loop, fitted to three bf16 shapes on an H200 (graph time per
// call, cooperative 128 x 256 against ping-pong 64 x 128): batched 64 x 128 x 4096 x 128 55.8 against 37.3 us (the
// store-bound problem ping-pong overlaps), 32 x 512 x 512 x 128 11.0 against 11.8, 4096 x 4096 x 256 21.6 against
// 24.7. The waves model sends both K = 128 shapes to ping-pong for any depth above 32 (their wave counts are in the
// same 4 : 1 ratio) and keeps K = 256 on the larger tile up to 64: 48 takes the first's 33 % and gives up the second's
// 7 %.
inline constexpr int kGemmEpilogueDepth = 48;
// The same for the wide-tile rows' staged epilogue (shared memory, then 16-byte stores, nothing overlapped), fitted to
// bf16 3072 x 3072 x 1024 on an H200 (docs/perf.md, session 52): two waves of 192 x 192 ran 34.8-35.7 us, three of
// 128 x 192 33.8-33.9, where 48 rated the former lower; with 160 the rule keeps the wide rows on one-wave grids and
// on 3072^3, 6144 x 3072 x 3072 and 5120^3, where they measured level with or ahead of the other rows.
inline constexpr int kGemmStagedEpilogueDepth = 160;
// Ping-pong rows (the rows whose epilogue overlaps a main loop) on K beyond kGemmPingPongShortK: a CTA's two consumer
// warp groups take one tile each, so an SM's tiles run as pairs (both warp groups alternating on the tensor cores, at
// gemm_tile_efficiency) and at most one lone tile, which runs at kGemmPingPongLoneEfficiency, and every tile pays
// kGemmPingPongTileDepth of K for its pipeline's ramp. Fitted to bf16 grids on an H200 (docs/perf.md, session 54,
// graph time): three 64 x 128 tiles an SM lost to one wave of 128 x 256 (1792^3 27.0 against 22.3 us), five or six to
// one and a half waves of 128 x 192 or 128 x 256 (2304 x 2304 x 1024 28.1 against 21.7, 2304 x 2816 x 1024 33.0
// against 27.1), while one pair an SM kept ahead of one wave of 192 x 96 (512 x 4096 x 4096 28.0 against 36.1). At
// K <= 512 stores bound the problem and the overlap is what counts (batched 64 x 128 x 4096 x 128: 37.3 against 128 x
// 256's 55.8 us): the waves and gemm_tile_efficiency as for the other rows.
inline constexpr int kGemmPingPongShortK = 512;
inline constexpr double kGemmPingPongLoneEfficiency = 0.59;
inline constexpr int kGemmPingPongTileDepth = 128;
// A row's own factor on gemm_tile_efficiency, 1 but for the TF32 rows for A K-major and B MN-major (C^T = B^T A^T,
// B^T through registers: CUTLASS's register-sourced collective), whose loads per multiply-add double as C's tile rows
// halve: forced on 4096^3 (H100, docs/perf.md) the 128 x 128 row ran 0.50x cuBLAS where the 256 x 128 one ran 0.89x,
// 0.56 of it where the shape factors put 0.9, so tiles of fewer than 256 rows of C take 0.62.
double gemm_row_efficiency(const GemmKernel& kernel);
// The estimate above (arbitrary units; only comparisons mean anything), with a row's own factor; ping-pong rows
// (overlaps_epilogue) by pairs of tiles beyond kGemmPingPongShortK.
double gemm_tile_cost(int64_t m, int64_t n, int64_t k, int64_t batch, int tile_m, int tile_n, int multiprocessors,
                      bool overlaps_epilogue = false, double row_efficiency = 1.0, bool staged_epilogue = false);

// A stream-K row's estimate in gemm_tile_cost's units: its tiles' work (the epilogue depth included) spread evenly over
// the SMs, times kStreamKOverhead, the cost of its partial tiles' fix-up against a data-parallel tile. Fitted to bf16
// squares on an H200 (docs/perf.md, session 48; graph us per unit of the model: the 128 x 256 cooperative row
// 0.36-0.39 on nine shapes, the 128 x 128 stream-K row 0.39-0.43: 1.1 of it). The rule takes the stream-K row only
// where it has kStreamKMinTilesPerSm tiles per SM or more: at 1536^3 (144 tiles of 128 x 128) it ran 8 % slower than
// the ping-pong row whatever the estimate said.
inline constexpr double kStreamKOverhead = 1.1;
inline constexpr int kStreamKMinTilesPerSm = 2;
// Where that rule picks stream-K, a data-parallel row whose tiles fill kStreamKYieldingWaves to 2 waves runs instead:
// its last wave is at least 40 % full, and stream-K's fix-ups cost more than that wave leaves idle. Measured on 14
// such grids (bf16, H200, docs/perf.md, session 50), the data-parallel row won 13 (2048 x 2304 x 1024 21.3 against
// 27.1 us, 2304^3 40.5 against 47.4, 2560^3 on 128 x 256 61.3 against 63.4) and lost 768 x 6144 x 4096 by 5-9 %.
inline constexpr double kStreamKYieldingWaves = 1.4;
// Stream-K also where its tiles fill more than half the SMs but no more than all of them, K is at least
// kStreamKOneWaveMinK, and the chosen data-parallel row needs more tiles than SMs (ping-pong's pairs): bf16 on an H200
// (docs/perf.md, session 54), graph us against the ping-pong row: 1024 x 2048 x 2048 16.2 against 21.6, 1024 x 1792 x
// 2048 15.5 against 21.6, 640 x 2048 x 4096 25.5 against 29.3, 1280 x 1280 x 2560 18.3 against 20.0, 256 x 8192 x 4096
// 28.2 against 30.2, level on three more; with half the SMs or fewer (256 x 4096 x 4096, 1024 x 1024 x 4096: 64 tiles)
// it ran 1.5-1.8x slower than one ping-pong tile an SM, as at K 1536 on 144 tiles (1536^3).
inline constexpr int64_t kStreamKOneWaveMinK = 2048;
double gemm_stream_k_cost(int64_t m, int64_t n, int64_t k, int64_t batch, int tile_m, int tile_n, int multiprocessors);

// A row that accepts the problem, as the rule sees it.
struct GemmCandidate {
  int tile_m = 0;
  int tile_n = 0;
  bool split_k = false;
  bool stream_k = false;
  bool overlaps_epilogue = false;
  bool token_tile = false;       // a Hopper data-parallel tile smaller than 64 x 128 (gemm_token_tile)
  double efficiency = 1.0;       // gemm_row_efficiency
  bool staged_epilogue = false;  // its epilogue costs kGemmStagedEpilogueDepth of K
};

// Hopper data-parallel tiles smaller than 64 x 128 (token tiles: 64 x 32 in clusters of 1 x 2, whose pair shares the
// tokens' tile) serve one case only: a batch-1 problem whose M fills one tile row to more than three quarters and
// whose tiles fill 0.9 to 1.0 of one wave (64 x 4096 x K: 128 tiles). It runs there in one launch, ahead of split-K
// and its second launch (H200, docs/perf.md: bf16 64 x 4096 x 4096 13.4 against 14.2 us by CUDA graph, per call
// 0.87-0.96x cuBLAS against 0.69-0.74x); elsewhere the waves model below never sees them.
bool gemm_token_tile(const GemmKernel& kernel);
bool gemm_token_tile_fills_one_wave(int64_t m, int64_t n, int64_t batch, int tile_m, int tile_n, int multiprocessors);

// The index in `accepted` (rows of one tier and math that accept the problem, in table order) of the row the
// problem runs on, -1 when empty: a token-tile row that fills one wave (above; the first); else the split-K row of
// the least padded output (tiles x tile_m x tile_n; the first of equal ones); else the data-parallel row of the
// smallest gemm_tile_cost (the first of equal ones), unless its tiles (times the batch) would occupy fewer than half
// the SMs and a stream-K row accepts (the first), or the first stream-K row fills one wave of more than half the SMs
// where that row needs more (kStreamKOneWaveMinK), or it has kStreamKMinTilesPerSm tiles per SM and
// a smaller gemm_stream_k_cost and no data-parallel row fills kStreamKYieldingWaves to 2 waves (then the cheapest of
// those); else the first stream-K row. Pure: tests call it on the CPU.
int choose_gemm_candidate(int64_t m, int64_t n, int64_t k, int64_t batch, const std::vector<GemmCandidate>& accepted,
                          int multiprocessors);

// A kernel and the operands it needs staged (none when it addresses the problem directly).
struct GemmChoice {
  const GemmKernel* kernel = nullptr;
  GemmStaging staging;
  // The kernel's name, with "+staged" when operands are staged (the plan's config name).
  std::string name() const;
};

// Whether `kernel` computes `shape` on `device`, directly or staged (with B transposed where the kernel's B
// majorness is not the problem's: gemm_kernel_transposes_b): the staging in *staging; else why not.
std::string gemm_kernel_refusal(const GemmKernel& kernel, const GemmShape& shape, const GemmDevice& device,
                                GemmStaging* staging);

// The entry a problem runs on (forced by ATTNKIT_GEMM_CONFIG, else the rule above).
// Throws Status::unsupported when the forced entry is unknown or refuses the problem.
GemmChoice select_gemm_kernel(const GemmShape& shape, const GemmDevice& device, bool allow_tf32);

}  // namespace attnkit::cuda::gemm
