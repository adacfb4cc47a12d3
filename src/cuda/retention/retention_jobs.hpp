// Retention calls as jobs of the chunkwise kernel (retention_params.hpp). The forward is one job. The
// backward is three, each a retention forward with operands swapped, so one kernel serves both
// directions (S0 is the initial state, G the incoming final-state gradient, r: time reversed):
//   dQ = retention(q = dO, k = V, v = K; S0^T)                          Dk' = Dv, Dv' = Dk
//   dK = retention_r(q = V, k = dO, v = Q; G^T / (scale gamma))        Dk' = Dv, Dv' = Dk
//   dV = retention_r(q = K, k = Q, v = dO; G / (scale gamma)); its final state times scale gamma is
//        the initial state's gradient                                  Dk' = Dk, Dv' = Dv
// (dq_t = scale sum_{m<=t} gamma^(t-m) (dO_t.v_m) k_m + scale gamma^(t+1) S0 dO_t; dk and dv are the
// same sums over m >= t, which time reversal turns into causal ones; the carried state of each job is
// the forward state or dLoss/dS, up to a transpose and the factors above.) Each job recomputes its own
// chain of states on chip, so nothing per chunk goes through memory. Cost: three forwards, i.e. 1.5x
// the nominal backward count (twice the forward's) in FLOPs; bytes: each job reads three of
// q, k, v, dO and writes one gradient (9 reads and 3 writes of a [B, T, H, D] tensor in all).
//
// A plan selects the kernels once (select_*); a run fills the params from the call's tensors (fill_*),
// which is pointer and stride arithmetic plus the per-head decay, reused when gamma is unchanged.
//
// Parallelism: one CTA per (batch, head, value block of 64 columns, or 32 when Dv is no multiple of
// 64; 128 on the wgmma kernel at Dk = Dv = 128). When that leaves multiprocessors idle, the sequence is also cut into
// segments of whole chunks (at least 4 chunks each); each segment's own state is computed first (K^T V work only; on
// the wgmma kernel in parts of a segment where the segments alone leave multiprocessors idle, state_splits_for) and
// the segments then start from the states before them. The count follows a wave model of the CTAs of the kernel that
// runs (the wgmma kernel on a 9.0 device, see on_device; retention_jobs.cpp's segments_by_wave_model: one wgmma CTA
// fills a multiprocessor's throughput, two mma.sync CTAs share one at full speed each), for a D64 job alone on the
// wgmma kernel a roofline of its chain steps and its DRAM bytes at the device's rate (segments_by_roofline); a job
// alone makes no more CTAs than fit on the device at once. The
// backward's jobs that share an instance run in one launch of retention_chunk_jobs_kernel (joint), whose segment
// count counts the jobs' CTAs together and which interleaves the jobs' CTAs where their counts are equal (a head's dQ,
// dK and dV side by side: dK and dV read Q and dO in the same order, one from L2); joint=0 runs them one after the
// other.
// normalize=true and the explicit decay matrix run the parallel forward (retention_normalized_kernel.cuh)
// and the parallel backward (retention_parallel_backward_common.cuh: four launches of two kernels).
// Forward calls of at most kDecodeMaxTokens tokens with Dv a multiple of 64 run the recurrent decode
// kernel instead (retention_decode_kernel.cuh: fp32 on CUDA cores, the state read and written once).
// These choices (value block, segments, decode, joint backward) are a ChunkShapeChoice: ChunkShapeChoice{} is the rule
// above, the tuner's retention configs are others (src/cuda/tune/retention_config_space.hpp), and
// ATTNKIT_RETENTION_CONFIG="block=32|64,segments=N,decode=0|1,joint=0|1,wgmma=0|1" (any subset) forces one where it
// is valid, read when a plan is made (plans are keyed by its value, core/retention_plan.cpp); a forced choice keeps
// priority over the tuner's. A chunkwise job (forward and backward) runs on the Hopper wgmma kernel
// (retention_wgmma_chunk_kernel.cuh) where wgmma_chunk_kernel_for allows it (a 9.0 device), else on the mma.sync
// kernel; at Dk 128 with Dv a multiple of 128 its CTAs own 128 value columns unless block= is forced (block=64 keeps
// 64). wgmma=0 keeps the mma.sync kernel. Measured on an H200 (docs/perf.md, retention "Eleventh step"): forward GPU
// time at B8 T4096 H16 D128 0.228 ms against the mma.sync kernel's 0.290, at B2 T16384 0.289 against 0.438.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "attnkit/retention.hpp"
#include "cuda/retention/retention_chunk_registry.hpp"
#include "cuda/retention/retention_params.hpp"

namespace attnkit::cuda::retention {

struct ChunkJob {
  const ChunkKernel* kernel = nullptr;  // null: the job has nothing to do
  ChunkParams params;
  int64_t ctas = 0;
  int64_t workspace_bytes = 0;  // its segment states (JobShape::workspace_bytes)
};

// A job's kernel and its sequence split (retention_params.hpp: segments > 1 runs two launches and
// needs segment_states).
struct JobShape {
  const ChunkKernel* kernel = nullptr;
  int32_t segments = 1;
  int64_t segment_tokens = 0;
  // The wgmma kernel's state-only launch: parts a segment and their tokens (ChunkParams::state_splits); a job that
  // runs another kernel keeps one part a segment.
  int32_t state_splits = 1;
  int64_t state_segment_tokens = 0;
  int64_t workspace_bytes = 0;  // the segment states (every part's)
  int shared_bytes = 0;         // the opt-in shared memory its launches use; 0: the kernel's shared_bytes
};

struct ForwardSelection {
  JobShape job;
  int64_t workspace_bytes = 0;
  // The choice asks for the Hopper wgmma kernel: the plan, which knows the device, swaps it in for the job's
  // mma.sync kernel where wgmma_chunk_kernel_for allows (retention_plan.cpp).
  bool wgmma = false;
  // Dv, when the wgmma kernel's CTAs may own 128 value columns (the choice forces no value block); else 0.
  int64_t wgmma_wide_dv = 0;
  // Set where the plan runs the Hopper decay-matrix kernel (retention_wgmma_matrix_kernel.cuh): the normalised-form
  // kernel a call runs instead when its operands do not allow 16-byte copies (fill_forward).
  const ChunkKernel* matrix_fallback = nullptr;
};

struct BackwardSelection {
  JobShape dq;  // Dk' = Dv
  JobShape dk;  // Dk' = Dv
  JobShape dv;  // Dk' = Dk
  // The largest job's when the jobs run one after the other; their sum when they run together (joint).
  int64_t workspace_bytes = 0;
  // The jobs that share an instance run in one launch (and their segment-state launches in one), each job's
  // segment states in its own part of the workspace (dQ, dK, dV order).
  bool joint = false;
  // The parallel form (normalize=true or a decay matrix): dq holds the query-side kernel, dk and dv the
  // key-side one, and the workspace is the row terms [B, H, Tq, 2] fp32 (none without normalisation).
  bool parallel_form = false;
  // The choice asks for the Hopper wgmma kernel: the plan swaps it in for each chunkwise job's mma.sync kernel where
  // wgmma_chunk_kernel_for allows (retention_plan.cpp); `wgmma_wide`: its CTAs may own 128 value columns (the choice
  // forces no value block).
  bool wgmma = false;
  bool wgmma_wide = false;
};

inline constexpr const char* kForcedRetentionConfigVariable = "ATTNKIT_RETENTION_CONFIG";
inline constexpr int64_t kRetentionChunk = 64;  // tokens per chunk of the chunkwise kernel (all instances)

// How the chunkwise jobs of a call are shaped. Each field left at its zero value follows the rule above.
struct ChunkShapeChoice {
  // Value columns per CTA: this block for every job whose value dim is a multiple of it, the rule's (64,
  // or 32 when the value dim is no multiple of 64) for the others. 0: the rule everywhere.
  int value_block = 0;
  // Sequence segments per (batch, head, value block): this many, at most one per chunk. 0: the rule's (the wave
  // model above, segments of at least 4 chunks).
  int64_t segments = 0;
  // Parts a segment in the wgmma kernel's state-only launch: this many, at most one per chunk. 0: the rule's
  // (state_splits_for).
  int64_t state_splits = 0;
  // Forward calls of at most kDecodeMaxTokens tokens with Dv a multiple of 64 run the decode kernel.
  bool decode = true;
  // The backward's jobs that share an instance (all three when Dk == Dv, else dQ and dK) run in one launch;
  // the segment rule then counts their CTAs together. false: one launch (pair) per job, in turn. Measured on an
  // H200 (docs/perf.md, retention "Eighth step"), joint was as fast or faster on every chunk row.
  bool joint_backward = true;
  // A chunkwise job (forward and backward) runs the Hopper wgmma kernel where wgmma_chunk_kernel_for gives one; false:
  // the mma.sync kernel everywhere.
  bool wgmma = true;
  // What the device's DRAM moves in one chunk step of a D64 wgmma CTA (dram_bytes_per_step_of, set by on_device):
  // where given, the rule's segments for such a job take the larger of a phase's chain steps and its bytes in steps
  // (segments_by_roofline). 0: chain steps only (segments_by_wave_model).
  double dram_bytes_per_step = 0.0;

  friend bool operator==(const ChunkShapeChoice&, const ChunkShapeChoice&) = default;
};

// ATTNKIT_RETENTION_CONFIG's choice; nullopt when it is unset or empty. Throws Status::invalid_argument
// naming a malformed item.
std::optional<ChunkShapeChoice> forced_chunk_shape();

// Whether a call runs the chunkwise jobs (no normalisation, no decay matrix), the only retention path with
// a shape to choose; the others run the parallel form's kernels.
bool runs_chunk_jobs(const RetentionForward& problem);
bool runs_chunk_jobs(const RetentionBackward& problem);

// The kernel and sequence split of one chunkwise job (key dim dk, value dim dv, `tokens` tokens of
// batch_heads sequences) under `choice`, without the checks select_* make: kernel null when no instance
// has this dtype, dk and value block. Pure (the tuner's config spaces compute shapes with it).
// `sharing_jobs`: how many jobs of this shape run in the same launch (the segment rule fills the GPU with the
// CTAs of all of them).
JobShape chunk_job_shape(DType dtype, int64_t dk, int64_t dv, int64_t batch_heads, int64_t tokens, int multiprocessors,
                         const ChunkShapeChoice& choice, int64_t sharing_jobs = 1);

// How many backward jobs share the launch of the dQ job (Dk' = Dv) and of the dV job (Dk' = Dk) under `choice`.
struct BackwardSharing {
  int64_t dq = 1;
  int64_t dv = 1;
};
BackwardSharing backward_sharing(const ChunkShapeChoice& choice, int64_t dk, int64_t dv);

// The decode kernel a forward of these sizes runs under `choice`, or null when the chunkwise job runs it.
const ChunkKernel* decode_kernel_for(DType dtype, int64_t batch_heads, int64_t tokens, int64_t dk, int64_t dv,
                                     const ChunkShapeChoice& choice);

// The Hopper wgmma chunk kernel (retention_wgmma_chunk_kernel.cuh) that runs a chunkwise job whose own kernel is
// `kernel` (the forward's job, or one of the backward's three) on a device of compute capability `compute_capability`
// (major * 10 + minor), or null: then the job's own kernel runs. Only where: the device is 9.0 (sm_90a code), `kernel`
// is the mma.sync chunk kernel ("chunk64", not decode) and an instance with its dtype, Dk and value block is compiled
// (bf16 and f16, Dk 64 and 128, value block 64; none in builds without the sm_90a target). A job of Dk 128 and value
// block 64 whose `wide_dv` (the job's Dv, or 0 to keep its value block) is a multiple of 128 runs the value block 128
// instance instead (one CTA per multiprocessor, Q K^T once per 128 value columns). Segments, initial and final states,
// per-head gamma, scale and unaligned views are all supported.
const ChunkKernel* wgmma_chunk_kernel_for(const ChunkKernel* kernel, int64_t wide_dv, int compute_capability);

// wgmma_chunk_kernel_for's `wide_dv` under `choice` for a forward of value dim `dv`: dv when the choice forces no
// value block, else 0.
inline int64_t wgmma_wide_dv(const ChunkShapeChoice& choice, int64_t dv) { return choice.value_block == 0 ? dv : 0; }

// The choice as a device of `compute_capability` runs it: the wgmma kernel only on 9.0, the segment rule told what
// its DRAM moves in a chunk step (dram_bytes_per_step_of; 0 where unknown). Selecting with it lets the segment rule
// count the CTAs and the bytes of the kernel that runs (the plans' callers and the tuner's estimate do).
inline ChunkShapeChoice on_device(ChunkShapeChoice choice, int compute_capability, double dram_bytes_per_step = 0.0) {
  choice.wgmma = choice.wgmma && compute_capability == 90;
  choice.dram_bytes_per_step = dram_bytes_per_step;
  return choice;
}

// The bytes a device's DRAM moves in one chunk step of a D64 wgmma CTA: its peak bandwidth (2 x memory clock x bus
// width) times kDramEfficiency over kWgmmaStepCycles cycles of its SM clock; 0 where an input is 0.
inline constexpr double kDramEfficiency = 0.78;
inline constexpr double kWgmmaStepCycles = 1750.0;
inline double dram_bytes_per_step(double memory_clock_khz, double bus_width_bits, double sm_clock_khz) {
  if (memory_clock_khz <= 0 || bus_width_bits <= 0 || sm_clock_khz <= 0) return 0.0;
  return 2.0 * memory_clock_khz * bus_width_bits / 8.0 * kDramEfficiency * kWgmmaStepCycles / sm_clock_khz;
}

// Throw Status::unsupported, naming what is allowed, when no compiled kernel runs the problem. Without a
// choice: ATTNKIT_RETENTION_CONFIG's when it is set, else the rule.
ForwardSelection select_forward(const RetentionForward& problem, int multiprocessors);
BackwardSelection select_backward(const RetentionBackward& problem, int multiprocessors);
ForwardSelection select_forward(const RetentionForward& problem, int multiprocessors, const ChunkShapeChoice& choice);
BackwardSelection select_backward(const RetentionBackward& problem, int multiprocessors,
                                  const ChunkShapeChoice& choice);

// log2(gamma_h) of every head, or empty for the on-device default (more heads than the params hold).
std::vector<float> log2_decay(const std::vector<double>& gamma, int64_t heads);

ChunkJob fill_forward(const RetentionForward& problem, const ForwardSelection& selection,
                      const std::vector<float>& log2_gamma);
// The parallel form's backward with one (batch, value slice) pair per CTA: what its selection becomes on a device
// whose shared memory per block is below the grouped (matrix-form) kernels'.
void one_member_parallel_backward(const RetentionBackward& problem, BackwardSelection& selection);
// The parallel form's backward (BackwardSelection::parallel_form): row terms (into `row_terms`, the
// selection's workspace; no job without normalisation), dQ, dK, dV, launched in this order on one stream.
std::array<ChunkJob, 4> fill_parallel_backward(const RetentionBackward& problem, const BackwardSelection& selection,
                                               const std::vector<float>& log2_gamma, float* row_terms);
std::array<ChunkJob, 3> fill_backward(const RetentionBackward& problem, const BackwardSelection& selection,
                                      const std::vector<float>& log2_gamma);

}  // namespace attnkit::cuda::retention
