#include "cuda/gemm/gemm_staging.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"

namespace attnkit::cuda::gemm {
namespace {

constexpr int kAccessBytes = 16;
constexpr int64_t kRegionAlignment = 256;
constexpr int kCopyThreads = 256;

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One operand as the copy sees it: [batches][outer][inner] elements, the inner dimension contiguous.
struct OperandLayout {
  int64_t inner = 0, outer = 0, outer_stride = 0, batch_stride = 0;
  const void* data = nullptr;
};

OperandLayout layout_a(const GemmShape& s) {
  return s.a_k_major() ? OperandLayout{s.k, s.m, s.a_row, s.a_batch, s.a}
                       : OperandLayout{s.m, s.k, s.a_col, s.a_batch, s.a};
}
OperandLayout layout_b(const GemmShape& s) {
  return s.b_k_major() ? OperandLayout{s.k, s.n, s.b_col, s.b_batch, s.b}
                       : OperandLayout{s.n, s.k, s.b_row, s.b_batch, s.b};
}
OperandLayout layout_c(const GemmShape& s) { return OperandLayout{s.n, s.m, s.c_row, s.c_batch, s.c}; }

bool fits(int64_t elements, int64_t size) { return elements * size % kAccessBytes == 0; }

// TMA's rule: base address, leading dimension (when more than one row / column is addressed; a stride of
// 0 there, a broadcast row, is refused too) and batch stride 16-byte aligned.
bool tma_ready(const OperandLayout& o, int64_t size) {
  if (reinterpret_cast<std::uintptr_t>(o.data) % kAccessBytes != 0) return false;
  if (o.outer > 1 && (o.outer_stride <= 0 || !fits(o.outer_stride, size))) return false;
  return fits(o.batch_stride, size) && o.batch_stride >= 0;
}

// The staged copy of an operand of `outer` x `inner` (padded) extents: dense, 16-byte rows.
struct Region {
  int64_t ld = 0, matrix = 0, batches = 0, offset = 0, bytes = 0;
};

Region region_of(int64_t inner, int64_t outer, bool broadcast, int64_t batch, int64_t size) {
  Region r;
  r.ld = round_up(std::max<int64_t>(inner, 1), kAccessBytes / size);
  r.matrix = r.ld * std::max<int64_t>(outer, 1);
  r.batches = broadcast ? 1 : batch;
  r.bytes = round_up(r.matrix * r.batches * size, kRegionAlignment);
  return r;
}

// A copy of [batches][outer][inner] elements from one strided place to another; elements at or beyond the
// source's extents (padding) are written as zero. `source_vectors` / `destination_vectors`: that side's rows
// start on 16-byte boundaries (base, row and batch strides), so a whole 16-byte piece moves in one access.
struct CopyJob {
  const unsigned char* source = nullptr;
  unsigned char* destination = nullptr;
  int64_t inner = 0, outer = 0, batches = 0;                 // the destination's extents
  int64_t source_inner = 0, source_outer = 0;                // the source's extents
  int64_t source_outer_stride = 0, source_batch_stride = 0;  // elements
  int64_t destination_outer_stride = 0, destination_batch_stride = 0;
  bool source_vectors = false, destination_vectors = false;
};

struct CopyJobs {
  CopyJob job[3];
};

constexpr int kWarpsPerCopyBlock = kCopyThreads / 32;
constexpr int kPiecesPerLane = 2;  // 16-byte pieces a lane moves per step: their loads are all in flight together
constexpr int kPiecesPerStep = 32 * kPiecesPerLane;

// Pieces of 16 bytes along a row, and steps of one warp (kPiecesPerStep pieces) to cover it.
__host__ __device__ inline int64_t pieces_of(int64_t inner, int size) { return (inner * size + 15) / 16; }
__host__ __device__ inline int64_t steps_of(int64_t inner, int size) {
  return (pieces_of(inner, size) + kPiecesPerStep - 1) / kPiecesPerStep;
}

// Staging copy: each warp step moves kPiecesPerStep pieces of 16 bytes of one destination row (a row's
// steps and the rows' steps are one flat index, so a few long rows and many short ones both spread over
// every warp). A lane's pieces are first all loaded (one 16-byte load where the source side allows and the
// piece lies inside the source row, else element by element, zero outside the source's extents), then all
// stored: the loads of a step are in flight together (2 KB a warp), as a copy needs to reach the memory bandwidth.
template <class Word>
__global__ void __launch_bounds__(kCopyThreads) copy_operands(const CopyJobs jobs) {
  constexpr int kWords = 16 / static_cast<int>(sizeof(Word));
  const CopyJob& j = jobs.job[blockIdx.y];
  const auto* source = reinterpret_cast<const Word*>(j.source);
  auto* destination = reinterpret_cast<Word*>(j.destination);
  const int64_t steps_per_row = steps_of(j.inner, sizeof(Word));
  const int64_t steps = steps_per_row * j.outer * j.batches;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int64_t step = static_cast<int64_t>(blockIdx.x) * kWarpsPerCopyBlock + threadIdx.x / 32; step < steps;
       step += static_cast<int64_t>(gridDim.x) * kWarpsPerCopyBlock) {
    const int64_t row = step / steps_per_row, first_piece = step % steps_per_row * kPiecesPerStep;
    const int64_t l = row / j.outer, o = row % j.outer;
    const Word* from = source + l * j.source_batch_stride + o * j.source_outer_stride;
    Word* to = destination + l * j.destination_batch_stride + o * j.destination_outer_stride;
    const int64_t readable = o >= j.source_outer ? 0 : j.source_inner < j.inner ? j.source_inner : j.inner;
    uint4 piece[kPiecesPerLane];
#pragma unroll
    for (int p = 0; p < kPiecesPerLane; ++p) {
      const int64_t begin = (first_piece + p * 32 + lane) * kWords;
      if (j.source_vectors && begin + kWords <= readable) {
        piece[p] = __ldg(reinterpret_cast<const uint4*>(from + begin));
      } else {
        Word words[kWords];
#pragma unroll
        for (int w = 0; w < kWords; ++w) words[w] = begin + w < readable ? __ldg(from + begin + w) : Word(0);
        memcpy(&piece[p], words, sizeof(words));
      }
    }
#pragma unroll
    for (int p = 0; p < kPiecesPerLane; ++p) {
      const int64_t begin = (first_piece + p * 32 + lane) * kWords;
      if (begin >= j.inner) continue;
      if (j.destination_vectors && begin + kWords <= j.inner) {
        *reinterpret_cast<uint4*>(to + begin) = piece[p];
      } else {
        Word words[kWords];
        memcpy(words, &piece[p], sizeof(words));
#pragma unroll
        for (int w = 0; w < kWords; ++w) {
          if (begin + w < j.inner) to[begin + w] = words[w];
        }
      }
    }
  }
}

// A transposing copy of one operand: the source [batches][rows][columns] (columns contiguous) into the
// destination [batches][destination_rows][rows] (rows contiguous); destination rows from `columns` on (the
// padding of a rounded N) are written zero. Each CTA moves one 32 x 32 tile through shared memory (a column
// of 33 words, so that the column reads of the second half meet 32 banks): loads and stores of a warp are
// each one 128-byte row of the tile.
struct TransposeJob {
  const unsigned char* source = nullptr;
  unsigned char* destination = nullptr;
  int64_t rows = 0, columns = 0, destination_rows = 0, batches = 0;
  int64_t source_row_stride = 0, source_batch_stride = 0;  // elements
  int64_t destination_row_stride = 0, destination_batch_stride = 0;
};

constexpr int kTransposeTile = 32;
constexpr int kTransposeThreads = 256;
constexpr int kTransposeRowsPerPass = kTransposeThreads / kTransposeTile;
constexpr int64_t kMaxGridExtent = 65535;

template <class Word>
__global__ void __launch_bounds__(kTransposeThreads) transpose_operand(const TransposeJob j) {
  __shared__ Word tile[kTransposeTile][kTransposeTile + 1];
  const int x = static_cast<int>(threadIdx.x) % kTransposeTile, y = static_cast<int>(threadIdx.x) / kTransposeTile;
  const int64_t column0 = static_cast<int64_t>(blockIdx.x) * kTransposeTile;  // source columns: destination rows
  for (int64_t batch = blockIdx.z; batch < j.batches; batch += gridDim.z) {
    const Word* source = reinterpret_cast<const Word*>(j.source) + batch * j.source_batch_stride;
    Word* destination = reinterpret_cast<Word*>(j.destination) + batch * j.destination_batch_stride;
    for (int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTransposeTile; row0 < j.rows;
         row0 += static_cast<int64_t>(gridDim.y) * kTransposeTile) {
#pragma unroll
      for (int r = y; r < kTransposeTile; r += kTransposeRowsPerPass) {
        const int64_t row = row0 + r, column = column0 + x;
        tile[r][x] = row < j.rows && column < j.columns ? __ldg(source + row * j.source_row_stride + column) : Word(0);
      }
      __syncthreads();
#pragma unroll
      for (int r = y; r < kTransposeTile; r += kTransposeRowsPerPass) {
        const int64_t out_row = column0 + r, out_column = row0 + x;
        if (out_row < j.destination_rows && out_column < j.rows) {
          destination[out_row * j.destination_row_stride + out_column] = tile[x][r];
        }
      }
      __syncthreads();  // the tile is rewritten by the next rows
    }
  }
}

class StagedRunner final : public GemmRunner {
 public:
  StagedRunner(const GemmShape& shape, const GemmStaging& staging, std::unique_ptr<GemmRunner> inner,
               const GemmDevice& device)
      : staging_(staging), inner_(std::move(inner)), multiprocessors_(std::max(device.multiprocessors, 1)) {
    size_ = static_cast<int64_t>(dtype_size(shape.dtype));
    if (staging.transpose_b && size_ != 4) {
      throw Error(Status::internal, "gemm staging: B is transposed for 4-byte elements only");
    }
    staged_ = staged_shape(shape, staging);
    int64_t offset = round_up(inner_->workspace_bytes(), kRegionAlignment);
    auto place = [&](bool staged, const OperandLayout& padded, int64_t batch_stride, Region& r) {
      if (!staged) return;
      r = region_of(padded.inner, padded.outer, batch_stride == 0, shape.batch, size_);
      r.offset = offset;
      offset += r.bytes;
    };
    place(staging.a, layout_a(staged_), shape.a_batch, a_);
    place(staging.b, layout_b(staged_), shape.b_batch, b_);
    place(staging.c, layout_c(staged_), shape.c_batch, c_);
    workspace_bytes_ = offset;
  }

  int64_t workspace_bytes() const override { return workspace_bytes_; }

  void run(const GemmShape& shape, float alpha, float beta, void* workspace, cudaStream_t stream) const override {
    auto* base = static_cast<unsigned char*>(workspace);
    GemmShape staged = staged_;
    staged.a = staging_.a ? base + a_.offset : shape.a;
    staged.b = staging_.b ? base + b_.offset : shape.b;
    staged.c = staging_.c ? base + c_.offset : shape.c;
    CopyJobs in{};
    int count = 0;
    if (staging_.a) in.job[count++] = job_in(layout_a(shape), layout_a(staged), a_);
    if (staging_.b && !staging_.transpose_b) in.job[count++] = job_in(layout_b(shape), layout_b(staged), b_);
    if (staging_.c && beta != 0.0f) in.job[count++] = job_in(layout_c(shape), layout_c(staged), c_);
    if (staging_.transpose_b) transpose_b(shape, staged, stream);
    launch(in, count, stream);
    inner_->run(staged, alpha, beta, base, stream);
    if (staging_.c) {
      // Back into C's view: its own extents only (a padded C's extra rows and columns are dropped).
      const OperandLayout from = layout_c(staged), to = layout_c(shape);
      CopyJobs out{};
      CopyJob& j = out.job[0];
      j.source = static_cast<const unsigned char*>(from.data);
      j.destination = static_cast<unsigned char*>(const_cast<void*>(to.data));
      j.inner = j.source_inner = to.inner;
      j.outer = j.source_outer = to.outer;
      j.batches = shape.batch;
      j.source_outer_stride = c_.ld;
      j.source_batch_stride = shape.c_batch == 0 ? 0 : c_.matrix;
      j.destination_outer_stride = to.outer_stride;
      j.destination_batch_stride = to.batch_stride;
      launch(out, 1, stream);
    }
  }

 private:
  CopyJob job_in(const OperandLayout& from, const OperandLayout& to, const Region& r) const {
    CopyJob j;
    j.source = static_cast<const unsigned char*>(from.data);
    j.destination = static_cast<unsigned char*>(const_cast<void*>(to.data));
    j.inner = to.inner;
    j.outer = to.outer;
    j.batches = r.batches;
    j.source_inner = from.inner;
    j.source_outer = from.outer;
    j.source_outer_stride = from.outer_stride;
    j.source_batch_stride = from.batch_stride;
    j.destination_outer_stride = r.ld;
    j.destination_batch_stride = r.matrix;
    return j;
  }

  // B (MN-major: K rows of N) into its K-major region (N rows, padded, of K).
  void transpose_b(const GemmShape& shape, const GemmShape& staged, cudaStream_t stream) const {
    const OperandLayout from = layout_b(shape), to = layout_b(staged);
    TransposeJob j;
    j.source = static_cast<const unsigned char*>(from.data);
    j.destination = static_cast<unsigned char*>(const_cast<void*>(to.data));
    j.rows = from.outer;
    j.columns = from.inner;
    j.destination_rows = to.outer;
    j.batches = b_.batches;
    j.source_row_stride = from.outer_stride;
    j.source_batch_stride = from.batch_stride;
    j.destination_row_stride = b_.ld;
    j.destination_batch_stride = b_.matrix;
    if (j.rows == 0 || j.destination_rows == 0 || j.batches == 0) return;
    auto extent = [](int64_t n) {
      return static_cast<unsigned>(std::min((n + kTransposeTile - 1) / kTransposeTile, kMaxGridExtent));
    };
    const dim3 grid(static_cast<unsigned>((j.destination_rows + kTransposeTile - 1) / kTransposeTile), extent(j.rows),
                    static_cast<unsigned>(std::min(j.batches, kMaxGridExtent)));
    transpose_operand<uint32_t><<<grid, kTransposeThreads, 0, stream>>>(j);
    check_launch("gemm staging transpose");
  }

  void launch(CopyJobs& jobs, int count, cudaStream_t stream) const {
    if (count == 0) return;
    int64_t steps = 0;
    for (int i = 0; i < count; ++i) {
      CopyJob& j = jobs.job[i];
      // A side whose rows all start on 16-byte boundaries: TMA's rule.
      j.source_vectors = tma_ready(
          OperandLayout{j.source_inner, j.source_outer, j.source_outer_stride, j.source_batch_stride, j.source}, size_);
      j.destination_vectors = tma_ready(
          OperandLayout{j.inner, j.outer, j.destination_outer_stride, j.destination_batch_stride, j.destination},
          size_);
      steps = std::max(steps, steps_of(j.inner, static_cast<int>(size_)) * j.outer * j.batches);
    }
    const auto blocks = static_cast<unsigned>(
        std::clamp<int64_t>((steps + kWarpsPerCopyBlock - 1) / kWarpsPerCopyBlock, 1, int64_t{multiprocessors_} * 8));
    const dim3 grid(blocks, static_cast<unsigned>(count));
    if (size_ == 2) {
      copy_operands<uint16_t><<<grid, kCopyThreads, 0, stream>>>(jobs);
    } else {
      copy_operands<uint32_t><<<grid, kCopyThreads, 0, stream>>>(jobs);
    }
    check_launch("gemm staging copy");
  }

  GemmStaging staging_;
  std::unique_ptr<GemmRunner> inner_;
  int multiprocessors_ = 1;
  int64_t size_ = 2;
  GemmShape staged_;
  Region a_, b_, c_;
  int64_t workspace_bytes_ = 0;
};

}  // namespace

bool gemm_n_aligned(const GemmShape& s) { return fits(s.n, static_cast<int64_t>(dtype_size(s.dtype))); }

GemmStaging tma_staging(const GemmShape& s) {
  const auto size = static_cast<int64_t>(dtype_size(s.dtype));
  GemmStaging staging;
  staging.pad_n = !gemm_n_aligned(s);
  staging.a = !tma_ready(layout_a(s), size);
  staging.b = staging.pad_n || !tma_ready(layout_b(s), size);
  staging.c = staging.pad_n || !tma_ready(layout_c(s), size);
  return staging;
}

GemmStaging transposed_b_staging(const GemmShape& s) {
  GemmStaging staging = tma_staging(s);
  staging.b = true;
  staging.transpose_b = true;
  return staging;
}

bool gemm_transposed_b_pays(const GemmShape& s) {
  const int64_t rows = s.m * (s.b_batch == 0 ? std::max<int64_t>(s.batch, 1) : 1);
  return s.dtype == DType::f32 && s.a_k_major() && !s.b_k_major() && rows >= kTransposedBMinRows;
}

bool tma_addressable(const GemmShape& s) {
  const auto size = static_cast<int64_t>(dtype_size(s.dtype));
  return tma_ready(layout_a(s), size) && tma_ready(layout_b(s), size) && tma_ready(layout_c(s), size);
}

GemmStaging padded_staging(const GemmShape& s) {
  const auto size = static_cast<int64_t>(dtype_size(s.dtype));
  GemmStaging extents;
  extents.pad_extents = true;
  const GemmShape padded = staged_shape(s, extents);
  auto needs = [&](const OperandLayout& o, const OperandLayout& p) {
    return !tma_ready(o, size) || !fits(o.inner, size) || o.inner != p.inner || o.outer != p.outer;
  };
  GemmStaging staging;
  staging.pad_extents = true;
  staging.a = needs(layout_a(s), layout_a(padded));
  staging.b = needs(layout_b(s), layout_b(padded));
  staging.c = needs(layout_c(s), layout_c(padded));
  return staging;
}

GemmShape staged_shape(const GemmShape& s, const GemmStaging& staging) {
  const auto size = static_cast<int64_t>(dtype_size(s.dtype));
  const int64_t vector = kAccessBytes / size;
  GemmShape t = s;
  if (staging.pad_extents) {
    if ((s.a_k_major() || s.b_k_major()) && s.k % vector != 0) t.k = round_up(s.k, vector);
    if (!s.a_k_major() && s.m % vector != 0) t.m = round_up(s.m, vector);
    if (s.n % vector != 0) t.n = round_up(s.n, vector);  // C is row-major: N is its contiguous extent
  }
  if (staging.pad_n) t.n = round_up(s.n, vector);
  // Placeholders: 16-byte aligned, never dereferenced on the host.
  static const unsigned char* const kPlaceholder = reinterpret_cast<const unsigned char*>(uintptr_t{1} << 12);
  if (staging.a) {
    const Region r = region_of(t.a_k_major() ? t.k : t.m, t.a_k_major() ? t.m : t.k, s.a_batch == 0, s.batch, size);
    (t.a_k_major() ? t.a_row : t.a_col) = r.ld;
    t.a_batch = s.a_batch == 0 ? 0 : r.matrix;
    t.a = kPlaceholder;
  }
  if (staging.transpose_b) {  // K-major: element (p, j) at p + j * b_col, b_col set with the region below
    t.b_row = 1;
    t.b_col = std::max<int64_t>(t.k, 1);
  }
  if (staging.b) {
    const Region r = region_of(t.b_k_major() ? t.k : t.n, t.b_k_major() ? t.n : t.k, s.b_batch == 0, s.batch, size);
    (t.b_k_major() ? t.b_col : t.b_row) = r.ld;
    t.b_batch = s.b_batch == 0 ? 0 : r.matrix;
    t.b = kPlaceholder;
  }
  if (staging.c) {
    const Region r = region_of(t.n, t.m, s.c_batch == 0, s.batch, size);
    t.c_row = r.ld;
    t.c_batch = s.c_batch == 0 ? 0 : r.matrix;
    t.c = const_cast<unsigned char*>(kPlaceholder);
  }
  return t;
}

std::unique_ptr<GemmRunner> make_staged_runner(const GemmShape& shape, const GemmStaging& staging,
                                               std::unique_ptr<GemmRunner> inner, const GemmDevice& device) {
  if (!staging.any()) return inner;
  return std::make_unique<StagedRunner>(shape, staging, std::move(inner), device);
}

}  // namespace attnkit::cuda::gemm
