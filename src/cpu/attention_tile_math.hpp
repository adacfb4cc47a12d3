// The arithmetic of CPU attention on a tile of query rows, forward and backward.
//
// A tile is kTileRows query rows that visit (nearly) the same keys; their union is laid out in
// slots (attention_tile_keys.hpp). Every product is a small register-blocked GEMM whose inner loop
// is a fixed-width vector multiply-add over one 64-byte line (kChunk = kLanes accumulator values),
// with no horizontal sums:
//  - scores S[row][slot] = A[row] . B[key] read B transposed ([depth][position]): per depth step,
//    one line of kChunk consecutive keys times each row's broadcast value, into
//    kSplit x kTileRows x kChunk accumulators (kSplit interleaves depth steps so enough
//    independent chains hide the multiply-add latency);
//  - weighted sums out[row] = sum_slot W[row][slot] B[key] read B by rows ([position][width]):
//    per key, one line of columns times each row's weight, kChunk columns at a time;
//  - key gradients G[key] += sum_row W[row][slot] A[row]: per key, a line of G gets one
//    multiply-add per tile row while the tile's A line stays in registers.
// Softmax is exact two-pass per row over its slots: slots the row does not visit are set to -inf
// and become exactly 0 after the exponential (a polynomial exp in float, std::exp in double).
// The tile and split sizes depend on the instruction set (attention_isa.hpp); like the rest of
// attention_kernels.hpp this header is compiled once per set inside ATTNKIT_CPU_ISA_NAMESPACE.

// GCC vectorises a max reduction when asked; Clang declines without fast-math and warns, so it
// gets a plain loop.
#if defined(__clang__)
#define ATTNKIT_CPU_SIMD_MAX_SCORE
#else
#define ATTNKIT_CPU_SIMD_MAX_SCORE _Pragma("omp simd reduction(max : max_score)")
#endif

namespace attnkit::cpu::ATTNKIT_CPU_ISA_NAMESPACE {

inline constexpr int kTileRows = ATTNKIT_CPU_TILE_ROWS;
inline constexpr int kSplit = ATTNKIT_CPU_SPLIT;
static_assert(kTileRows <= kMaxTileRows);

template <class Acc>
inline constexpr int64_t kChunk = kLanes<Acc>;

// e^x for the x <= ~0 of softmax (x - max, or s - lse), as straight-line code so the softmax
// loop vectorises: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial (error
// below 1e-8, under float rounding), 2^n built in the exponent bits. n is read from the low bits
// of x log2(e) + 1.5 * 2^23 with unsigned arithmetic, so no input is undefined behaviour; below -87
// (where e^x < 2e-38) and for -inf the result is exactly 0, and NaN stays NaN (as std::exp does in
// the double path: a NaN score must reach the output, not vanish as a zero weight). Valid for x <= 88.
inline float softmax_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float shifted = x * kLog2e + kRoundMagic;
  const float n = shifted - kRoundMagic;
  // ln2 split into a part exact in float times any n up to 2^9, and the remainder.
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const uint32_t n_bits = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kRoundMagic);
  const float value = p * std::bit_cast<float>((n_bits + 127u) << 23);
  // A bit mask, not a branch: the compiler may not move the polynomial under a condition, which
  // would stop the loop from vectorising (it may not speculate floating-point operations).
  const uint32_t keep = 0u - static_cast<uint32_t>(!(x < -87.0f));
  return std::bit_cast<float>(std::bit_cast<uint32_t>(value) & keep);
}

// row[s] = e^(row[s] - shift) for s < slots; returns their sum. The float loop vectorises; the
// double one (std::exp, for fp64 checks) stays scalar, so it carries no simd request a compiler
// would have to decline.
inline float exponentiate(float* row, int64_t slots, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t s = 0; s < slots; ++s) {
    row[s] = softmax_exp(row[s] - shift);
    sum += row[s];
  }
  return sum;
}
inline double exponentiate(double* row, int64_t slots, double shift) {
  double sum = 0.0;
  for (int64_t s = 0; s < slots; ++s) {
    row[s] = std::exp(row[s] - shift);
    sum += row[s];
  }
  return sum;
}

// Per-thread buffers of one tile: its rows' inputs, its keys, and kTileRows score rows.
template <class Acc>
struct TileBuffers {
  std::vector<Acc> a;                      // [kTileRows][d_pad]   q (forward: pre-scaled)
  std::vector<Acc> b;                      // [kTileRows][dv_pad]  forward: output; backward: dout
  std::vector<Acc> c;                      // [kTileRows][d_pad]   backward: dq
  std::vector<Acc> scores;                 // [kTileRows][slot_capacity]  S, then P
  std::vector<Acc> dscores;                // [kTileRows][slot_capacity]  backward: dP, then dS
  std::array<Acc, kTileRows> row_value{};  // forward: 1/sum; backward: lse
  std::array<Acc, kTileRows> row_delta{};  // backward: dout . out
  TileKeys keys;
  int64_t slot_capacity = 0;

  void allocate(int64_t d_pad, int64_t dv_pad, int64_t capacity, bool backward, size_t runs) {
    slot_capacity = capacity;
    a.assign(static_cast<size_t>(kTileRows * d_pad), Acc(0));
    b.assign(static_cast<size_t>(kTileRows * dv_pad), Acc(0));
    scores.assign(static_cast<size_t>(kTileRows * capacity), Acc(0));
    if (backward) {
      c.assign(static_cast<size_t>(kTileRows * d_pad), Acc(0));
      dscores.assign(static_cast<size_t>(kTileRows * capacity), Acc(0));
    }
    keys.reserve(runs);
  }
};

// scores[r][0, kChunk) = factor * sum_d a[r][d] * bt[d][p0 + j] for every tile row r.
template <class Acc>
inline void chunk_scores(const Acc* a, int64_t depth, const Acc* bt, int64_t bt_stride, int64_t p0, Acc factor,
                         Acc* scores, int64_t score_stride) {
  constexpr int64_t C = kChunk<Acc>;
  Acc acc[kSplit][kTileRows][C] = {};
  for (int64_t d = 0; d < depth; d += kSplit) {
    for (int s = 0; s < kSplit; ++s) {
      const Acc* line = bt + (d + s) * bt_stride + p0;
      for (int r = 0; r < kTileRows; ++r) {
        const Acc x = a[r * depth + d + s];
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) acc[s][r][j] += x * line[j];
      }
    }
  }
  for (int r = 0; r < kTileRows; ++r) {
    for (int s = 1; s < kSplit; ++s) {
#pragma omp simd
      for (int64_t j = 0; j < C; ++j) acc[0][r][j] += acc[s][r][j];
    }
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) scores[r * score_stride + j] = acc[0][r][j] * factor;
  }
}

// Scores of the tile rows a ([kTileRows][depth]) against every slot of the tile's keys.
template <class Acc>
inline void tile_scores(const Acc* a, int64_t depth, const Acc* bt, int64_t bt_stride, const TileKeys& keys, Acc factor,
                        Acc* scores, int64_t score_stride) {
  for (const KeySpan& span : keys.spans) {
    for (int64_t k = 0; k < span.end - span.begin; k += kChunk<Acc>) {
      chunk_scores(a, depth, bt, bt_stride, span.begin + k, factor, scores + span.slot + k, score_stride);
    }
  }
}

// out[r][0, width) = row_factor[r] * sum over the tile's keys of w[r][slot] * rows[key].
template <class Acc>
inline void tile_weighted_sum(const Acc* w, int64_t w_stride, const TileKeys& keys, const Acc* rows, int64_t width,
                              const Acc* row_factor, Acc* out) {
  constexpr int64_t C = kChunk<Acc>;
  for (int64_t c0 = 0; c0 < width; c0 += C) {
    Acc acc[kSplit][kTileRows][C] = {};
    for (const KeySpan& span : keys.spans) {
      const int64_t length = span.end - span.begin;
      const Acc* first_row = rows + span.begin * width + c0;
      const Acc* weights = w + span.slot;
      int64_t k = 0;
      for (; k + kSplit <= length; k += kSplit) {
        for (int s = 0; s < kSplit; ++s) {
          const Acc* line = first_row + (k + s) * width;
          for (int r = 0; r < kTileRows; ++r) {
            const Acc x = weights[r * w_stride + k + s];
#pragma omp simd
            for (int64_t j = 0; j < C; ++j) acc[s][r][j] += x * line[j];
          }
        }
      }
      for (; k < length; ++k) {
        const Acc* line = first_row + k * width;
        for (int r = 0; r < kTileRows; ++r) {
          const Acc x = weights[r * w_stride + k];
#pragma omp simd
          for (int64_t j = 0; j < C; ++j) acc[0][r][j] += x * line[j];
        }
      }
    }
    for (int r = 0; r < kTileRows; ++r) {
      for (int s = 1; s < kSplit; ++s) {
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) acc[0][r][j] += acc[s][r][j];
      }
#pragma omp simd
      for (int64_t j = 0; j < C; ++j) out[r * width + c0 + j] = acc[0][r][j] * row_factor[r];
    }
  }
}

// grads[key - first][0, width) += sum_r w[r][slot] * a[r] for every key of the tile.
template <class Acc>
inline void tile_key_gradients(const Acc* w, int64_t w_stride, const TileKeys& keys, const Acc* a, int64_t width,
                               Acc* grads, int64_t first) {
  constexpr int64_t C = kChunk<Acc>;
  for (int64_t c0 = 0; c0 < width; c0 += C) {
    Acc tile[kTileRows][C];
    for (int r = 0; r < kTileRows; ++r) {
#pragma omp simd
      for (int64_t j = 0; j < C; ++j) tile[r][j] = a[r * width + c0 + j];
    }
    for (const KeySpan& span : keys.spans) {
      for (int64_t k = 0; k < span.end - span.begin; ++k) {
        Acc* line = grads + (span.begin + k - first) * width + c0;
        Acc weight[kTileRows];
        for (int r = 0; r < kTileRows; ++r) weight[r] = w[r * w_stride + span.slot + k];
#pragma omp simd
        for (int64_t j = 0; j < C; ++j) {
          Acc sum = line[j];
          for (int r = 0; r < kTileRows; ++r) sum += weight[r] * tile[r][j];
          line[j] = sum;
        }
      }
    }
  }
}

// Sets the slots [0, slots) of a score row that the row does not visit to -inf.
template <class Acc>
inline void mask_unvisited(const std::vector<KeyRun>& visited, int64_t slots, Acc* row) {
  constexpr Acc kMinusInf = -std::numeric_limits<Acc>::infinity();
  int64_t next = 0;
  for (const KeyRun& range : visited) {
    for (int64_t s = next; s < range.begin; ++s) row[s] = kMinusInf;
    next = range.end;
  }
  for (int64_t s = next; s < slots; ++s) row[s] = kMinusInf;
}

// Forward softmax of tile row r: scores become probabilities (exactly 0 where unvisited); returns
// the log-sum-exp and sets *inverse_sum, or -inf and 0 when the row visits no key. The max skips NaN
// scores, so a row whose visited scores are all NaN (a NaN query) would look like a row without keys:
// it gets NaN instead (output and LSE), as a row with some NaN scores does through the exponentials.
template <class Acc>
inline Acc softmax_row(const std::vector<KeyRun>& visited, int64_t slots, Acc* row, Acc* inverse_sum) {
  constexpr Acc kMinusInf = -std::numeric_limits<Acc>::infinity();
  mask_unvisited(visited, slots, row);
  Acc max_score = kMinusInf;
  ATTNKIT_CPU_SIMD_MAX_SCORE
  for (int64_t s = 0; s < slots; ++s) max_score = row[s] > max_score ? row[s] : max_score;
  if (max_score == kMinusInf) {
    bool any_nan = false;
    for (int64_t s = 0; s < slots; ++s) {
      any_nan = any_nan || std::isnan(row[s]);
      row[s] = Acc(0);
    }
    *inverse_sum = any_nan ? std::numeric_limits<Acc>::quiet_NaN() : Acc(0);
    return any_nan ? std::numeric_limits<Acc>::quiet_NaN() : kMinusInf;
  }
  const Acc sum = exponentiate(row, slots, max_score);
  *inverse_sum = Acc(1) / sum;
  return max_score + std::log(sum);
}

// Forward of a tile whose rows' keys are in tile.keys and whose pre-scaled queries are in tile.a:
// writes each row's normalised output to tile.b and returns its log-sum-exp in lse[r].
// add_to_scores(keys, scores, stride) may add to the scaled scores of the visited slots before the softmax
// (the positional bias).
template <class Acc, class AddToScores>
void forward_tile(int rows, const Acc* keys_transposed, int64_t kt_stride, const Acc* values, int64_t d_pad,
                  int64_t dv_pad, TileBuffers<Acc>& tile, Acc* lse, const AddToScores& add_to_scores) {
  TileKeys& keys = tile.keys;
  keys.build(rows, kChunk<Acc>);
  const int64_t stride = tile.slot_capacity;
  tile_scores(tile.a.data(), d_pad, keys_transposed, kt_stride, keys, Acc(1), tile.scores.data(), stride);
  add_to_scores(keys, tile.scores.data(), stride);
  for (int r = 0; r < kTileRows; ++r) {
    Acc* row = tile.scores.data() + r * stride;
    if (r < rows) {
      lse[r] = softmax_row(keys.row_slots[r], keys.slots, row, &tile.row_value[r]);
    } else {
      for (int64_t s = 0; s < keys.slots; ++s) row[s] = Acc(0);
      tile.row_value[r] = Acc(0);
    }
  }
  tile_weighted_sum(tile.scores.data(), stride, keys, values, dv_pad, tile.row_value.data(), tile.b.data());
}

// Backward of a tile: tile.a holds q, tile.b dout (rows past `rows` zero), row_value the lse (a
// row with lse = -inf contributes nothing), row_delta dout . out. Writes scale * sum dS k to tile.c (dq) and adds the
// tile's contributions to the key/value gradient buffers, which start at key position `first`.
// add_to_scores(keys, scores, stride) adds what the forward added to the scaled scores (the positional
// bias); take_dscores(keys, dscores, stride) sees scale * dS (dS the gradient of the scores) before it is used.
template <class Acc, class AddToScores, class TakeDscores>
void backward_tile(int rows, Acc scale, const Acc* keys_transposed, const Acc* values_transposed, int64_t t_stride,
                   const Acc* keys, int64_t d_pad, int64_t dv_pad, TileBuffers<Acc>& tile, int64_t first, Acc* dkeys,
                   Acc* dvalues, const AddToScores& add_to_scores, const TakeDscores& take_dscores) {
  TileKeys& keys_of_tile = tile.keys;
  keys_of_tile.build(rows, kChunk<Acc>);
  const int64_t stride = tile.slot_capacity;
  const int64_t slots = keys_of_tile.slots;
  Acc* probs = tile.scores.data();
  Acc* dscores = tile.dscores.data();
  tile_scores(tile.a.data(), d_pad, keys_transposed, t_stride, keys_of_tile, scale, probs, stride);
  add_to_scores(keys_of_tile, probs, stride);
  tile_scores(tile.b.data(), dv_pad, values_transposed, t_stride, keys_of_tile, Acc(1), dscores, stride);
  for (int r = 0; r < kTileRows; ++r) {
    Acc* p = probs + r * stride;
    Acc* ds = dscores + r * stride;
    const Acc lse = tile.row_value[r];
    if (r < rows && lse != -std::numeric_limits<Acc>::infinity()) {
      mask_unvisited(keys_of_tile.row_slots[r], slots, p);
      exponentiate(p, slots, lse);
      const Acc delta = tile.row_delta[r];
#pragma omp simd
      for (int64_t s = 0; s < slots; ++s) ds[s] = scale * p[s] * (ds[s] - delta);
    } else {
      for (int64_t s = 0; s < slots; ++s) p[s] = ds[s] = Acc(0);
    }
  }
  take_dscores(keys_of_tile, static_cast<const Acc*>(dscores), stride);
  const std::array<Acc, kTileRows> ones = [] {
    std::array<Acc, kTileRows> v;
    v.fill(Acc(1));
    return v;
  }();
  tile_weighted_sum(dscores, stride, keys_of_tile, keys, d_pad, ones.data(), tile.c.data());
  tile_key_gradients(probs, stride, keys_of_tile, tile.b.data(), dv_pad, dvalues, first);
  tile_key_gradients(dscores, stride, keys_of_tile, tile.a.data(), d_pad, dkeys, first);
}

}  // namespace attnkit::cpu::ATTNKIT_CPU_ISA_NAMESPACE
