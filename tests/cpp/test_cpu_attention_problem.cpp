#include "test_cpu_attention_problem.hpp"

#include "cpu/attention_reference.hpp"

namespace attnkit::test {
namespace {

std::vector<int64_t> layout(int64_t batch, const std::vector<int64_t>& tokens, int64_t heads, int64_t width) {
  std::vector<int64_t> extents{batch};
  extents.insert(extents.end(), tokens.begin(), tokens.end());
  extents.push_back(heads);
  if (width > 0) extents.push_back(width);
  return extents;
}

HostTensor make_tensor(const AttentionCase& spec, DType dtype, const std::vector<int64_t>& extents) {
  return spec.strided ? HostTensor::strided(dtype, extents, std::vector<int64_t>(extents.size(), 3))
                      : HostTensor::contiguous(dtype, extents);
}

}  // namespace

AttentionTensors::AttentionTensors(const AttentionCase& c) : spec(c) {
  if (spec.tokens_kv.empty()) spec.tokens_kv = spec.tokens;
  if (spec.head_dim_v == 0) spec.head_dim_v = spec.head_dim;
  const auto q_shape = layout(spec.batch, spec.tokens, spec.heads_q, spec.head_dim);
  const auto k_shape = layout(spec.batch, spec.tokens_kv, spec.heads_kv, spec.head_dim);
  const auto v_shape = layout(spec.batch, spec.tokens_kv, spec.heads_kv, spec.head_dim_v);
  const auto o_shape = layout(spec.batch, spec.tokens, spec.heads_q, spec.head_dim_v);
  const auto lse_shape = layout(spec.batch, spec.tokens, spec.heads_q, 0);
  q = make_tensor(spec, spec.dtype, q_shape);
  k = make_tensor(spec, spec.dtype, k_shape);
  v = make_tensor(spec, spec.dtype, v_shape);
  grad_out = make_tensor(spec, spec.dtype, o_shape);
  out = make_tensor(spec, spec.dtype, o_shape);
  lse = make_tensor(spec, DType::f32, lse_shape);
  grad_q = make_tensor(spec, spec.dtype, q_shape);
  grad_k = make_tensor(spec, spec.dtype, k_shape);
  grad_v = make_tensor(spec, spec.dtype, v_shape);
  ref_out = HostTensor::contiguous(DType::f64, o_shape);
  ref_lse = HostTensor::contiguous(DType::f32, lse_shape);
  ref_grad_q = HostTensor::contiguous(DType::f64, q_shape);
  ref_grad_k = HostTensor::contiguous(DType::f64, k_shape);
  ref_grad_v = HostTensor::contiguous(DType::f64, v_shape);

  std::mt19937_64 rng(spec.seed);
  // Spread of about 2 in q.k/sqrt(D): softmax rows are neither flat nor one-hot.
  fill_random(q.view, rng, -2.0, 2.0);
  fill_random(k.view, rng, -2.0, 2.0);
  fill_random(v.view, rng, -1.0, 1.0);
  fill_random(grad_out.view, rng, -1.0, 1.0);
  if (spec.rpb) {
    std::vector<int64_t> table{spec.heads_q};
    for (int d = 0; d < spec.mask.dims; ++d) table.push_back(2 * spec.mask.neighborhood[d].kernel_size - 1);
    rpb = make_tensor(spec, *spec.rpb, table);
    grad_rpb = make_tensor(spec, *spec.rpb, table);
    ref_grad_rpb = HostTensor::contiguous(DType::f64, table);
    fill_random(rpb.view, rng, -1.5, 1.5);
    poison_nan(grad_rpb.view);
    poison_nan(ref_grad_rpb.view);
  }
  for (const HostTensor* t :
       {&out, &lse, &grad_q, &grad_k, &grad_v, &ref_out, &ref_lse, &ref_grad_q, &ref_grad_k, &ref_grad_v}) {
    poison_nan(t->view);
  }
}

AttentionForward AttentionTensors::forward_problem() const {
  AttentionForward p;
  p.q = q.view;
  p.k = k.view;
  p.v = v.view;
  p.out = out.view;
  p.lse = lse.view;
  p.scale = spec.scale;
  p.mask = spec.mask;
  p.mask.rpb = rpb.view;
  return p;
}

AttentionBackward AttentionTensors::backward_problem() const {
  AttentionBackward p;
  p.q = q.view;
  p.k = k.view;
  p.v = v.view;
  p.out = out.view;
  p.lse = lse.view;
  p.grad_out = grad_out.view;
  p.grad_q = grad_q.view;
  p.grad_k = grad_k.view;
  p.grad_v = grad_v.view;
  p.scale = spec.scale;
  p.mask = spec.mask;
  p.mask.rpb = rpb.view;
  p.grad_rpb = grad_rpb.view;
  return p;
}

detail::AttentionShape AttentionTensors::shape() const {
  return detail::describe_attention(q.view, k.view, v.view, spec.scale);
}

void AttentionTensors::run_forward(int32_t num_threads) {
  poison_nan(out.view);
  poison_nan(lse.view);
  RunOptions options;
  options.backend = Backend::cpu;
  options.num_threads = num_threads;
  attention_forward(forward_problem(), options);
}

void AttentionTensors::run_backward(int32_t num_threads) {
  poison_nan(grad_q.view);
  poison_nan(grad_k.view);
  poison_nan(grad_v.view);
  if (spec.rpb) poison_nan(grad_rpb.view);
  RunOptions options;
  options.backend = Backend::cpu;
  options.num_threads = num_threads;
  attention_backward(backward_problem(), options);
}

void AttentionTensors::run_reference_forward() {
  AttentionForward p = forward_problem();
  p.out = ref_out.view;
  p.lse = ref_lse.view;
  cpu::reference::attention_forward_reference(p, shape(), RunOptions{});
}

void AttentionTensors::run_reference_backward() {
  AttentionBackward p = backward_problem();
  p.grad_q = ref_grad_q.view;
  p.grad_k = ref_grad_k.view;
  p.grad_v = ref_grad_v.view;
  if (spec.rpb) p.grad_rpb = ref_grad_rpb.view;
  cpu::reference::attention_backward_reference(p, shape(), RunOptions{});
}

}  // namespace attnkit::test
