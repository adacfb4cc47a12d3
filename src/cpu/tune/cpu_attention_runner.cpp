#include "cpu/tune/cpu_attention_runner.hpp"

#include <chrono>
#include <random>

#include "attnkit/error.hpp"
#include "core/float_convert.hpp"
#include "core/validate.hpp"
#include "cpu/attention_config.hpp"
#include "cpu/tune/cpu_attention_space.hpp"

namespace attnkit::tune {
namespace {

std::vector<int64_t> tensor_extents(const ProblemSpec& s, const std::array<int64_t, kMaxTokenDims>& tokens,
                                    int64_t heads, int64_t last) {
  std::vector<int64_t> extents{s.batch};
  for (int d = 0; d < s.token_dims; ++d) extents.push_back(tokens[static_cast<size_t>(d)]);
  extents.push_back(heads);
  if (last > 0) extents.push_back(last);
  return extents;
}

int64_t product(const std::vector<int64_t>& extents) {
  int64_t n = 1;
  for (const int64_t e : extents) n *= e;
  return n;
}

TensorView allocate(std::vector<unsigned char>& storage, DType dtype, const std::vector<int64_t>& extents) {
  storage.assign(static_cast<size_t>(product(extents)) * dtype_size(dtype), 0);
  return make_view(storage.data(), dtype, static_cast<int32_t>(extents.size()), extents.data());
}

void fill_random(TensorView view, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (int64_t i = 0; i < view.numel(); ++i) detail::store_from_double(view.data, view.dtype, i, uniform(rng));
}

}  // namespace

CpuAttentionRunner::CpuAttentionRunner(const ProblemSpec& spec, int buffer_sets, uint64_t seed) : spec_(spec) {
  if (spec.op != TuneOp::attention_forward && spec.op != TuneOp::attention_backward) {
    throw Error(Status::unsupported, "CPU runner: op " + std::string(op_name(spec.op)) +
                                         " cannot be timed yet; allowed: attention_fwd, attention_bwd");
  }
  validate_problem_spec(spec);
  sets_.resize(static_cast<size_t>(buffer_sets > 0 ? buffer_sets : 1));
  for (size_t i = 0; i < sets_.size(); ++i) build(sets_[i], seed + i);
}

void CpuAttentionRunner::build(BufferSet& set, uint64_t seed) {
  const ProblemSpec& s = spec_;
  std::mt19937_64 rng(seed);
  AttentionForward& f = set.forward;
  f.q = allocate(set.q, s.dtype, tensor_extents(s, s.tokens, s.heads_q, s.head_dim));
  f.k = allocate(set.k, s.dtype, tensor_extents(s, s.tokens_kv, s.heads_kv, s.head_dim));
  f.v = allocate(set.v, s.dtype, tensor_extents(s, s.tokens_kv, s.heads_kv, s.head_dim_v));
  f.out = allocate(set.out, s.dtype, tensor_extents(s, s.tokens, s.heads_q, s.head_dim_v));
  const auto lse_extents = tensor_extents(s, s.tokens, s.heads_q, 0);
  set.lse.assign(static_cast<size_t>(product(lse_extents)), 0.0f);
  f.lse = make_view(set.lse.data(), DType::f32, static_cast<int32_t>(lse_extents.size()), lse_extents.data());
  for (const TensorView& view : {f.q, f.k, f.v}) fill_random(view, rng);

  f.mask.kind = s.mask;
  f.mask.causal_alignment = s.causal_alignment;
  if (s.mask == MaskKind::neighborhood) {
    f.mask.dims = s.token_dims;
    f.mask.neighborhood = s.neighborhood;
  }
  if (s.mask == MaskKind::block || s.mask == MaskKind::element) {
    const bool block = s.mask == MaskKind::block;
    const int64_t rows = block ? (s.seq_q() + s.block_q - 1) / s.block_q : s.seq_q();
    const int64_t cols = block ? (s.seq_k() + s.block_k - 1) / s.block_k : s.seq_k();
    TensorView mask = allocate(set.mask, DType::boolean, {1, 1, rows, cols});
    std::bernoulli_distribution attend(s.density);
    for (int64_t i = 0; i < rows * cols; ++i) static_cast<bool*>(mask.data)[i] = attend(rng);
    if (block) {
      f.mask.block_mask = mask;
      f.mask.block_q = s.block_q;
      f.mask.block_k = s.block_k;
    } else {
      f.mask.element_mask = mask;
    }
  }
  // Checked once here; every timed run then goes straight to the CPU drivers with the config under
  // test, bypassing the tuner (which is waiting for this runner).
  const RunOptions options{Backend::cpu, nullptr, 0};
  detail::validate_attention_forward(f, options);
  set.shape = detail::describe_attention(f.q, f.k, f.v, f.scale);
  if (s.op != TuneOp::attention_backward) return;

  // Backward needs the forward's outputs; they are computed once here, with all threads.
  cpu::attention_forward_configured(f, set.shape, options, cpu::CpuAttentionConfig{});
  AttentionBackward& b = set.backward;
  b.q = f.q;
  b.k = f.k;
  b.v = f.v;
  b.out = f.out;
  b.lse = f.lse;
  b.mask = f.mask;
  b.grad_out = allocate(set.grad_out, s.dtype, tensor_extents(s, s.tokens, s.heads_q, s.head_dim_v));
  fill_random(b.grad_out, rng);
  b.grad_q = allocate(set.grad_q, s.dtype, tensor_extents(s, s.tokens, s.heads_q, s.head_dim));
  b.grad_k = allocate(set.grad_k, s.dtype, tensor_extents(s, s.tokens_kv, s.heads_kv, s.head_dim));
  b.grad_v = allocate(set.grad_v, s.dtype, tensor_extents(s, s.tokens_kv, s.heads_kv, s.head_dim_v));
  detail::validate_attention_backward(b, options);
}

double CpuAttentionRunner::measure_seconds(const Config& config, int iteration) {
  BufferSet& set = sets_[static_cast<size_t>(iteration) % sets_.size()];
  const RunOptions options{Backend::cpu, nullptr, 0};
  const cpu::CpuAttentionConfig driver_config = cpu_attention_config(config);
  const auto start = std::chrono::steady_clock::now();
  if (spec_.op == TuneOp::attention_backward)
    cpu::attention_backward_configured(set.backward, set.shape, options, driver_config);
  else
    cpu::attention_forward_configured(set.forward, set.shape, options, driver_config);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace attnkit::tune
