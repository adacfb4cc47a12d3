// CPU GEMM, C = alpha * op(A) * op(B) + beta * C, in the usual packed, cache-blocked form.
// The work is cut into independent tasks of (batch, MC rows, NC columns) of C, shared by OpenMP.
// A task walks the depth in steps of KC: it packs the KC x NC panel of op(B) (kept in L2, each
// NR-column sliver hot in L1 while used) and the MC x KC block of op(A), then runs the micro-kernel
// over every MR x NR tile, accumulating into a float (double for f64) tile buffer. Only after the
// full depth is C touched: C = alpha * acc + beta * C, converting to C's dtype once, so f16/bf16
// results are rounded once from a full-precision sum and beta == 0 never reads C.
// Packing cost relative to the arithmetic is about 1/(2*MC) + 1/(2*NC), a few percent at most.
#include <omp.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/error.hpp"
#include "core/float_convert.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/gemm_micro_kernel.hpp"
#include "cpu/gemm_operand.hpp"
#include "cpu/gemm_pack.hpp"

namespace attnkit::cpu {
namespace {

using gemm_detail::GemmOperand;
using gemm_detail::MicroTile;

template <typename Acc>
struct Blocking {
  static constexpr int64_t mr = MicroTile<Acc>::rows;
  static constexpr int64_t nr = MicroTile<Acc>::cols;
  static constexpr int64_t mc = 16 * mr;  // A block: 96 x 256 values, in L2
  static constexpr int64_t kc = 256;      // B sliver: 256 x NR values, about 16 KiB, in L1
  static constexpr int64_t nc = 16 * nr;  // B panel: 256 x NC values, in L2
};

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// The batch count of the call: the largest batch extent. Validation guarantees the rest; the backend
// re-checks what would otherwise read or write out of bounds (every batch extent 1 or the full count,
// C never broadcast, matching inner extents).
int64_t checked_batch_count(const GemmOperand& a, const GemmOperand& b, const GemmOperand& c) {
  const int64_t batch = std::max({a.batch, b.batch, c.batch});
  for (const auto& [op, name] : {std::pair{&a, "a"}, {&b, "b"}, {&c, "c"}}) {
    if (op->batch != batch && (op->batch != 1 || op == &c)) {
      throw Error(Status::invalid_argument, std::string(name) + ": batch extent " + std::to_string(op->batch) +
                                                " with a batch of " + std::to_string(batch) +
                                                "; allowed: the full batch, or 1 (broadcast) for a and b");
    }
  }
  if (a.cols != b.rows || a.rows != c.rows || b.cols != c.cols) {
    throw Error(Status::invalid_argument, "a, b, c: op(a) is " + std::to_string(a.rows) + " x " +
                                              std::to_string(a.cols) + ", op(b) " + std::to_string(b.rows) + " x " +
                                              std::to_string(b.cols) + ", c " + std::to_string(c.rows) + " x " +
                                              std::to_string(c.cols) + "; allowed: [M, K] x [K, N] -> [M, N]");
  }
  return batch;
}

// C[rows, cols] at (b, i0, j0) = alpha * tile + beta * C, tile row stride ldt.
template <typename Acc>
void write_back(const GemmOperand& c, void* c_data, int64_t b, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                const Acc* tile, int64_t ldt, Acc alpha, Acc beta) {
  auto store = [&](auto* dst, auto widen, auto narrow) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        auto& element = dst[c.offset(b, i0 + i, j0 + j)];
        Acc value = alpha * tile[i * ldt + j];
        if (beta != Acc(0)) value += beta * static_cast<Acc>(widen(element));
        element = narrow(value);
      }
    }
  };
  switch (c.dtype) {
    case DType::f32:
      store(
          static_cast<float*>(c_data), [](float x) { return x; }, [](Acc x) { return static_cast<float>(x); });
      break;
    case DType::f64:
      store(
          static_cast<double*>(c_data), [](double x) { return x; }, [](Acc x) { return static_cast<double>(x); });
      break;
    case DType::f16:
      store(static_cast<uint16_t*>(c_data), detail::half_to_float,
            [](Acc x) { return detail::float_to_half(static_cast<float>(x)); });
      break;
    case DType::bf16:
      store(static_cast<uint16_t*>(c_data), detail::bf16_to_float,
            [](Acc x) { return detail::float_to_bf16(static_cast<float>(x)); });
      break;
    case DType::boolean:
      throw Error(Status::unsupported, "c: dtype bool; allowed: float32, float16, bfloat16, float64");
  }
}

template <typename Acc>
void gemm_typed(const GemmProblem& p, const RunOptions& options) {
  using Blk = Blocking<Acc>;
  const GemmOperand a = gemm_detail::operand_of(p.a, p.transpose_a);
  const GemmOperand b = gemm_detail::operand_of(p.b, p.transpose_b);
  const GemmOperand c = gemm_detail::operand_of(p.c, false);
  const int64_t batch = checked_batch_count(a, b, c);
  const int64_t M = c.rows, N = c.cols, K = a.cols;
  const auto alpha = static_cast<Acc>(p.alpha), beta = static_cast<Acc>(p.beta);
  const bool product_is_zero = K == 0 || p.alpha == 0.0;  // BLAS: alpha == 0 does not read A or B

  const int64_t mc = std::min(Blk::mc, round_up(std::max<int64_t>(M, 1), Blk::mr));
  const int64_t nc = std::min(Blk::nc, round_up(std::max<int64_t>(N, 1), Blk::nr));
  const int64_t kc_max = std::min(Blk::kc, std::max<int64_t>(K, 1));
  const int64_t row_blocks = (M + mc - 1) / mc, col_blocks = (N + nc - 1) / nc;
  const int64_t tasks = batch * row_blocks * col_blocks;
  const int threads = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();

#pragma omp parallel num_threads(static_cast <int>(std::min <int64_t>(threads, std::max <int64_t>(tasks, 1))))
  {
    std::vector<Acc> a_pack(static_cast<std::size_t>(mc * kc_max));
    std::vector<Acc> b_pack(static_cast<std::size_t>(kc_max * nc));
    std::vector<Acc> tile(static_cast<std::size_t>(mc * nc));
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t bi = task / (row_blocks * col_blocks);
      const int64_t i0 = (task / col_blocks) % row_blocks * mc;
      const int64_t j0 = task % col_blocks * nc;
      const int64_t rows = std::min(mc, M - i0), cols = std::min(nc, N - j0);
      const int64_t row_slivers = (rows + Blk::mr - 1) / Blk::mr, col_slivers = (cols + Blk::nr - 1) / Blk::nr;
      if (product_is_zero) std::fill(tile.begin(), tile.end(), Acc(0));
      for (int64_t p0 = 0; p0 < K && !product_is_zero; p0 += kc_max) {
        const int64_t kc = std::min(kc_max, K - p0);
        gemm_detail::pack_b(b, bi, p0, kc, j0, cols, Blk::nr, b_pack.data());
        gemm_detail::pack_a(a, bi, i0, rows, p0, kc, Blk::mr, a_pack.data());
        for (int64_t js = 0; js < col_slivers; ++js) {
          for (int64_t is = 0; is < row_slivers; ++is) {
            gemm_detail::micro_kernel(kc, a_pack.data() + is * kc * Blk::mr, b_pack.data() + js * kc * Blk::nr,
                                      tile.data() + is * Blk::mr * nc + js * Blk::nr, nc, p0 > 0);
          }
        }
      }
      write_back(c, p.c.data, bi, i0, rows, j0, cols, tile.data(), nc, alpha, beta);
    }
  }
}

}  // namespace

void gemm(const GemmProblem& problem, const RunOptions& options) {
  if (problem.a.dtype == DType::f64) {
    gemm_typed<double>(problem, options);
  } else {
    gemm_typed<float>(problem, options);
  }
}

}  // namespace attnkit::cpu
