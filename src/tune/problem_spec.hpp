// What the tuner tunes: one op on one problem shape, described by plain numbers so that it can be
// built from an API call, a CLI option list or a line of a problem file alike.
//
// Field meanings per op (one struct serves every op so that keys, files and the CLI stay uniform):
//   attention_*: tokens / tokens_kv = Q and KV token extents, head_dim = D, head_dim_v = Dv.
//   retention_*: batch = B, heads_q = heads_kv = H, tokens[0] = tokens_kv[0] = T, head_dim = Dk,
//                head_dim_v = Dv, block_q = chunk, variant = form (both 0 for the CUDA chunkwise kernel,
//                whose chunk is fixed and which runs every form: retention_problem_spec).
//   gemm:        C[M, N] = op(A)[M, K] op(B)[K, N] with a row-major C (the CUDA backend's canonical form):
//                tokens[0] = M, tokens_kv[0] = N, head_dim = head_dim_v = K, batch = batch count,
//                heads 1, variant = kGemm* bits (A transposed: op(A) MN-major; B transposed: op(B)
//                K-major, i.e. x @ W^T; TF32 allowed, fp32 only): gemm_problem_spec.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "attnkit/attention.hpp"
#include "attnkit/dtype.hpp"

namespace attnkit::detail {
struct AttentionShape;
}

namespace attnkit::tune {

enum class TuneOp : int32_t {
  attention_forward = 0,
  attention_backward = 1,
  retention_forward = 2,
  retention_backward = 3,
  gemm = 4,
};

// "attention_fwd", "attention_bwd", "retention_fwd", "retention_bwd", "gemm".
std::string_view op_name(TuneOp op);
std::optional<TuneOp> parse_op(std::string_view name);
bool is_backward(TuneOp op);

std::string_view mask_name(MaskKind kind);  // "none", "causal", "neighborhood", "block", "element"
std::optional<MaskKind> parse_mask(std::string_view name);
std::optional<DType> parse_dtype(std::string_view name);  // "float16"/"fp16", "bfloat16"/"bf16", ...

struct ProblemSpec {
  TuneOp op = TuneOp::attention_forward;
  DType dtype = DType::f16;
  int64_t batch = 1;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;
  int64_t head_dim = 64;
  int64_t head_dim_v = 64;
  int32_t token_dims = 1;
  std::array<int64_t, kMaxTokenDims> tokens{1, 1, 1};     // unused dims = 1
  std::array<int64_t, kMaxTokenDims> tokens_kv{1, 1, 1};  // unused dims = 1
  MaskKind mask = MaskKind::none;
  CausalAlignment causal_alignment = CausalAlignment::top_left;
  std::array<NeighborhoodDim, kMaxTokenDims> neighborhood{};  // first token_dims entries used
  int64_t block_q = 0;                                        // block mask: block sizes; retention: chunk size
  int64_t block_k = 0;
  double density = 1.0;  // block / element masks: fraction of attended blocks or elements
  int32_t variant = 0;
  bool positional_bias = false;  // attention: the mask carries a relative positional bias (mask.rpb)

  int64_t seq_q() const { return tokens[0] * tokens[1] * tokens[2]; }
  int64_t seq_k() const { return tokens_kv[0] * tokens_kv[1] * tokens_kv[2]; }
  int64_t gqa_ratio() const { return heads_kv > 0 ? heads_q / heads_kv : 0; }
};

// ProblemSpec::variant bits of a gemm problem.
inline constexpr int32_t kGemmATransposed = 1;  // op(A) is MN-major (A stored [K, M] row-major)
inline constexpr int32_t kGemmBTransposed = 2;  // op(B) is K-major (B stored [N, K] row-major)
inline constexpr int32_t kGemmAllowTf32 = 4;    // fp32 inputs may run on TF32 tensor cores
inline constexpr int32_t kGemmVariantBits = 7;

// Throws Error(invalid_argument) naming the first field that is out of range.
void validate_problem_spec(const ProblemSpec& spec);

// The spec of an attention call that has passed validation. `density` is the fraction of attended
// blocks (block mask) or elements (element mask); the caller counts it, since only it reads the mask.
ProblemSpec attention_problem_spec(TuneOp op, DType dtype, const detail::AttentionShape& shape,
                                   const AttentionMask& mask, double density = 1.0);

// The spec of a gemm in canonical form (see above): what a problem file line with "m", "n", "k" (or
// "tokens", "tokens_kv", "head_dim") and the transpose flags gives. allow_tf32 counts for fp32 only.
ProblemSpec gemm_problem_spec(DType dtype, int64_t m, int64_t n, int64_t k, int64_t batch, bool a_transposed,
                              bool b_transposed, bool allow_tf32);

// The spec of a retention call of op retention_forward or retention_backward: q [B, T, H, Dk], v [.., Dv];
// chunk and form left 0 (what a problem file line without "block_q" and "variant" gives).
ProblemSpec retention_problem_spec(TuneOp op, DType dtype, int64_t batch, int64_t heads, int64_t tokens,
                                   int64_t head_dim, int64_t head_dim_v);

}  // namespace attnkit::tune
