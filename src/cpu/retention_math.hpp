// Small dense-vector helpers shared by the retention forms. The loops are plain so the compiler
// vectorises them; they work on rows of the gathered [T, X] and [Dk, Dv] buffers.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace attnkit::cpu::retention {

// Eight independent partial sums: without -ffast-math the compiler may not reorder a single running
// sum, and one sum is bound by the add latency; eight lanes vectorise and pipeline.
template <typename Acc>
inline Acc dot(const Acc* a, const Acc* b, int64_t n) {
  constexpr int64_t kLanes = 8;
  Acc partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t lane = 0; lane < kLanes; ++lane) partial[lane] += a[i + lane] * b[i + lane];
  }
  Acc sum = 0;
  for (; i < n; ++i) sum += a[i] * b[i];
  for (int64_t lane = 0; lane < kLanes; ++lane) sum += partial[lane];
  return sum;
}

// y += alpha * x
template <typename Acc>
inline void axpy(Acc alpha, const Acc* x, Acc* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

template <typename Acc>
inline void scale_in_place(Acc alpha, Acc* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

// gamma^0 .. gamma^n, each from std::pow in double so long sequences do not accumulate the error
// of repeated multiplication.
template <typename Acc>
inline std::vector<Acc> decay_powers(double gamma, int64_t n) {
  std::vector<Acc> powers(static_cast<std::size_t>(n + 1));
  for (int64_t i = 0; i <= n; ++i)
    powers[static_cast<std::size_t>(i)] = static_cast<Acc>(std::pow(gamma, static_cast<double>(i)));
  return powers;
}

// The rank-1 update state += alpha * a^T x, i.e. state[i, :] += alpha * a[i] * x.
template <typename Acc>
inline void add_outer(Acc alpha, const Acc* a, const Acc* x, Acc* state, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) axpy(alpha * a[i], x, state + i * cols, cols);
}

// y[0..cols) += alpha * a S  (a row vector times the [rows, cols] matrix S)
template <typename Acc>
inline void add_row_times_matrix(Acc alpha, const Acc* a, const Acc* s, Acc* y, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) axpy(alpha * a[i], s + i * cols, y, cols);
}

// y[0..rows) += alpha * S x  (the [rows, cols] matrix S times a column vector)
template <typename Acc>
inline void add_matrix_times_column(Acc alpha, const Acc* s, const Acc* x, Acc* y, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) y[i] += alpha * dot(s + i * cols, x, cols);
}

}  // namespace attnkit::cpu::retention
