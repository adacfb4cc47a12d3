// Attention problems for the CPU attention tests: one description (AttentionCase) builds owning
// host tensors with fresh random inputs, runs the library's CPU backend (outputs poisoned with
// NaN first) and the brute-force reference (float64 outputs), and exposes both results.
#pragma once
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "core/attention_shape.hpp"
#include "test_support.hpp"

namespace attnkit::test {

struct AttentionCase {
  int64_t batch = 2;
  std::vector<int64_t> tokens{7};
  std::vector<int64_t> tokens_kv{};  // empty: same as tokens
  int64_t heads_q = 2;
  int64_t heads_kv = 2;
  int64_t head_dim = 8;
  int64_t head_dim_v = 0;  // 0: same as head_dim
  DType dtype = DType::f64;
  AttentionMask mask{};
  std::optional<double> scale{};
  bool strided = false;  // every tensor a view into a larger padded buffer
  uint64_t seed = 1;
  // Neighborhood masks: a random relative positional bias (mask.rpb, [Hq, 2K-1, ...]) of this dtype, and its
  // gradient in the backward.
  std::optional<DType> rpb{};
};

// Inputs (random), library outputs (NaN until run) and reference outputs of one problem.
struct AttentionTensors {
  AttentionCase spec;
  HostTensor q, k, v, grad_out;
  HostTensor out, lse;                            // library forward outputs
  HostTensor grad_q, grad_k, grad_v;              // library backward outputs
  HostTensor ref_out, ref_lse;                    // reference forward (float64 out)
  HostTensor ref_grad_q, ref_grad_k, ref_grad_v;  // reference backward (float64)
  HostTensor rpb, grad_rpb, ref_grad_rpb;         // spec.rpb only (ref_grad_rpb float64)

  explicit AttentionTensors(const AttentionCase& spec);

  AttentionForward forward_problem() const;    // q, k, v -> out, lse
  AttentionBackward backward_problem() const;  // q, k, v, out, lse, grad_out -> grad_*
  detail::AttentionShape shape() const;

  // Poison the outputs, run the CPU backend through the public API.
  void run_forward(int32_t num_threads = 0);
  void run_backward(int32_t num_threads = 0);
  // Reference forward from q, k, v into ref_out/ref_lse; reference backward from the library's
  // out/lse (as the backward defines) into ref_grad_*.
  void run_reference_forward();
  void run_reference_backward();
};

}  // namespace attnkit::test
