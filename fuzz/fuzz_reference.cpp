#include "fuzz_reference.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "core/attention_shape.hpp"
#include "core/float_convert.hpp"
#include "cpu/attention_reference.hpp"
#include "cpu/gemm_reference.hpp"
#include "cpu/retention_reference.hpp"
#include "fuzz_checks.hpp"
#include "fuzz_tensors.hpp"

namespace attnkit::fuzz {
namespace {

TensorView view_of(const attnkit_tensor& t) {
  TensorView view;
  if (t.data == nullptr) return view;
  view.data = t.data;
  view.dtype = static_cast<DType>(t.dtype);
  view.device = Device{static_cast<DeviceType>(t.device_type), t.device_index};
  view.rank = t.rank;
  for (int d = 0; d < t.rank; ++d) {
    view.extents[d] = t.extents[d];
    view.strides[d] = t.strides[d];
  }
  return view;
}

attnkit_tensor c_view_of(const TensorView& v) {
  attnkit_tensor t{};
  t.data = v.data;
  t.dtype = static_cast<int32_t>(v.dtype);
  t.rank = v.rank;
  for (int d = 0; d < v.rank; ++d) {
    t.extents[d] = v.extents[d];
    t.strides[d] = v.strides[d];
  }
  return t;
}

AttentionMask mask_of(const attnkit_attention_mask& c) {
  AttentionMask mask;
  mask.kind = static_cast<MaskKind>(c.kind);
  mask.causal_alignment = static_cast<CausalAlignment>(c.causal_alignment);
  mask.dims = c.dims;
  for (int d = 0; d < ATTNKIT_MAX_TOKEN_DIMS; ++d) {
    const auto& n = c.neighborhood[d];
    mask.neighborhood[d] = NeighborhoodDim{n.kernel_size, n.dilation, n.stride, n.causal != 0};
  }
  mask.block_mask = view_of(c.block_mask);
  mask.block_q = c.block_q;
  mask.block_k = c.block_k;
  mask.element_mask = view_of(c.element_mask);
  mask.element_path = static_cast<ElementMaskPath>(c.element_path);
  mask.rpb = view_of(c.rpb);
  return mask;
}

std::optional<double> scale_of(int32_t has_scale, double scale) {
  return has_scale ? std::optional<double>(scale) : std::nullopt;
}

std::vector<double> gamma_of(const double* gamma, int64_t count) {
  return gamma ? std::vector<double>(gamma, gamma + count) : std::vector<double>{};
}

// A float64 tensor of `like`'s extents (contiguous) for the reference to write, filled with NaN. The
// reference writes an LSE as float32 whatever its view says: that one is made float32.
struct Float64Tensor {
  std::vector<double> values;
  TensorView view;
  explicit Float64Tensor(const TensorView& like, DType dtype = DType::f64) {
    if (like.data == nullptr) return;
    int64_t count = 1;
    for (int d = 0; d < like.rank; ++d) count *= like.extents[d];
    values.assign(static_cast<std::size_t>(std::max<int64_t>(count, 1)), NAN);
    view = make_view(values.data(), dtype, like.rank, like.extents.data());
  }
};

// Elements of a view in row-major index order, as doubles.
std::vector<double> elements(const TensorView& view) {
  std::vector<double> result;
  if (view.data == nullptr) return result;
  const attnkit_tensor t = c_view_of(view);
  const auto element = dtype_size(view.dtype);
  for_each_element(t, [&](int64_t offset) {
    result.push_back(
        detail::load_as_double(static_cast<const unsigned char*>(view.data) + offset * element, view.dtype, 0));
  });
  return result;
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64: return 1e-10;
    case DType::f32: return 1e-5;
    case DType::f16: return 5e-3;
    case DType::bf16: return 1.5e-2;
    default: return 0.0;
  }
}

// "; first difference at element i (row-major): got x, reference y".
std::string first_difference(const std::vector<double>& got, const std::vector<double>& want) {
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (got[i] != want[i] && !(std::abs(got[i] - want[i]) <= 1e-3 * std::abs(want[i]))) {
      return "; first difference at element " + std::to_string(i) + " (row-major): got " + number(got[i]) +
             ", reference " + number(want[i]);
    }
  }
  return "";
}

// Passes when ||got - want|| <= tolerance * ||want|| + tolerance * sqrt(n): the relative L2 error of
// DESIGN §5, with an absolute floor of the same size per element for results near 0 (a gradient that is 0
// in exact arithmetic comes out as rounding noise in both). Equal values (-inf LSE rows too) count as 0.
void expect_close(const char* op, const char* name, const TensorView& got, const TensorView& want, DType inputs) {
  if (got.data == nullptr) return;
  const std::vector<double> got_values = elements(got);
  const std::vector<double> want_values = elements(want);
  const double allowed = std::max(tolerance(inputs), tolerance(got.dtype));
  double error = 0.0;
  double norm = 0.0;
  for (std::size_t i = 0; i < got_values.size(); ++i) {
    if (got_values[i] != want_values[i]) error += (got_values[i] - want_values[i]) * (got_values[i] - want_values[i]);
    if (std::isfinite(want_values[i])) norm += want_values[i] * want_values[i];
  }
  const double bound = allowed * (std::sqrt(norm) + std::sqrt(static_cast<double>(got_values.size())));
  if (!(std::sqrt(error) <= bound)) {
    violation(std::string(op) + ": " + name + " differs from the brute-force reference: ||got - reference|| = " +
              number(std::sqrt(error)) + ", ||reference|| = " + number(std::sqrt(norm)) + ", allowed " +
              number(allowed) + " * (||reference|| + sqrt(" + std::to_string(got_values.size()) + "))" +
              first_difference(got_values, want_values));
  }
}

bool has_elements(const attnkit_tensor& t) {
  for (int d = 0; d < t.rank; ++d) {
    if (t.extents[d] == 0) return false;
  }
  return true;
}

// Zero-size problems are left to tests/cpp/test_validate_zero_size.cpp, which pins what the definition
// writes for them; the comparison here covers problems with elements.
bool reference_defined(std::initializer_list<const attnkit_tensor*> tensors) {
  for (const attnkit_tensor* t : tensors) {
    if (!has_elements(*t)) return false;
  }
  return true;
}

}  // namespace

void compare_with_reference(const attnkit_attention_forward_args& args) {
  if (!reference_defined({&args.q, &args.k, &args.v})) return;
  AttentionForward p;
  p.q = view_of(args.q);
  p.k = view_of(args.k);
  p.v = view_of(args.v);
  p.scale = scale_of(args.has_scale, args.scale);
  p.mask = mask_of(args.mask);
  const TensorView out = view_of(args.out);
  const TensorView lse = view_of(args.lse);
  Float64Tensor ref_out(out), ref_lse(lse, DType::f32);
  p.out = ref_out.view;
  p.lse = ref_lse.view;
  cpu::reference::attention_forward_reference(p, detail::describe_attention(p.q, p.k, p.v, p.scale), {});
  expect_close("attention forward", "out", out, ref_out.view, p.q.dtype);
  expect_close("attention forward", "lse", lse, ref_lse.view, p.q.dtype);
}

void compare_with_reference(const attnkit_attention_backward_args& args) {
  if (!reference_defined({&args.q, &args.k, &args.v})) return;
  AttentionBackward p;
  p.q = view_of(args.q);
  p.k = view_of(args.k);
  p.v = view_of(args.v);
  p.out = view_of(args.out);
  p.lse = view_of(args.lse);
  p.grad_out = view_of(args.grad_out);
  p.scale = scale_of(args.has_scale, args.scale);
  p.mask = mask_of(args.mask);
  const TensorView grads[] = {view_of(args.grad_q), view_of(args.grad_k), view_of(args.grad_v), view_of(args.grad_rpb)};
  Float64Tensor ref_q(grads[0]), ref_k(grads[1]), ref_v(grads[2]), ref_rpb(grads[3]);
  p.grad_q = ref_q.view;
  p.grad_k = ref_k.view;
  p.grad_v = ref_v.view;
  p.grad_rpb = ref_rpb.view;
  cpu::reference::attention_backward_reference(p, detail::describe_attention(p.q, p.k, p.v, p.scale), {});
  expect_close("attention backward", "grad_q", grads[0], ref_q.view, p.q.dtype);
  expect_close("attention backward", "grad_k", grads[1], ref_k.view, p.q.dtype);
  expect_close("attention backward", "grad_v", grads[2], ref_v.view, p.q.dtype);
  expect_close("attention backward", "grad_rpb", grads[3], ref_rpb.view, p.q.dtype);
}

void compare_with_reference(const attnkit_retention_forward_args& args) {
  if (!reference_defined({&args.q, &args.v})) return;
  RetentionForward p;
  p.q = view_of(args.q);
  p.k = view_of(args.k);
  p.v = view_of(args.v);
  p.initial_state = view_of(args.initial_state);
  p.gamma = gamma_of(args.gamma, args.gamma_count);
  p.mode = static_cast<RetentionMode>(args.mode);
  p.chunk_size = args.chunk_size;
  p.scale = scale_of(args.has_scale, args.scale);
  p.normalize = args.normalize != 0;
  const TensorView out = view_of(args.out);
  const TensorView final_state = view_of(args.final_state);
  Float64Tensor ref_out(out), ref_final(final_state);
  p.out = ref_out.view;
  p.final_state = ref_final.view;
  cpu::reference::retention_forward(p);
  expect_close("retention forward", "out", out, ref_out.view, p.q.dtype);
  expect_close("retention forward", "final_state", final_state, ref_final.view, p.q.dtype);
}

void compare_with_reference(const attnkit_retention_backward_args& args) {
  if (!reference_defined({&args.q, &args.v})) return;
  RetentionBackward p;
  p.q = view_of(args.q);
  p.k = view_of(args.k);
  p.v = view_of(args.v);
  p.grad_out = view_of(args.grad_out);
  p.initial_state = view_of(args.initial_state);
  p.grad_final_state = view_of(args.grad_final_state);
  p.gamma = gamma_of(args.gamma, args.gamma_count);
  p.mode = static_cast<RetentionMode>(args.mode);
  p.chunk_size = args.chunk_size;
  p.scale = scale_of(args.has_scale, args.scale);
  p.normalize = args.normalize != 0;
  const TensorView grads[] = {view_of(args.grad_q), view_of(args.grad_k), view_of(args.grad_v),
                              view_of(args.grad_initial_state)};
  Float64Tensor ref_q(grads[0]), ref_k(grads[1]), ref_v(grads[2]), ref_state(grads[3]);
  p.grad_q = ref_q.view;
  p.grad_k = ref_k.view;
  p.grad_v = ref_v.view;
  p.grad_initial_state = ref_state.view;
  cpu::reference::retention_backward(p);
  expect_close("retention backward", "grad_q", grads[0], ref_q.view, p.q.dtype);
  expect_close("retention backward", "grad_k", grads[1], ref_k.view, p.q.dtype);
  expect_close("retention backward", "grad_v", grads[2], ref_v.view, p.q.dtype);
  expect_close("retention backward", "grad_initial_state", grads[3], ref_state.view, p.q.dtype);
}

void compare_with_reference(const attnkit_gemm_args& args, const void* c_before) {
  if (!reference_defined({&args.a, &args.b, &args.c})) return;
  GemmProblem p;
  p.a = view_of(args.a);
  p.b = view_of(args.b);
  p.transpose_a = args.transpose_a != 0;
  p.transpose_b = args.transpose_b != 0;
  p.alpha = args.alpha;
  p.beta = args.beta;
  const TensorView c = view_of(args.c);
  TensorView old_c = c;
  old_c.data = const_cast<void*>(c_before);
  Float64Tensor ref_c(c);
  // C's old values in the reference's C (read when beta != 0).
  const std::vector<double> old_values = elements(old_c);
  std::copy(old_values.begin(), old_values.end(), ref_c.values.begin());
  p.c = ref_c.view;
  cpu::reference::gemm(p);
  expect_close("gemm", "c", c, ref_c.view, p.a.dtype);
}

}  // namespace attnkit::fuzz
