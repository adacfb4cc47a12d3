// Params of the chunkwise retention kernel (retention_chunk_kernel.cuh): one "job" is a retention
// forward o = scale * sum_{m<=t} gamma^(t-m) (q_t . k_m) v_m + factor_in * scale * gamma^(t+1) q_t S0 over
// one sequence direction, with the carried state written out as factor_out * S_{T-1}. The forward
// call is one job; the backward is three jobs of the same kernel with operands swapped and time
// reversed (retention_jobs.cpp derives them). Time reversal is only a base pointer at token T-1 and
// negated token strides: the kernel indexes tokens with signed 64-bit strides and never sees it.
#pragma once
#include <cstdint>

#include "core/host_device.hpp"

namespace attnkit::cuda::retention {

// Heads whose log2(gamma) travel in the params; beyond, only the default decay runs (computed on the device).
inline constexpr int kMaxParamHeads = 512;
// Forward calls of at most this many tokens run the recurrent decode kernel (retention_decode_kernel.cuh).
inline constexpr int64_t kDecodeMaxTokens = 16;
// The parallel form's backward takes Dv a multiple of 64 up to this (its tiles of dO and V are in shared memory).
inline constexpr int kParallelBackwardMaxValueDim = 256;
// Dynamic shared memory of one of its launches (retention_parallel_backward_common.cuh): three 64-row tiles
// of Dk columns and three of Dv columns (16-bit elements, rows padded by 8), and two stages of 64 rows of
// four fp32 row terms.
constexpr int parallel_backward_shared_bytes(int dk, int dv, int element_bytes) {
  return 3 * 64 * ((dk + 8) + (dv + 8)) * element_bytes + 2 * 64 * 4 * 4;
}

struct SequenceOperand {
  const void* data = nullptr;  // element (b, t, h, 0) = data + b*batch + t*token + h*head
  int64_t batch = 0, token = 0, head = 0;
};

struct StateOperand {
  float* data = nullptr;  // element (b, h, r, c) = data + b*batch + h*head + r*row + c*col; null = absent
  int64_t batch = 0, head = 0, row = 0, col = 0;
  int32_t pairs = 0;  // 1: col == 1 and every (b, h, r, even c) is 8-byte aligned (float2 access)
};

// The explicit decay matrix [H|1, Tq, Tk] of the parallel form (retention_normalized_kernel.cuh): element
// (h, i, j) = data + h*head + i*row + j (head = 0 for a matrix shared by the heads). null = gamma's powers.
struct DecayMatrixOperand {
  const void* data = nullptr;
  int64_t head = 0, row = 0;
  int32_t f32 = 0;          // 1: float32 entries; 0: the inputs' dtype
  int32_t normalize = 0;    // 1: scores divided by max(|row sum|, 1) (RetNet's score normalisation)
  int32_t vector_rows = 0;  // 1: data and the head and row strides are 16-byte aligned (16-byte cp.async)
  // The Hopper decay-matrix kernel's map of the nonzero tiles (retention_decay_map_kernel.cuh), written by its first
  // launch into the call's workspace: [H|1, ceil(Tq / 128), decay_map_row_bytes(Tk)] bytes.
  unsigned char* tile_map = nullptr;
  // That kernel's CTAs per cluster (1, 2 or 4 batches sharing each tile of the matrix): matrix_cluster_size's.
  int32_t cluster = 1;
};

// The tile map: per (matrix, 128-row query block), one byte per 64-key block (bit 0: rows 0-63 of the tile hold a
// nonzero entry, bit 1: rows 64-127), the row padded to whole 16-byte words.
constexpr int64_t decay_map_row_bytes(int64_t tokens_k) { return ((tokens_k + 63) / 64 + 15) / 16 * 16; }
// The CTAs per cluster of the Hopper decay-matrix forward for `batch` batches: 2 where there are two or more (an odd
// count's last cluster computes its last batch twice), else 1. The kernel takes clusters of 4 too, which measured
// slower on an H200: 3.19 against 2.06 ms at B8 T4096 H16 D128 (docs/perf.md, retention "Twenty-fourth step").
ATTNKIT_HOST_DEVICE constexpr int matrix_cluster_size(int64_t batch) { return batch >= 2 ? 2 : 1; }
// Grid CTAs of the Hopper decay-matrix forward (retention_wgmma_matrix_producer.cuh, matrix_walk): the batch count
// rounded up to whole clusters of `cluster` CTAs, times the value slices, heads and 128-row query blocks.
ATTNKIT_HOST_DEVICE constexpr int64_t matrix_forward_ctas(int64_t batch, int64_t heads, int64_t tokens_q,
                                                          int64_t slices, int cluster) {
  return (batch + cluster - 1) / cluster * cluster * slices * heads * ((tokens_q + 127) / 128);
}
constexpr int64_t decay_map_bytes(int64_t matrices, int64_t tokens_q, int64_t tokens_k) {
  return matrices * ((tokens_q + 127) / 128) * decay_map_row_bytes(tokens_k);
}

// Shared memory of the matrix's tiles in the parallel form's kernels (retention_decay_tile.cuh): two pipeline
// stages of a 64x64 tile of entries as stored, rows padded to kDecayTilePitch entries; 0 without a matrix.
inline constexpr int kDecayTilePitch = 72;
constexpr int decay_tiles_shared_bytes(bool present, bool f32, int element_bytes) {
  return present ? 2 * 64 * kDecayTilePitch * (f32 ? 4 : element_bytes) : 0;
}
constexpr int decay_tiles_shared_bytes(const DecayMatrixOperand& d, int element_bytes) {
  return decay_tiles_shared_bytes(d.data != nullptr, d.f32 != 0, element_bytes);
}
// The most of them (a float32 matrix): what the kernels' opt-in shared memory is raised to.
inline constexpr int kDecayTilesMaxSharedBytes = decay_tiles_shared_bytes(true, true, 4);
// (batch, value slice) pairs per CTA of the normalised parallel forward over a decay matrix
// (retention_normalized_kernel.cuh): each tile of the matrix a CTA stages serves that many of them.
inline constexpr int kDecayMatrixMembers = 2;
// Dynamic shared memory of a launch of the parallel form's grouped backward over a decay matrix
// (retention_parallel_backward_common.cuh): kDecayMatrixMembers sets of one launch's tiles and one stage of the
// matrix's tile (the two stages would not fit at Dk = Dv = 128 with float32 entries).
constexpr int parallel_backward_grouped_shared_bytes(int dk, int dv, int element_bytes, bool decay_f32) {
  return kDecayMatrixMembers * parallel_backward_shared_bytes(dk, dv, element_bytes) +
         decay_tiles_shared_bytes(true, decay_f32, element_bytes) / 2;
}
// Opt-in shared memory per block on SM90 (227 KiB): every instance's largest launch fits it. SM80 allows 163 KiB,
// which the parallel backward's largest launches (Dv = 256 with a decay matrix) exceed; the plan refuses those there.
inline constexpr int kMaxSharedBytesPerBlock = 227 * 1024;
// SM90's shared memory per multiprocessor, and what each resident CTA reserves of it.
inline constexpr int kSm90SharedBytesPerSm = 228 * 1024;
inline constexpr int kReservedSharedBytesPerCta = 1024;
// How many CTAs of `shared_bytes` each a multiprocessor of `per_sm` bytes holds at once, counted up to two (the chunk
// kernels are built for one or two a multiprocessor).
constexpr int resident_ctas(int shared_bytes, int per_sm = kSm90SharedBytesPerSm) {
  return 2 * (shared_bytes + kReservedSharedBytesPerCta) <= per_sm ? 2 : 1;
}

// What one launch of the parallel form's backward computes (retention_parallel_backward_common.cuh).
enum ParallelBackwardRole : int32_t { kRowTermsRole = 0, kGradQRole = 1, kGradKRole = 2, kGradVRole = 3 };

struct ChunkParams {
  SequenceOperand q, k, v, out;  // out.data is written (const only for the shared struct)
  StateOperand initial_state;    // read, times the initial factor
  StateOperand final_state;      // written, times the final factor
  int64_t tokens = 0;
  int32_t heads = 0;
  int32_t dv_slices = 0;  // CTAs per (batch, head): the value columns are cut into this many slices
  float scale = 1.0f;
  // Backward jobs that carry dLoss/dS in reversed time read the incoming state gradient G as
  // G / (scale * gamma) and write the initial state's gradient as scale * gamma * S (retention_jobs.cpp).
  int32_t gradient_state_factors = 0;
  // 1: every operand start and token/head/batch stride is a multiple of 16 bytes (cp.async and paired
  // stores); 0: the element-wise path.
  int32_t vector_access = 0;
  // 1: gamma_h = 1 - 2^(-5-h) computed on the device (any head count); 0: log2_gamma below.
  int32_t default_gamma = 0;
  // Sequence split for parallelism when B * H * slices CTAs are too few: segment s covers tokens
  // [s * segment_tokens, (s+1) * segment_tokens). With segments > 1 a job is two launches: state_only = 1
  // writes each segment's own state (from zero) to segment_states[b, h, s] for s < segments - 1; then
  // state_only = 0 starts segment s from S0 and those states (gamma^segment_tokens Horner), and the
  // last segment writes the final state.
  // The wgmma kernel's state-only launch may cut each segment into state_splits parts of state_segment_tokens (a
  // multiple of the chunk; the last part of a segment may be shorter or empty), one CTA each, so that it fills the
  // device where the segments alone are too few: segment_states then holds every part's own state, and segment s
  // starts from the s * state_splits parts before it (gamma^part_tokens Horner). 1: the parts are the segments (every
  // other kernel).
  int64_t segment_tokens = 0;  // a multiple of the chunk
  int32_t segments = 1;
  int32_t state_only = 0;
  int32_t state_splits = 1;
  int64_t state_segment_tokens = 0;  // segment_tokens where state_splits is 1
  float* segment_states = nullptr;   // [B, H, (segments - 1) * state_splits, Dk, value_columns] fp32, dense
  int32_t value_columns = 0;         // the job's Dv
  DecayMatrixOperand decay;          // the parallel form over an explicit matrix (normalised-form kernel only)
  int64_t tokens_k = 0;              // keys of that form (Tk); the other forms use `tokens`
  int32_t batches = 0;               // B, for the parallel form's CTA order over a decay matrix
  // The parallel form's backward (retention_parallel_backward_common.cuh): dO, which gradient a launch
  // computes (ParallelBackwardRole; `out` is that gradient), and the per-query-row terms [B, H, Tq, 2] fp32
  // (1/n_t, c_t) written by the row-terms launch; null: 1 and 0 (no normalisation).
  SequenceOperand grad_out;
  int32_t backward_role = 0;
  float* row_terms = nullptr;
  float log2_gamma[kMaxParamHeads];
};

// One launch of retention_chunk_jobs_kernel: `count` jobs, job j owning CTAs [first_cta[j], first_cta[j + 1]) of the
// grid (the last one up to the grid's end); `interleaved` (jobs of equal CTA counts): grid CTA c is CTA c / count of
// job c % count instead, so that the jobs' CTAs of one head run side by side (the backward's dK and dV jobs read Q and
// dO of a head in the same time order, so one of them finds them in L2). The backward's jobs that share an instance
// run in one launch (retention_jobs.hpp). 7.4 KB of kernel parameters (CUDA 12.1+ takes up to 32 764 bytes).
inline constexpr int kMaxChunkJobs = 3;
struct ChunkJobs {
  ChunkParams jobs[kMaxChunkJobs];
  int64_t first_cta[kMaxChunkJobs] = {};
  int32_t count = 0;
  int32_t interleaved = 0;
};
static_assert(sizeof(ChunkJobs) <= 32764, "a kernel's parameters (CUDA 12.1+, SM70+)");

// Which job, and which of its CTAs, grid CTA `cta` of a ChunkJobs launch is.
struct JobCta {
  int job = 0;
  int64_t cta = 0;
};
ATTNKIT_HOST_DEVICE JobCta job_cta(const ChunkJobs& jobs, int64_t cta) {
  if (jobs.interleaved != 0) return {static_cast<int>(cta % jobs.count), cta / jobs.count};
  int job = 0;
  while (job + 1 < jobs.count && cta >= jobs.first_cta[job + 1]) ++job;
  return {job, cta - jobs.first_cta[job]};
}

}  // namespace attnkit::cuda::retention
