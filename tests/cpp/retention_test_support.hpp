// Host tensors and numeric helpers for the CPU retention and GEMM suites: buffers with any strides
// (padded or permuted, to exercise non-contiguous views), random fills rounded to the dtype, NaN
// poisoning, element access by logical index, relative L2 error, and the retention definition
// written as a literal double sum for the tests to compare against.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "attnkit/retention.hpp"
#include "attnkit/tensor.hpp"
#include "core/float_convert.hpp"
#include "cpu/cpu_backend.hpp"

namespace attnkit::retention_test {

struct Buffer {
  std::vector<unsigned char> bytes;
  TensorView view;

  int64_t numel() const { return view.numel(); }
};

// A tensor with the given extents and element strides (non-negative; last usually 1).
inline Buffer make_strided(DType dtype, const std::vector<int64_t>& extents, const std::vector<int64_t>& strides) {
  Buffer t;
  t.view.dtype = dtype;
  t.view.rank = static_cast<int32_t>(extents.size());
  int64_t last_offset = 0;
  bool empty = false;
  for (std::size_t d = 0; d < extents.size(); ++d) {
    t.view.extents[d] = extents[d];
    t.view.strides[d] = strides[d];
    if (extents[d] == 0) empty = true;
    last_offset += (extents[d] - 1) * strides[d];
  }
  const int64_t storage = empty ? 1 : last_offset + 1;
  t.bytes.assign(static_cast<std::size_t>(storage) * dtype_size(dtype), 0);
  t.view.data = t.bytes.data();
  return t;
}

// Row-major, with `pad` unused elements after every row of every dimension but the last, so that
// pad > 0 gives a non-contiguous view whose gaps are visible to poisoning.
inline Buffer make_tensor(DType dtype, const std::vector<int64_t>& extents, int64_t pad = 0) {
  std::vector<int64_t> strides(extents.size(), 1);
  for (int d = static_cast<int>(extents.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * extents[d + 1] + pad;
  return make_strided(dtype, extents, strides);
}

// Element offset of logical (row-major) index `linear`.
inline int64_t offset_of(const TensorView& v, int64_t linear) {
  int64_t offset = 0;
  for (int d = v.rank - 1; d >= 0; --d) {
    offset += (linear % v.extents[d]) * v.strides[d];
    linear /= v.extents[d];
  }
  return offset;
}

inline double get(const TensorView& v, int64_t linear) {
  return detail::load_as_double(v.data, v.dtype, offset_of(v, linear));
}
inline void set(const TensorView& v, int64_t linear, double value) {
  detail::store_from_double(v.data, v.dtype, offset_of(v, linear), value);
}

// Logical elements in row-major order.
inline std::vector<double> values(const TensorView& v) {
  std::vector<double> out(static_cast<std::size_t>(v.numel()));
  for (int64_t i = 0; i < v.numel(); ++i) out[i] = get(v, i);
  return out;
}

inline void fill_random(Buffer& t, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) set(t.view, i, dist(rng));
}

// Every storage element (gaps included) becomes NaN.
inline void poison_nan(Buffer& t) {
  const int64_t elements = static_cast<int64_t>(t.bytes.size() / dtype_size(t.view.dtype));
  for (int64_t i = 0; i < elements; ++i) {
    detail::store_from_double(t.view.data, t.view.dtype, i, std::numeric_limits<double>::quiet_NaN());
  }
}

// A contiguous copy in another dtype (values rounded to it).
inline Buffer converted(const Buffer& t, DType dtype) {
  std::vector<int64_t> extents(t.view.extents.begin(), t.view.extents.begin() + t.view.rank);
  Buffer out = make_tensor(dtype, extents);
  for (int64_t i = 0; i < t.numel(); ++i) set(out.view, i, get(t.view, i));
  return out;
}

inline bool all_finite(const std::vector<double>& x) {
  return std::all_of(x.begin(), x.end(), [](double v) { return std::isfinite(v); });
}

// ||a - b|| / ||b||; infinity when sizes differ or anything is not finite.
inline double relative_l2(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || !all_finite(a) || !all_finite(b)) return std::numeric_limits<double>::infinity();
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

inline std::vector<double> concat(std::vector<double> a, const std::vector<double>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---- The retention definition, on dense row-major doubles ----------------------------------------

struct DenseRetention {
  int64_t batch, tokens, heads, dk, dv;
  std::vector<double> q, k, v;        // [B, T, H, D]
  std::vector<double> initial_state;  // [B, H, Dk, Dv] or empty
  std::vector<double> gamma;          // per head
  double scale;
};

// o[b,t,h,:] = scale * sum_{m<=t} gamma^(t-m) (q_t . k_m) v_m + scale * gamma^(t+1) q_t S_{-1}
inline std::vector<double> retention_definition(const DenseRetention& r) {
  std::vector<double> out(static_cast<std::size_t>(r.batch * r.tokens * r.heads * r.dv), 0.0);
  auto qk_index = [&](int64_t b, int64_t t, int64_t h, int64_t i) {
    return ((b * r.tokens + t) * r.heads + h) * r.dk + i;
  };
  auto v_index = [&](int64_t b, int64_t t, int64_t h, int64_t j) {
    return ((b * r.tokens + t) * r.heads + h) * r.dv + j;
  };
  for (int64_t b = 0; b < r.batch; ++b) {
    for (int64_t h = 0; h < r.heads; ++h) {
      for (int64_t t = 0; t < r.tokens; ++t) {
        for (int64_t j = 0; j < r.dv; ++j) {
          double sum = 0.0;
          for (int64_t m = 0; m <= t; ++m) {
            double qk = 0.0;
            for (int64_t i = 0; i < r.dk; ++i) qk += r.q[qk_index(b, t, h, i)] * r.k[qk_index(b, m, h, i)];
            sum += std::pow(r.gamma[h], static_cast<double>(t - m)) * qk * r.v[v_index(b, m, h, j)];
          }
          if (!r.initial_state.empty()) {
            for (int64_t i = 0; i < r.dk; ++i) {
              sum += std::pow(r.gamma[h], static_cast<double>(t + 1)) * r.q[qk_index(b, t, h, i)] *
                     r.initial_state[((b * r.heads + h) * r.dk + i) * r.dv + j];
            }
          }
          out[v_index(b, t, h, j)] = r.scale * sum;
        }
      }
    }
  }
  return out;
}

// S_{T-1}[b,h,i,j] = gamma^T S_{-1} + sum_m gamma^(T-1-m) k_m[i] v_m[j]
inline std::vector<double> final_state_definition(const DenseRetention& r) {
  std::vector<double> state(static_cast<std::size_t>(r.batch * r.heads * r.dk * r.dv), 0.0);
  for (int64_t b = 0; b < r.batch; ++b) {
    for (int64_t h = 0; h < r.heads; ++h) {
      for (int64_t i = 0; i < r.dk; ++i) {
        for (int64_t j = 0; j < r.dv; ++j) {
          const int64_t s = ((b * r.heads + h) * r.dk + i) * r.dv + j;
          double sum =
              r.initial_state.empty() ? 0.0 : std::pow(r.gamma[h], static_cast<double>(r.tokens)) * r.initial_state[s];
          for (int64_t m = 0; m < r.tokens; ++m) {
            sum += std::pow(r.gamma[h], static_cast<double>(r.tokens - 1 - m)) *
                   r.k[((b * r.tokens + m) * r.heads + h) * r.dk + i] *
                   r.v[((b * r.tokens + m) * r.heads + h) * r.dv + j];
          }
          state[s] = sum;
        }
      }
    }
  }
  return state;
}

// RetNet's normalised parallel retention, literally: the decay matrix D with rows divided by the
// square root of their sums, scores (q.k) * scale * D, rows divided by max(sum |score|, 1), times V.
inline std::vector<double> normalized_retention_definition(const DenseRetention& r) {
  std::vector<double> out(static_cast<std::size_t>(r.batch * r.tokens * r.heads * r.dv), 0.0);
  const int64_t T = r.tokens;
  for (int64_t b = 0; b < r.batch; ++b) {
    for (int64_t h = 0; h < r.heads; ++h) {
      std::vector<double> decay(static_cast<std::size_t>(T * T), 0.0), scores(static_cast<std::size_t>(T * T), 0.0);
      for (int64_t t = 0; t < T; ++t) {
        double row_sum = 0.0;
        for (int64_t m = 0; m <= t; ++m) row_sum += decay[t * T + m] = std::pow(r.gamma[h], static_cast<double>(t - m));
        for (int64_t m = 0; m <= t; ++m) decay[t * T + m] /= std::sqrt(row_sum);
      }
      for (int64_t t = 0; t < T; ++t) {
        double abs_sum = 0.0;
        for (int64_t m = 0; m < T; ++m) {
          double qk = 0.0;
          for (int64_t i = 0; i < r.dk; ++i) {
            qk += r.q[((b * T + t) * r.heads + h) * r.dk + i] * r.k[((b * T + m) * r.heads + h) * r.dk + i];
          }
          scores[t * T + m] = qk * r.scale * decay[t * T + m];
          abs_sum += std::abs(scores[t * T + m]);
        }
        for (int64_t m = 0; m < T; ++m) scores[t * T + m] /= std::max(abs_sum, 1.0);
        for (int64_t j = 0; j < r.dv; ++j) {
          double sum = 0.0;
          for (int64_t m = 0; m < T; ++m) sum += scores[t * T + m] * r.v[((b * T + m) * r.heads + h) * r.dv + j];
          out[((b * T + t) * r.heads + h) * r.dv + j] = sum;
        }
      }
    }
  }
  return out;
}

// ---- Retention problems run through the CPU backend ----------------------------------------------

struct RetentionShape {
  int64_t batch, tokens, heads, dk, dv;
};

inline DType state_dtype_for(DType input) { return input == DType::f64 ? DType::f64 : DType::f32; }

// Random q, k, v (and optionally an initial state) of one dtype; every view padded by `pad`.
struct RetentionCase {
  RetentionShape shape;
  DType dtype;
  Buffer q, k, v, initial_state;
  bool has_initial_state = false;
  std::vector<double> gamma;  // empty = the library default
  std::optional<double> scale;
};

inline RetentionCase make_case(RetentionShape s, DType dtype, uint64_t seed, bool with_initial_state, int64_t pad = 0) {
  RetentionCase c{s,
                  dtype,
                  make_tensor(dtype, {s.batch, s.tokens, s.heads, s.dk}, pad),
                  make_tensor(dtype, {s.batch, s.tokens, s.heads, s.dk}, pad),
                  make_tensor(dtype, {s.batch, s.tokens, s.heads, s.dv}, pad),
                  make_tensor(state_dtype_for(dtype), {s.batch, s.heads, s.dk, s.dv}, pad),
                  with_initial_state,
                  {},
                  {}};
  fill_random(c.q, seed);
  fill_random(c.k, seed + 1);
  fill_random(c.v, seed + 2);
  fill_random(c.initial_state, seed + 3);
  return c;
}

// The same problem in another dtype (values rounded to it), contiguous.
inline RetentionCase converted_case(const RetentionCase& c, DType dtype) {
  RetentionCase out{c.shape,
                    dtype,
                    converted(c.q, dtype),
                    converted(c.k, dtype),
                    converted(c.v, dtype),
                    converted(c.initial_state, state_dtype_for(dtype)),
                    c.has_initial_state,
                    c.gamma,
                    c.scale};
  return out;
}

inline DenseRetention dense_of(const RetentionCase& c) {
  DenseRetention r{c.shape.batch,
                   c.shape.tokens,
                   c.shape.heads,
                   c.shape.dk,
                   c.shape.dv,
                   values(c.q.view),
                   values(c.k.view),
                   values(c.v.view),
                   {},
                   c.gamma.empty() ? default_retention_gamma(c.shape.heads) : c.gamma,
                   c.scale.value_or(1.0 / std::sqrt(static_cast<double>(c.shape.dk)))};
  if (c.has_initial_state) r.initial_state = values(c.initial_state.view);
  return r;
}

struct ForwardResult {
  std::vector<double> out, final_state;
};

struct RunSettings {
  RetentionMode mode = RetentionMode::chunkwise;
  int64_t chunk_size = 64;
  bool want_final_state = false;
  bool normalize = false;
  int64_t output_pad = 0;
};

// Runs cpu::retention_forward into NaN-poisoned outputs and returns their logical elements.
inline ForwardResult run_forward(const RetentionCase& c, const RunSettings& settings) {
  const RetentionShape& s = c.shape;
  Buffer out = make_tensor(c.dtype, {s.batch, s.tokens, s.heads, s.dv}, settings.output_pad);
  Buffer final_state = make_tensor(state_dtype_for(c.dtype), {s.batch, s.heads, s.dk, s.dv}, settings.output_pad);
  poison_nan(out);
  poison_nan(final_state);
  RetentionForward p;
  p.q = c.q.view;
  p.k = c.k.view;
  p.v = c.v.view;
  p.out = out.view;
  if (c.has_initial_state) p.initial_state = c.initial_state.view;
  if (settings.want_final_state) p.final_state = final_state.view;
  p.gamma = c.gamma;
  p.scale = c.scale;
  p.mode = settings.mode;
  p.chunk_size = settings.chunk_size;
  p.normalize = settings.normalize;
  cpu::retention_forward(p, RunOptions{});
  ForwardResult r{values(out.view), {}};
  if (settings.want_final_state) r.final_state = values(final_state.view);
  return r;
}

struct BackwardResult {
  std::vector<double> grad_q, grad_k, grad_v, grad_initial_state;
};

// The sequence operands and gradients of a backward call; its other fields are left as they are.
inline void set_backward_tensors(RetentionBackward& p, const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& grad_out, const TensorView& grad_q, const TensorView& grad_k,
                                 const TensorView& grad_v) {
  p.q = q;
  p.k = k;
  p.v = v;
  p.grad_out = grad_out;
  p.grad_q = grad_q;
  p.grad_k = grad_k;
  p.grad_v = grad_v;
}

// Runs cpu::retention_backward (grad_final_state may be null) into NaN-poisoned gradients.
inline BackwardResult run_backward(const RetentionCase& c, const RunSettings& settings, const Buffer& grad_out,
                                   const Buffer* grad_final_state, bool want_grad_initial_state) {
  const RetentionShape& s = c.shape;
  Buffer gq = make_tensor(c.dtype, {s.batch, s.tokens, s.heads, s.dk}, settings.output_pad);
  Buffer gk = make_tensor(c.dtype, {s.batch, s.tokens, s.heads, s.dk}, settings.output_pad);
  Buffer gv = make_tensor(c.dtype, {s.batch, s.tokens, s.heads, s.dv}, settings.output_pad);
  Buffer gs = make_tensor(state_dtype_for(c.dtype), {s.batch, s.heads, s.dk, s.dv}, settings.output_pad);
  for (Buffer* b : {&gq, &gk, &gv, &gs}) poison_nan(*b);
  RetentionBackward p;
  p.q = c.q.view;
  p.k = c.k.view;
  p.v = c.v.view;
  p.grad_out = grad_out.view;
  if (c.has_initial_state) p.initial_state = c.initial_state.view;
  if (grad_final_state) p.grad_final_state = grad_final_state->view;
  p.grad_q = gq.view;
  p.grad_k = gk.view;
  p.grad_v = gv.view;
  if (want_grad_initial_state) p.grad_initial_state = gs.view;
  p.gamma = c.gamma;
  p.scale = c.scale;
  p.mode = settings.mode;
  p.chunk_size = settings.chunk_size;
  p.normalize = settings.normalize;
  cpu::retention_backward(p, RunOptions{});
  BackwardResult r{values(gq.view), values(gk.view), values(gv.view), {}};
  if (want_grad_initial_state) r.grad_initial_state = values(gs.view);
  return r;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace attnkit::retention_test
