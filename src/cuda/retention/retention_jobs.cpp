#include "cuda/retention/retention_jobs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "attnkit/error.hpp"
#include "core/zero_size.hpp"

namespace attnkit::cuda::retention {
namespace {

[[noreturn]] void unsupported(const std::string& message) { throw Error(Status::unsupported, message); }

void require_half_precision(const TensorView& q) {
  if (q.dtype == DType::f16 || q.dtype == DType::bf16) return;
  unsupported(std::string("q: dtype ") + std::string(dtype_name(q.dtype)) +
              " on the CUDA backend's retention; allowed: float16 or bfloat16 (fp32 accumulation and an fp32 "
              "state); float32 and float64 run on the CPU backend (pass CPU tensors)");
}

// The normalised parallel forward (and the parallel form over an explicit decay matrix, which runs on the same
// kernel, kDecayMatrixMembers (batch, value slice) pairs per CTA): Dk with an instance, Dv a multiple of its
// 64-column value block.
JobShape select_normalized(const RetentionForward& problem) {
  const std::string form = detail::is_given(problem.decay)
                               ? " with a decay matrix on the CUDA backend's retention; allowed: "
                               : " with normalize=true on the CUDA backend's retention; allowed: ";
  const int64_t dk = problem.q.extents[3], dv = problem.v.extents[3];
  const int members = detail::is_given(problem.decay) ? kDecayMatrixMembers : 1;
  const ChunkKernel* kernel =
      dk <= 1024 ? find_normalized_kernel(problem.q.dtype, static_cast<int>(dk), members) : nullptr;
  if (kernel == nullptr) {
    unsupported("q: head dim Dk = " + std::to_string(dk) + form + chunk_head_dims_text() +
                " (other head dims run on the CPU backend)");
  }
  if (dv % kernel->value_block != 0) {
    unsupported("v: head dim Dv = " + std::to_string(dv) + form + "a multiple of 64");
  }
  const int64_t query_blocks = (problem.q.extents[1] + 63) / 64;
  if (problem.q.extents[0] * problem.q.extents[2] * (dv / 64) * query_blocks > std::numeric_limits<int32_t>::max()) {
    unsupported("B * H * T = " + std::to_string(problem.q.extents[0] * problem.q.extents[2] * problem.q.extents[1]) +
                form + "B * H * T / 64 * Dv / 64 below 2^31");
  }
  JobShape shape;
  shape.kernel = kernel;
  shape.segment_tokens = query_blocks * 64;
  return shape;
}

// The parallel form's backward (normalize=true with gamma, or a decay matrix): Dk with an instance, Dv a
// multiple of 64 up to the kernels' shared-memory bound.
BackwardSelection select_parallel_backward(const RetentionBackward& problem) {
  const std::string form = detail::is_given(problem.decay)
                               ? " with a decay matrix in the CUDA backend's retention backward; allowed: "
                               : " with normalize=true in the CUDA backend's retention backward; allowed: ";
  const int64_t batch = problem.q.extents[0], query_tokens = problem.q.extents[1], heads = problem.q.extents[2];
  const int64_t key_tokens = problem.k.extents[1], dk = problem.q.extents[3], dv = problem.v.extents[3];
  const DType dtype = problem.q.dtype;
  const ChunkKernel* query_side =
      dk <= 1024 ? find_parallel_backward_kernel(dtype, static_cast<int>(dk), false) : nullptr;
  const ChunkKernel* key_side = dk <= 1024 ? find_parallel_backward_kernel(dtype, static_cast<int>(dk), true) : nullptr;
  if (query_side == nullptr || key_side == nullptr) {
    unsupported("q: head dim Dk = " + std::to_string(dk) + form + chunk_head_dims_text() +
                " (other head dims run on the CPU backend)");
  }
  if (dv % 64 != 0 || dv > kParallelBackwardMaxValueDim) {
    unsupported("v: head dim Dv = " + std::to_string(dv) + form + "a multiple of 64 up to " +
                std::to_string(kParallelBackwardMaxValueDim) + " (other head dims run on the CPU backend)");
  }
  const int64_t blocks = (std::max(query_tokens, key_tokens) + 63) / 64;
  if (batch * heads * blocks * (dv / 64) > std::numeric_limits<int32_t>::max()) {
    unsupported("B * H * T = " + std::to_string(batch * heads * std::max(query_tokens, key_tokens)) + form +
                "B * H * T / 64 * Dv / 64 below 2^31");
  }
  BackwardSelection selection;
  selection.parallel_form = true;
  selection.dq.kernel = query_side;
  selection.dk.kernel = key_side;
  selection.dv.kernel = key_side;
  // With a matrix, two stages of its 64x64 tile as well (float32 entries, or 2-byte ones).
  const bool decay_f32 = problem.decay.dtype == DType::f32;
  const int shared_bytes = parallel_backward_shared_bytes(static_cast<int>(dk), static_cast<int>(dv), 2) +
                           decay_tiles_shared_bytes(detail::is_given(problem.decay), decay_f32, 2);
  for (JobShape* shape : {&selection.dq, &selection.dk, &selection.dv}) shape->shared_bytes = shared_bytes;
  // A matrix: kDecayMatrixMembers (batch, value slice) pairs per CTA sharing each staged tile of it, where their
  // shared memory fits SM90's (the plan takes the one-member kernels back on a device that allows less,
  // one_member_parallel_backward).
  const int grouped_bytes =
      parallel_backward_grouped_shared_bytes(static_cast<int>(dk), static_cast<int>(dv), 2, decay_f32);
  const ChunkKernel* grouped_query =
      find_parallel_backward_kernel(dtype, static_cast<int>(dk), false, kDecayMatrixMembers);
  const ChunkKernel* grouped_key =
      find_parallel_backward_kernel(dtype, static_cast<int>(dk), true, kDecayMatrixMembers);
  if (detail::is_given(problem.decay) && grouped_bytes <= kMaxSharedBytesPerBlock && grouped_query != nullptr &&
      grouped_key != nullptr) {
    selection.dq.kernel = grouped_query;
    selection.dk.kernel = grouped_key;
    selection.dv.kernel = grouped_key;
    for (JobShape* shape : {&selection.dq, &selection.dk, &selection.dv}) shape->shared_bytes = grouped_bytes;
  }
  const bool normalizing = problem.normalize;
  if (normalizing) selection.workspace_bytes = batch * heads * query_tokens * 2 * static_cast<int64_t>(sizeof(float));
  return selection;
}

void require_gamma_fits(const std::vector<double>& gamma, int64_t heads) {
  if (gamma.empty() || heads <= kMaxParamHeads) return;
  unsupported("gamma: a per-head decay for " + std::to_string(heads) + " heads on the CUDA backend; allowed: at most " +
              std::to_string(kMaxParamHeads) +
              " heads with an explicit gamma, or the default gamma for any head count");
}

// ATTNKIT_RETENTION_CONFIG's items: "block=32", "segments=8", "splits=2", "decode=0", "joint=1", "wgmma=1",
// comma-separated.
ChunkShapeChoice parse_forced_choice(const std::string& text) {
  ChunkShapeChoice choice;
  std::string rest = text;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const std::size_t equals = item.find('=');
    const std::string key = item.substr(0, equals);
    const long long value = equals == std::string::npos ? -1 : std::atoll(item.c_str() + equals + 1);
    if (key == "block" && (value == 32 || value == 64)) {
      choice.value_block = static_cast<int>(value);
    } else if (key == "segments" && value >= 1) {
      choice.segments = value;
    } else if (key == "splits" && value >= 1) {
      choice.state_splits = value;
    } else if (key == "decode" && (value == 0 || value == 1)) {
      choice.decode = value == 1;
    } else if (key == "joint" && (value == 0 || value == 1)) {
      choice.joint_backward = value == 1;
    } else if (key == "wgmma" && (value == 0 || value == 1)) {
      choice.wgmma = value == 1;
    } else {
      throw Error(Status::invalid_argument,
                  "ATTNKIT_RETENTION_CONFIG: item '" + item +
                      "'; allowed: comma-separated block=32|64, segments=N (N >= 1), splits=N (N >= 1), "
                      "decode=0|1, joint=0|1, wgmma=0|1");
    }
  }
  return choice;
}

// The value block a CTA owns: 64 columns, or 32 when Dv is no multiple of 64; 0 when Dv is no
// multiple of 32. Too few CTAs are made up for by segments (shape_job), which do not repeat Q K^T.
int value_block_for(int64_t dv, const ChunkShapeChoice& choice) {
  if (choice.value_block != 0 && dv % choice.value_block == 0) return choice.value_block;
  if (dv % 64 == 0) return 64;
  if (dv % 32 == 0) return 32;
  return 0;
}

// `chunks` cut into about `wanted` pieces of whole chunks: `size` chunks each (the last may be shorter) and their
// `count`, none wholly past the end.
struct ChunkPieces {
  int64_t size, count;
};
ChunkPieces chunk_pieces(int64_t chunks, int64_t wanted) {
  const int64_t size = (chunks + wanted - 1) / wanted;
  return {size, (chunks + size - 1) / size};
}

// The segment count, at most `max_segments`, that minimises a wave model of a job's two launches in units of one
// chunk step of a CTA: the outputs launch holds ctas * s CTAs of ceil(chunks / s) steps, `slots` of them advancing at
// full speed at once (ceil(ctas * s / slots) rounds of steps), the state-only launch ctas * (s - 1) CTAs at half the
// cost (the state warps alone). More segments must cost 5 % less than fewer (the model leaves out each segment's reads
// of the states before it). Example, 132 multiprocessors of one slot (the wgmma kernel), B2 T16384 H16 D128 forward
// (32 CTAs of 128 value columns, 256 chunks, at most 4 segments): 1, 2, 4 segments cost 512, 384, 192 half steps.
int64_t segments_by_wave_model(int64_t ctas, int64_t chunks, int64_t slots, int64_t max_segments) {
  if (ctas <= 0 || chunks <= 0) return 1;  // an empty sequence or grid: nothing to split
  slots = std::max<int64_t>(slots, 1);
  int64_t best = 1;
  int64_t best_cost = 0;
  for (int64_t wanted = 1; wanted <= max_segments; ++wanted) {
    const auto [steps, segments] = chunk_pieces(chunks, wanted);
    const int64_t outputs = (ctas * segments + slots - 1) / slots * steps;
    const int64_t states = (ctas * (segments - 1) + slots - 1) / slots * steps;
    const int64_t cost = 2 * outputs + states;  // in half steps
    if (wanted == 1 || cost * 20 < best_cost * 19) {
      best = segments;
      best_cost = cost;
    }
  }
  return best;
}

// The parts a segment of the wgmma kernel's state-only launch (ChunkParams::state_splits): as many as still run in
// one round on the device, at most 8, parts of at least 4 chunks. `active`: the launch's CTAs that compute a state
// with one part a segment (every segment but the last). The state-only launch reads K and V of every segment but the
// last: where its CTAs already fill most multiprocessors it runs at the memory's speed, and more parts only add their
// states' writes and the outputs launch's reads of them (measured on an H200, docs/perf.md, retention "Seventeenth
// step": B2 T16384 H16 forward, 96 active CTAs, 4 parts 0.124 / 0.254 ms at D64 / D128 against 0.115 / 0.225 with
// one); where they leave multiprocessors idle, parts fill them (B4 T4096 H16 D64, 64 active CTAs: 2 parts 0.051 ms
// against 0.055).
int64_t state_splits_for(int64_t active, int64_t chunks_per_segment, int64_t slots) {
  constexpr int64_t kMaxSplits = 8;
  constexpr int64_t kMinChunksPerPart = 4;
  if (active <= 0 || chunks_per_segment <= 0) return 1;
  const int64_t fitting = std::max<int64_t>(1, slots / active);
  return std::max<int64_t>(1, std::min({fitting, kMaxSplits, chunks_per_segment / kMinChunksPerPart}));
}

// A job as segments_by_roofline counts it.
struct RooflineJob {
  int64_t ctas;                   // of the outputs launch with one segment
  int64_t batch_heads;            // sequences
  int64_t chunks, tokens;         // of a sequence
  int64_t bytes_per_token;        // the outputs launch's DRAM bytes per token of a sequence
  int64_t state_bytes_per_token;  // the state-only launch's
};

// A roofline of a D64 wgmma job's two launches with `segments` segments, in chunk steps: each launch costs the larger
// of its chain steps (as segments_by_wave_model counts them, the state-only launch in its parts, state_splits_for, at
// half a step) and its DRAM bytes over `step_bytes`, what the device moves in a step (Q, K, V read and O written once
// by the outputs launch; K and V of every segment but the last by the state-only launch).
double roofline_steps(const RooflineJob& job, int64_t slots, int64_t segments, double step_bytes) {
  slots = std::max<int64_t>(slots, 1);
  const auto waves = [&](int64_t ctas) { return static_cast<double>((ctas + slots - 1) / slots); };
  const double sequences = static_cast<double>(job.batch_heads);
  const ChunkPieces pieces = chunk_pieces(job.chunks, segments);
  const int64_t steps = pieces.size;
  segments = pieces.count;
  double cost = std::max(waves(job.ctas * segments) * static_cast<double>(steps),
                         sequences * static_cast<double>(job.tokens * job.bytes_per_token) / step_bytes);
  if (segments > 1) {
    const int64_t active = job.ctas * (segments - 1);
    const ChunkPieces parts = chunk_pieces(steps, state_splits_for(active, steps, slots));
    const int64_t state_tokens = std::min(job.tokens, (segments - 1) * steps * kRetentionChunk);
    cost += std::max(waves(active * parts.count) * static_cast<double>(parts.size) / 2.0,
                     sequences * static_cast<double>(state_tokens * job.state_bytes_per_token) / step_bytes);
  }
  return cost;
}

// The rule's segments for a D64 job alone on the wgmma kernel where the device's DRAM rate is known: the wave
// model's count `wave`, unless the roofline (roofline_steps) finds fewer segments at least 5 % cheaper than it by its
// own measure (the count it would take, more segments only when 5 % cheaper, as segments_by_wave_model). Fewer
// segments read K and V less: where the device's bandwidth, not the chain, bounds the segmented launches, one CTA
// per sequence at the chain's pace wins. Measured on an H100 (docs/perf.md, retention "Twentieth step"): B4 T4096
// H16 D64 one segment 0.053 ms against the wave model's two 0.064, where on an H200 the two are faster (and kept).
int64_t segments_by_roofline(const RooflineJob& job, int64_t slots, int64_t max_segments, double step_bytes,
                             int64_t wave) {
  if (job.ctas <= 0 || job.chunks <= 0 || step_bytes <= 0) return wave;
  int64_t lean = 1;
  double lean_cost = 0;
  for (int64_t wanted = 1; wanted <= max_segments; ++wanted) {
    const double cost = roofline_steps(job, slots, wanted, step_bytes);
    if (wanted == 1 || cost * 20 < lean_cost * 19) {
      lean = chunk_pieces(job.chunks, wanted).count;
      lean_cost = cost;
    }
  }
  const bool cheaper = lean_cost * 20 < roofline_steps(job, slots, wave, step_bytes) * 19;
  return lean < wave && cheaper ? lean : wave;
}

// How the segment rule counts a kernel's CTAs on a multiprocessor. `resident`: how many fit at once (the kernel's own
// count where its launch bound sets it: one wgmma CTA at D = 64 or of 128 value columns, two of 64 at D = 128; else
// resident_ctas of its shared memory: two of every mma.sync instance). `slots`: how many advance
// at full speed together. The mma.sync kernel's CTAs wait mostly on latency, so two share a multiprocessor at full
// speed each; one wgmma CTA already draws what a multiprocessor gives (measured on an H200, docs/perf.md, retention
// "Fourteenth step": B8 T4096 H16 D64, 128 CTAs, 0.091 ms with one segment against 0.116 ms with two, i.e. 256 CTAs two
// to a multiprocessor), so it has one slot.
struct MultiprocessorModel {
  int64_t resident;
  int64_t slots;
};
MultiprocessorModel multiprocessor_model(const ChunkKernel& kernel) {
  const bool wgmma = is_wgmma_chunk_kernel(kernel);
  const int64_t resident = kernel.resident > 0 ? kernel.resident : resident_ctas(kernel.shared_bytes);
  return {resident, wgmma ? 1 : resident};
}

// The rule's segments, counted for the kernel the job runs: the wgmma kernel where the choice asks for it and an
// instance is compiled (the plan swaps it in on a 9.0 device, retention_plan.cpp; on_device clears the choice's wgmma
// for other devices), else the job's own: segments of at least 4 chunks, the wave
// model's count (segments_by_wave_model) over the job's CTAs, in a joint launch (`sharing_jobs` jobs of this shape in
// one grid) those of all its jobs together, for a D64 job alone on the wgmma kernel, where the choice carries the
// device's DRAM rate, fewer where a roofline of bytes and chain finds them cheaper (segments_by_roofline); a job alone
// makes no more CTAs than fit on the device at once.
JobShape shape_job(const ChunkKernel* kernel, int64_t batch_heads, int64_t dk, int64_t dv, int64_t tokens,
                   int multiprocessors, const ChunkShapeChoice& choice, int64_t sharing_jobs) {
  constexpr int64_t kMinChunksPerSegment = 4;
  JobShape shape;
  shape.kernel = kernel;
  const int64_t chunks = (tokens + kRetentionChunk - 1) / kRetentionChunk;
  const ChunkKernel* wgmma = choice.wgmma ? wgmma_chunk_kernel_for(kernel, wgmma_wide_dv(choice, dv), 90) : nullptr;
  const ChunkKernel& modelled = wgmma != nullptr ? *wgmma : *kernel;
  const MultiprocessorModel model = multiprocessor_model(modelled);
  const int64_t ctas = batch_heads * (dv / modelled.value_block) * sharing_jobs;
  int64_t max_segments = std::max<int64_t>(1, chunks / kMinChunksPerSegment);
  if (sharing_jobs == 1 && ctas > 0) {
    max_segments = std::min(max_segments, std::max<int64_t>(1, model.resident * multiprocessors / ctas));
  }
  // D64 jobs alone on the wgmma kernel, where the device's bandwidth is known: fewer segments where the roofline finds
  // them cheaper.
  constexpr int64_t kElementBytes = 2;  // the CUDA retention dtypes (f16, bf16)
  const bool roofline =
      wgmma != nullptr && modelled.head_dim == 64 && sharing_jobs == 1 && choice.dram_bytes_per_step > 0;
  int64_t segments = segments_by_wave_model(ctas, chunks, model.slots * multiprocessors, max_segments);
  if (roofline) {
    const RooflineJob job{ctas, batch_heads, chunks, tokens, 2 * (dk + dv) * kElementBytes, (dk + dv) * kElementBytes};
    segments =
        segments_by_roofline(job, model.slots * multiprocessors, max_segments, choice.dram_bytes_per_step, segments);
  }
  if (choice.segments != 0) segments = std::max<int64_t>(1, std::min(choice.segments, chunks));
  const ChunkPieces cut = segments > 1 ? chunk_pieces(chunks, segments) : ChunkPieces{chunks, 1};
  const int64_t chunks_per_segment = cut.size;
  shape.segment_tokens = chunks_per_segment * kRetentionChunk;
  shape.segments = static_cast<int32_t>(cut.count);
  shape.state_segment_tokens = shape.segment_tokens;
  if (shape.segments > 1 && wgmma != nullptr) {
    const int64_t splits = choice.state_splits != 0 ? std::min(choice.state_splits, chunks_per_segment)
                                                    : state_splits_for(ctas * (shape.segments - 1), chunks_per_segment,
                                                                       model.slots * multiprocessors);
    const ChunkPieces parts = chunk_pieces(chunks_per_segment, splits);  // no part wholly past its segment's end
    shape.state_splits = static_cast<int32_t>(parts.count);
    shape.state_segment_tokens = parts.size * kRetentionChunk;
  }
  if (shape.segments > 1) {
    shape.workspace_bytes =
        batch_heads * (shape.segments - 1) * shape.state_splits * dk * dv * static_cast<int64_t>(sizeof(float));
  }
  return shape;
}

JobShape select_job(DType dtype, int64_t dk, int64_t dv, int64_t batch_heads, int64_t tokens, int multiprocessors,
                    const ChunkShapeChoice& choice, const char* dk_name, const char* dv_name, const char* dv_allowed,
                    int64_t sharing_jobs = 1) {
  if (dk > 1024 || find_chunk_kernel(dtype, static_cast<int>(dk), 32) == nullptr) {
    unsupported(std::string(dk_name) + " = " + std::to_string(dk) + " on the CUDA backend's retention; allowed: " +
                chunk_head_dims_text() + " (other head dims run on the CPU backend)");
  }
  const JobShape shape = chunk_job_shape(dtype, dk, dv, batch_heads, tokens, multiprocessors, choice, sharing_jobs);
  if (shape.kernel == nullptr) {
    unsupported(std::string(dv_name) + " = " + std::to_string(dv) + " on the CUDA backend's retention; allowed: " +
                dv_allowed + " (other head dims run on the CPU backend)");
  }
  if (batch_heads * (dv / shape.kernel->value_block) * shape.segments * shape.state_splits * sharing_jobs >
      std::numeric_limits<int32_t>::max()) {
    unsupported("B * H = " + std::to_string(batch_heads) +
                " (batch times heads) on the CUDA backend's retention; allowed: B * H * Dv / 32 below 2^31");
  }
  return shape;
}

bool vector_aligned(const TensorView& view) {
  const auto element = static_cast<int64_t>(dtype_size(view.dtype));
  if (reinterpret_cast<std::uintptr_t>(view.data) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d) {
    if ((view.strides[static_cast<std::size_t>(d)] * element) % 16 != 0) return false;
  }
  return true;
}

// The operand's (b, t, h, 0) addressing; reversed: token t is the sequence's token T-1-t.
SequenceOperand sequence(const TensorView& view, bool reversed) {
  SequenceOperand s;
  s.data = view.data;
  s.batch = view.strides[0];
  s.token = view.strides[1];
  s.head = view.strides[2];
  const int64_t tokens = view.extents[1];
  if (reversed && tokens > 0 && view.data != nullptr) {
    s.data = static_cast<const char*>(view.data) +
             (tokens - 1) * view.strides[1] * static_cast<int64_t>(dtype_size(view.dtype));
    s.token = -view.strides[1];
  }
  return s;
}

StateOperand state(const TensorView& view, bool transposed) {
  StateOperand s;
  if (view.data == nullptr) return s;
  s.data = static_cast<float*>(view.data);
  s.batch = view.strides[0];
  s.head = view.strides[1];
  s.row = transposed ? view.strides[3] : view.strides[2];
  s.col = transposed ? view.strides[2] : view.strides[3];
  const bool even_strides = s.batch % 2 == 0 && s.head % 2 == 0 && s.row % 2 == 0;
  s.pairs = s.col == 1 && even_strides && reinterpret_cast<std::uintptr_t>(view.data) % 8 == 0 ? 1 : 0;
  return s;
}

// The explicit decay matrix [H|1, Tq, Tk] of the parallel form: head stride 0 when shared; 16-byte row copies when
// its start and its head and row strides are 16-byte aligned.
DecayMatrixOperand decay_operand(const TensorView& d, bool normalize) {
  DecayMatrixOperand operand;
  operand.data = d.data;
  operand.head = d.extents[0] == 1 ? 0 : d.strides[0];
  operand.row = d.strides[1];
  operand.f32 = d.dtype == DType::f32 ? 1 : 0;
  operand.normalize = normalize ? 1 : 0;
  const auto element = static_cast<int64_t>(dtype_size(d.dtype));
  operand.vector_rows = reinterpret_cast<std::uintptr_t>(d.data) % 16 == 0 && (operand.head * element) % 16 == 0 &&
                                (operand.row * element) % 16 == 0
                            ? 1
                            : 0;
  return operand;
}

double scale_of(const std::optional<double>& scale, int64_t dk) {
  return scale.value_or(1.0 / std::sqrt(static_cast<double>(dk)));
}

ChunkJob make_job(const JobShape& shape, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out, bool reversed, double scale, const std::vector<float>& log2_gamma) {
  ChunkJob job;
  job.kernel = shape.kernel;
  ChunkParams& p = job.params;
  p.q = sequence(q, reversed);
  p.k = sequence(k, reversed);
  p.v = sequence(v, reversed);
  p.out = sequence(out, reversed);
  p.tokens = q.extents[1];
  p.heads = static_cast<int32_t>(q.extents[2]);
  p.dv_slices = static_cast<int32_t>(v.extents[3] / shape.kernel->value_block);
  p.scale = static_cast<float>(scale);
  p.vector_access = vector_aligned(q) && vector_aligned(k) && vector_aligned(v) && vector_aligned(out) ? 1 : 0;
  p.default_gamma = log2_gamma.empty() ? 1 : 0;
  if (!log2_gamma.empty()) std::memcpy(p.log2_gamma, log2_gamma.data(), log2_gamma.size() * sizeof(float));
  p.segment_tokens = shape.segment_tokens;
  p.segments = shape.segments;
  // Parts of a segment in the state-only launch: the wgmma kernel's (retention_wgmma_chunk_walk.cuh) alone.
  const bool parts = is_wgmma_chunk_kernel(*shape.kernel);
  p.state_splits = parts ? shape.state_splits : 1;
  p.state_segment_tokens = parts ? shape.state_segment_tokens : shape.segment_tokens;
  p.value_columns = static_cast<int32_t>(v.extents[3]);
  job.ctas = q.extents[0] * q.extents[2] * p.dv_slices * p.segments;
  job.workspace_bytes = shape.workspace_bytes;
  return job;
}

}  // namespace

std::optional<ChunkShapeChoice> forced_chunk_shape() {
  const char* text = std::getenv(kForcedRetentionConfigVariable);
  if (text == nullptr || text[0] == '\0') return std::nullopt;
  return parse_forced_choice(text);
}

bool runs_chunk_jobs(const RetentionForward& problem) { return !problem.normalize && !detail::is_given(problem.decay); }
bool runs_chunk_jobs(const RetentionBackward& problem) {
  return !problem.normalize && !detail::is_given(problem.decay);
}

JobShape chunk_job_shape(DType dtype, int64_t dk, int64_t dv, int64_t batch_heads, int64_t tokens, int multiprocessors,
                         const ChunkShapeChoice& choice, int64_t sharing_jobs) {
  if (dk > 1024 || batch_heads < 1) return {};
  const int block = value_block_for(dv, choice);
  const ChunkKernel* kernel = block == 0 ? nullptr : find_chunk_kernel(dtype, static_cast<int>(dk), block);
  if (kernel == nullptr) return {};
  return shape_job(kernel, batch_heads, dk, dv, tokens, multiprocessors, choice, std::max<int64_t>(sharing_jobs, 1));
}

BackwardSharing backward_sharing(const ChunkShapeChoice& choice, int64_t dk, int64_t dv) {
  // dQ and dK always have the same shape (Dk' = Dv, Dv' = Dk); dV has it too when Dk == Dv. The value block
  // follows the job's value dim (value_block_for), so equal dims give one instance.
  if (!choice.joint_backward) return {};
  return dk == dv ? BackwardSharing{3, 3} : BackwardSharing{2, 1};
}

const ChunkKernel* decode_kernel_for(DType dtype, int64_t batch_heads, int64_t tokens, int64_t dk, int64_t dv,
                                     const ChunkShapeChoice& choice) {
  // A few tokens against the state: the recurrent kernel reads and writes the state once, on CUDA cores.
  if (!choice.decode || tokens > kDecodeMaxTokens || dv % 64 != 0 || dk > 1024) return nullptr;
  const ChunkKernel* decode = find_decode_kernel(dtype, static_cast<int>(dk));
  if (decode == nullptr || batch_heads * (dv / 64) > std::numeric_limits<int32_t>::max()) return nullptr;
  return decode;
}

ForwardSelection select_forward(const RetentionForward& problem, int multiprocessors) {
  return select_forward(problem, multiprocessors, forced_chunk_shape().value_or(ChunkShapeChoice{}));
}

ForwardSelection select_forward(const RetentionForward& problem, int multiprocessors, const ChunkShapeChoice& choice) {
  require_half_precision(problem.q);
  require_gamma_fits(problem.gamma, problem.q.extents[2]);
  ForwardSelection selection;
  if (!runs_chunk_jobs(problem)) {
    selection.job = select_normalized(problem);
    selection.wgmma = choice.wgmma;  // the plan's Hopper kernel for a decay matrix
    return selection;
  }
  const int64_t batch_heads = problem.q.extents[0] * problem.q.extents[2];
  const int64_t tokens = problem.q.extents[1];
  const int64_t dk = problem.q.extents[3], dv = problem.v.extents[3];
  if (const ChunkKernel* decode = decode_kernel_for(problem.q.dtype, batch_heads, tokens, dk, dv, choice)) {
    selection.job.kernel = decode;
    selection.job.segment_tokens = tokens;
    return selection;
  }
  selection.job = select_job(problem.q.dtype, dk, dv, batch_heads, tokens, multiprocessors, choice, "q: head dim Dk",
                             "v: head dim Dv", "a multiple of 32");
  selection.workspace_bytes = selection.job.workspace_bytes;
  selection.wgmma = choice.wgmma;
  selection.wgmma_wide_dv = wgmma_wide_dv(choice, dv);
  return selection;
}

const ChunkKernel* wgmma_chunk_kernel_for(const ChunkKernel* kernel, int64_t wide_dv, int compute_capability) {
  if (compute_capability != 90 || kernel == nullptr || std::strcmp(kernel->family, "chunk64") != 0) return nullptr;
  if (kernel->head_dim == 128 && kernel->value_block == 64 && wide_dv > 0 && wide_dv % 128 == 0) {
    if (const ChunkKernel* wide = find_wgmma_chunk_kernel(kernel->dtype, 128, 128)) return wide;
  }
  return find_wgmma_chunk_kernel(kernel->dtype, kernel->head_dim, kernel->value_block);
}

BackwardSelection select_backward(const RetentionBackward& problem, int multiprocessors) {
  return select_backward(problem, multiprocessors, forced_chunk_shape().value_or(ChunkShapeChoice{}));
}

BackwardSelection select_backward(const RetentionBackward& problem, int multiprocessors,
                                  const ChunkShapeChoice& choice) {
  require_half_precision(problem.q);
  require_gamma_fits(problem.gamma, problem.q.extents[2]);
  if (!runs_chunk_jobs(problem)) return select_parallel_backward(problem);
  const DType dtype = problem.q.dtype;
  const int64_t dk = problem.q.extents[3], dv = problem.v.extents[3];
  const int64_t batch_heads = problem.q.extents[0] * problem.q.extents[2];
  const int64_t tokens = problem.q.extents[1];
  // The dQ and dK jobs carry the state transposed: Dv is their key dim, Dk their value dim.
  const std::string both = chunk_head_dims_text() + " (the backward needs both Dk and Dv among them)";
  // An empty sequence has nothing to share: its jobs stay apart.
  ChunkShapeChoice used = choice;
  if (tokens == 0) used.joint_backward = false;
  const BackwardSharing sharing = backward_sharing(used, dk, dv);
  BackwardSelection selection;
  selection.dv = select_job(dtype, dk, dv, batch_heads, tokens, multiprocessors, used, "q: head dim Dk",
                            "v: head dim Dv", both.c_str(), sharing.dv);
  selection.dq = select_job(dtype, dv, dk, batch_heads, tokens, multiprocessors, used, "v: head dim Dv",
                            "q: head dim Dk", both.c_str(), sharing.dq);
  selection.dk = selection.dq;
  selection.joint = used.joint_backward;
  selection.wgmma = choice.wgmma;
  selection.wgmma_wide = choice.value_block == 0;
  selection.workspace_bytes = selection.joint ? 2 * selection.dq.workspace_bytes + selection.dv.workspace_bytes
                                              : std::max(selection.dv.workspace_bytes, selection.dq.workspace_bytes);
  return selection;
}

std::vector<float> log2_decay(const std::vector<double>& gamma, int64_t heads) {
  if (gamma.empty() && heads > kMaxParamHeads) return {};
  const std::vector<double> values = gamma.empty() ? default_retention_gamma(heads) : gamma;
  std::vector<float> out(values.size());
  for (std::size_t h = 0; h < values.size(); ++h) out[h] = static_cast<float>(std::log2(values[h]));
  return out;
}

ChunkJob fill_forward(const RetentionForward& problem, const ForwardSelection& selection,
                      const std::vector<float>& log2_gamma) {
  const auto job_of = [&](const JobShape& shape) {
    ChunkJob job = make_job(shape, problem.q, problem.k, problem.v, problem.out, false,
                            scale_of(problem.scale, problem.q.extents[3]), log2_gamma);
    job.params.initial_state = state(problem.initial_state, false);
    job.params.final_state = state(problem.final_state, false);
    if (detail::is_given(problem.decay)) {
      job.params.decay = decay_operand(problem.decay, problem.normalize);
      job.params.tokens_k = problem.k.extents[1];
      job.params.batches = static_cast<int32_t>(problem.q.extents[0]);
    }
    return job;
  };
  ChunkJob job = job_of(selection.job);
  // The Hopper decay-matrix kernel copies every operand in 16-byte pieces; other calls run the normalised-form kernel.
  if (selection.matrix_fallback != nullptr && (job.params.vector_access == 0 || job.params.decay.vector_rows == 0)) {
    JobShape fallback = selection.job;
    fallback.kernel = selection.matrix_fallback;
    job = job_of(fallback);
  }
  const int64_t heads = problem.q.extents[2], query_tokens = problem.q.extents[1];
  if (is_wgmma_matrix_kernel(*job.kernel)) {
    // One CTA per (head, 128-row query block, batch, value block), the batches in whole clusters.
    job.params.decay.cluster = matrix_cluster_size(problem.q.extents[0]);
    job.ctas =
        matrix_forward_ctas(problem.q.extents[0], heads, query_tokens, job.params.dv_slices, job.params.decay.cluster);
  } else if (problem.normalize || detail::is_given(problem.decay)) {
    // One CTA per (head, 64-row query block) and `members` of the (batch, value block) pairs; no states
    // (validation's rule).
    const int64_t pairs = problem.q.extents[0] * job.params.dv_slices;
    const int64_t members = job.kernel->members;
    job.ctas = (pairs + members - 1) / members * heads * ((query_tokens + 63) / 64);
  }
  return job;
}

void one_member_parallel_backward(const RetentionBackward& problem, BackwardSelection& selection) {
  const int dk = static_cast<int>(problem.q.extents[3]), dv = static_cast<int>(problem.v.extents[3]);
  const bool decay_f32 = problem.decay.dtype == DType::f32;
  selection.dq.kernel = find_parallel_backward_kernel(problem.q.dtype, dk, false);
  selection.dk.kernel = find_parallel_backward_kernel(problem.q.dtype, dk, true);
  selection.dv.kernel = selection.dk.kernel;
  const int shared_bytes = parallel_backward_shared_bytes(dk, dv, 2) +
                           decay_tiles_shared_bytes(detail::is_given(problem.decay), decay_f32, 2);
  for (JobShape* shape : {&selection.dq, &selection.dk, &selection.dv}) shape->shared_bytes = shared_bytes;
}

std::array<ChunkJob, 4> fill_parallel_backward(const RetentionBackward& problem, const BackwardSelection& selection,
                                               const std::vector<float>& log2_gamma, float* row_terms) {
  const int64_t query_blocks = (problem.q.extents[1] + 63) / 64;
  const int64_t key_blocks = (problem.k.extents[1] + 63) / 64;
  const int64_t dv = problem.v.extents[3];
  ChunkParams base;
  base.q = sequence(problem.q, false);
  base.k = sequence(problem.k, false);
  base.v = sequence(problem.v, false);
  base.grad_out = sequence(problem.grad_out, false);
  base.tokens = problem.q.extents[1];
  base.tokens_k = problem.k.extents[1];
  base.heads = static_cast<int32_t>(problem.q.extents[2]);
  base.dv_slices = 1;
  base.value_columns = static_cast<int32_t>(dv);
  base.scale = static_cast<float>(scale_of(problem.scale, problem.q.extents[3]));
  bool aligned = true;
  for (const TensorView* view :
       {&problem.q, &problem.k, &problem.v, &problem.grad_out, &problem.grad_q, &problem.grad_k, &problem.grad_v}) {
    aligned = aligned && vector_aligned(*view);
  }
  base.vector_access = aligned ? 1 : 0;
  base.default_gamma = log2_gamma.empty() ? 1 : 0;
  if (!log2_gamma.empty()) std::memcpy(base.log2_gamma, log2_gamma.data(), log2_gamma.size() * sizeof(float));
  if (detail::is_given(problem.decay)) base.decay = decay_operand(problem.decay, problem.normalize);
  base.batches = static_cast<int32_t>(problem.q.extents[0]);
  base.row_terms = problem.normalize ? row_terms : nullptr;

  auto job = [&](const JobShape& shape, ParallelBackwardRole role, const TensorView& out, int64_t ctas) {
    ChunkJob made;
    made.kernel = shape.kernel;
    made.params = base;
    made.params.backward_role = role;
    made.params.out = sequence(out, false);
    made.ctas = ctas;
    return made;
  };
  // CTAs: per (head, block), the (batch, value slice) pairs `members` to a CTA (one slice but for dV).
  const int64_t batch = problem.q.extents[0], heads = problem.q.extents[2];
  const auto ctas = [&](const JobShape& shape, int64_t blocks, int64_t slices) {
    const int64_t members = shape.kernel->members;
    return (batch * slices + members - 1) / members * heads * blocks;
  };
  std::array<ChunkJob, 4> jobs;
  jobs[0] = job(selection.dq, kRowTermsRole, problem.grad_q, ctas(selection.dq, query_blocks, 1));
  if (!problem.normalize) jobs[0].kernel = nullptr;
  jobs[1] = job(selection.dq, kGradQRole, problem.grad_q, ctas(selection.dq, query_blocks, 1));
  jobs[2] = job(selection.dk, kGradKRole, problem.grad_k, ctas(selection.dk, key_blocks, 1));
  // dV slices as wide as the key-side kernel's Dk accumulators when they tile Dv, else 64 columns.
  const int64_t dk = problem.q.extents[3];
  const int64_t slices = dv % dk == 0 ? dv / dk : dv / 64;
  jobs[3] = job(selection.dv, kGradVRole, problem.grad_v, ctas(selection.dv, key_blocks, slices));
  jobs[3].params.dv_slices = static_cast<int32_t>(slices);
  return jobs;
}

std::array<ChunkJob, 3> fill_backward(const RetentionBackward& problem, const BackwardSelection& selection,
                                      const std::vector<float>& log2_gamma) {
  const double scale = scale_of(problem.scale, problem.q.extents[3]);
  const bool any_tokens = problem.q.extents[1] > 0;
  std::array<ChunkJob, 3> jobs;
  jobs[0] = make_job(selection.dq, problem.grad_out, problem.v, problem.k, problem.grad_q, false, scale, log2_gamma);
  jobs[0].params.initial_state = state(problem.initial_state, true);
  jobs[1] = make_job(selection.dk, problem.v, problem.grad_out, problem.q, problem.grad_k, true, scale, log2_gamma);
  jobs[1].params.initial_state = state(problem.grad_final_state, true);
  jobs[1].params.gradient_state_factors = 1;
  jobs[2] = make_job(selection.dv, problem.k, problem.q, problem.grad_out, problem.grad_v, true, scale, log2_gamma);
  jobs[2].params.initial_state = state(problem.grad_final_state, false);
  jobs[2].params.final_state = state(problem.grad_initial_state, false);
  jobs[2].params.gradient_state_factors = 1;
  if (!any_tokens) {
    jobs[0].kernel = nullptr;
    jobs[1].kernel = nullptr;
    if (problem.grad_initial_state.data == nullptr) jobs[2].kernel = nullptr;
  }
  return jobs;
}

}  // namespace attnkit::cuda::retention
