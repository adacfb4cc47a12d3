#include "tune/problem_spec.hpp"

#include <string>

#include "attnkit/error.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::tune {
namespace {

[[noreturn]] void reject(const std::string& what) { throw Error(Status::invalid_argument, "tune problem: " + what); }

void require_positive(const char* field, int64_t value) {
  if (value < 1) reject(std::string(field) + ": " + std::to_string(value) + "; allowed: >= 1");
}

}  // namespace

std::string_view op_name(TuneOp op) {
  switch (op) {
    case TuneOp::attention_forward: return "attention_fwd";
    case TuneOp::attention_backward: return "attention_bwd";
    case TuneOp::retention_forward: return "retention_fwd";
    case TuneOp::retention_backward: return "retention_bwd";
    case TuneOp::gemm: return "gemm";
  }
  return "unknown";
}

std::optional<TuneOp> parse_op(std::string_view name) {
  for (const TuneOp op : {TuneOp::attention_forward, TuneOp::attention_backward, TuneOp::retention_forward,
                          TuneOp::retention_backward, TuneOp::gemm}) {
    if (name == op_name(op)) return op;
  }
  return std::nullopt;
}

bool is_backward(TuneOp op) { return op == TuneOp::attention_backward || op == TuneOp::retention_backward; }

std::string_view mask_name(MaskKind kind) {
  switch (kind) {
    case MaskKind::none: return "none";
    case MaskKind::causal: return "causal";
    case MaskKind::neighborhood: return "neighborhood";
    case MaskKind::block: return "block";
    case MaskKind::element: return "element";
  }
  return "unknown";
}

std::optional<MaskKind> parse_mask(std::string_view name) {
  for (const MaskKind kind :
       {MaskKind::none, MaskKind::causal, MaskKind::neighborhood, MaskKind::block, MaskKind::element}) {
    if (name == mask_name(kind)) return kind;
  }
  return std::nullopt;
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "float32" || name == "fp32" || name == "f32") return DType::f32;
  if (name == "float16" || name == "fp16" || name == "f16") return DType::f16;
  if (name == "bfloat16" || name == "bf16") return DType::bf16;
  if (name == "float64" || name == "fp64" || name == "f64") return DType::f64;
  return std::nullopt;
}

void validate_problem_spec(const ProblemSpec& spec) {
  require_positive("batch", spec.batch);
  require_positive("heads", spec.heads_q);
  require_positive("heads_kv", spec.heads_kv);
  require_positive("head_dim", spec.head_dim);
  require_positive("head_dim_v", spec.head_dim_v);
  if (spec.heads_q % spec.heads_kv != 0) {
    reject("heads_kv: " + std::to_string(spec.heads_kv) + " does not divide heads " + std::to_string(spec.heads_q) +
           "; allowed: heads % heads_kv == 0");
  }
  if (spec.token_dims < 1 || spec.token_dims > kMaxTokenDims) {
    reject("tokens: " + std::to_string(spec.token_dims) + " extents; allowed: 1 to 3");
  }
  for (int d = 0; d < kMaxTokenDims; ++d) {
    require_positive("tokens", spec.tokens[static_cast<size_t>(d)]);
    require_positive("tokens_kv", spec.tokens_kv[static_cast<size_t>(d)]);
  }
  if (spec.mask == MaskKind::neighborhood) {
    for (int d = 0; d < spec.token_dims; ++d) {
      const auto& na = spec.neighborhood[static_cast<size_t>(d)];
      const int64_t extent = spec.tokens[static_cast<size_t>(d)];
      const std::string at = std::string("[").append(std::to_string(d)).append("]");
      require_positive(("kernel_size" + at).c_str(), na.kernel_size);
      require_positive(("dilation" + at).c_str(), na.dilation);
      if (na.kernel_size * na.dilation > extent) {
        reject("kernel_size" + at + ": " + std::to_string(na.kernel_size) + " with dilation " +
               std::to_string(na.dilation) + " needs " + std::to_string(na.kernel_size * na.dilation) +
               " tokens but the extent is " + std::to_string(extent) + "; allowed: kernel_size*dilation <= extent");
      }
      if (na.stride < 1 || na.stride > na.kernel_size) {
        reject("stride" + at + ": " + std::to_string(na.stride) + "; allowed: 1 <= stride <= kernel_size");
      }
    }
  }
  if (spec.mask == MaskKind::block) {
    require_positive("block_q", spec.block_q);
    require_positive("block_k", spec.block_k);
  }
  if (!(spec.density > 0.0 && spec.density <= 1.0)) {
    reject("density: " + std::to_string(spec.density) + "; allowed: 0 < density <= 1");
  }
  const bool flat =
      spec.op == TuneOp::gemm || spec.op == TuneOp::retention_forward || spec.op == TuneOp::retention_backward;
  if (flat && spec.token_dims != 1) {
    reject("tokens: " + std::to_string(spec.token_dims) + " extents for " + std::string(op_name(spec.op)) +
           "; allowed: 1 (" + (spec.op == TuneOp::gemm ? "M" : "T") + ")");
  }
  if (spec.op == TuneOp::gemm && (spec.variant < 0 || spec.variant > kGemmVariantBits)) {
    reject("variant: " + std::to_string(spec.variant) +
           " for gemm; allowed: 0 to 7 (bits: 1 A transposed, 2 B transposed, 4 TF32 allowed)");
  }
}

ProblemSpec attention_problem_spec(TuneOp op, DType dtype, const detail::AttentionShape& shape,
                                   const AttentionMask& mask, double density) {
  ProblemSpec spec;
  spec.op = op;
  spec.dtype = dtype;
  spec.batch = shape.batch;
  spec.heads_q = shape.heads_q;
  spec.heads_kv = shape.heads_kv;
  spec.head_dim = shape.head_dim;
  spec.head_dim_v = shape.head_dim_v;
  spec.token_dims = shape.token_dims;
  spec.tokens = shape.tokens;
  spec.tokens_kv = shape.tokens_kv;
  // The KV extents of a flat (1-D) problem with several Q dims would not line up per dim; keep them
  // as the product along dim 0 then, which is what every mask but neighborhood uses.
  if (shape.token_dims_kv != shape.token_dims) {
    spec.tokens_kv = {shape.seq_k, 1, 1};
  }
  spec.mask = mask.kind;
  spec.causal_alignment = mask.causal_alignment;
  if (mask.kind == MaskKind::neighborhood) spec.neighborhood = mask.neighborhood;
  spec.block_q = mask.kind == MaskKind::block ? mask.block_q : 0;
  spec.block_k = mask.kind == MaskKind::block ? mask.block_k : 0;
  spec.density = (mask.kind == MaskKind::block || mask.kind == MaskKind::element) ? density : 1.0;
  spec.positional_bias = mask.rpb.defined();
  return spec;
}

ProblemSpec gemm_problem_spec(DType dtype, int64_t m, int64_t n, int64_t k, int64_t batch, bool a_transposed,
                              bool b_transposed, bool allow_tf32) {
  ProblemSpec spec;
  spec.op = TuneOp::gemm;
  spec.dtype = dtype;
  spec.batch = batch;
  spec.head_dim = spec.head_dim_v = k;
  spec.tokens = {m, 1, 1};
  spec.tokens_kv = {n, 1, 1};
  spec.variant = (a_transposed ? kGemmATransposed : 0) | (b_transposed ? kGemmBTransposed : 0) |
                 (allow_tf32 && dtype == DType::f32 ? kGemmAllowTf32 : 0);
  return spec;
}

ProblemSpec retention_problem_spec(TuneOp op, DType dtype, int64_t batch, int64_t heads, int64_t tokens,
                                   int64_t head_dim, int64_t head_dim_v) {
  ProblemSpec spec;
  spec.op = op;
  spec.dtype = dtype;
  spec.batch = batch;
  spec.heads_q = spec.heads_kv = heads;
  spec.head_dim = head_dim;
  spec.head_dim_v = head_dim_v;
  spec.tokens = spec.tokens_kv = {tokens, 1, 1};
  return spec;
}

}  // namespace attnkit::tune
