#include "tune/problem_key.hpp"

#include <charconv>

#include "tune/extent_bucket.hpp"
#include "tune/stable_hash.hpp"

namespace attnkit::tune {
namespace {

// Plain appends with to_chars: this runs on every uncached-key API call, where an ostringstream's
// locale machinery would dominate the tuner's hit cost.
void put_int(std::string& out, int64_t value) {
  char digits[24];
  const auto result = std::to_chars(digits, digits + sizeof(digits), value);
  out.append(digits, result.ptr);
}

template <typename Get>
void put_dims(std::string& out, const char* label, int32_t dims, Get get) {
  out += ' ';
  out += label;
  out += '=';
  for (int d = 0; d < dims; ++d) {
    if (d) out += 'x';
    put_int(out, get(static_cast<size_t>(d)));
  }
}

void put_field(std::string& out, const char* label, int64_t value) {
  out += ' ';
  out += label;
  out += '=';
  put_int(out, value);
}

// gemm and retention lines name their own dimensions (see the header).
void put_gemm_fields(std::string& out, const ProblemSpec& s) {
  put_field(out, "b", s.batch);
  put_field(out, "m", s.tokens[0]);
  put_field(out, "n", s.tokens_kv[0]);
  put_field(out, "k", s.head_dim);
  out += " op=";
  out += (s.variant & kGemmATransposed) != 0 ? 't' : 'n';
  out += (s.variant & kGemmBTransposed) != 0 ? 't' : 'n';
  if ((s.variant & kGemmAllowTf32) != 0) out += " tf32";
}

void put_retention_fields(std::string& out, const ProblemSpec& s) {
  put_field(out, "b", s.batch);
  put_field(out, "h", s.heads_q);
  put_field(out, "t", s.tokens[0]);
  put_field(out, "dk", s.head_dim);
  put_field(out, "dv", s.head_dim_v);
  if (s.block_q != 0) put_field(out, "chunk", s.block_q);
  if (s.variant != 0) put_field(out, "variant", s.variant);
}

}  // namespace

std::string canonical_problem_text(const ProblemSpec& s) {
  std::string out;
  out.reserve(160);
  out += op_name(s.op);
  out += ' ';
  out += dtype_name(s.dtype);
  if (s.op == TuneOp::gemm) {
    put_gemm_fields(out, s);
    return out;
  }
  if (s.op == TuneOp::retention_forward || s.op == TuneOp::retention_backward) {
    put_retention_fields(out, s);
    return out;
  }
  put_field(out, "b", s.batch);
  put_field(out, "hq", s.heads_q);
  put_field(out, "hkv", s.heads_kv);
  put_field(out, "d", s.head_dim);
  put_field(out, "dv", s.head_dim_v);
  put_dims(out, "q", s.token_dims, [&](size_t d) { return s.tokens[d]; });
  put_dims(out, "kv", s.token_dims, [&](size_t d) { return s.tokens_kv[d]; });
  out += " mask=";
  out += mask_name(s.mask);
  switch (s.mask) {
    case MaskKind::none: break;
    case MaskKind::causal:
      out += s.causal_alignment == CausalAlignment::top_left ? " align=top_left" : " align=bottom_right";
      break;
    case MaskKind::neighborhood:
      put_dims(out, "k", s.token_dims, [&](size_t d) { return s.neighborhood[d].kernel_size; });
      put_dims(out, "dil", s.token_dims, [&](size_t d) { return s.neighborhood[d].dilation; });
      put_dims(out, "st", s.token_dims, [&](size_t d) { return s.neighborhood[d].stride; });
      put_dims(out, "causal", s.token_dims, [&](size_t d) { return int64_t{s.neighborhood[d].causal ? 1 : 0}; });
      break;
    case MaskKind::block:
      put_field(out, "bq", s.block_q);
      put_field(out, "bk", s.block_k);
      out += " density=1/";
      put_int(out, int64_t{1} << density_bucket(s.density));
      break;
    case MaskKind::element:
      out += " density=1/";
      put_int(out, int64_t{1} << density_bucket(s.density));
      break;
  }
  if (s.mask != MaskKind::block && s.block_q != 0) put_field(out, "chunk", s.block_q);
  if (s.variant != 0) put_field(out, "variant", s.variant);
  if (s.positional_bias) out += " rpb";
  return out;
}

ProblemKey make_problem_key(const ProblemSpec& exact) {
  ProblemKey key;
  key.spec = exact;
  auto& s = key.spec;
  s.batch = bucket_extent(s.batch);
  for (int d = 0; d < kMaxTokenDims; ++d) {
    // Unused dims stay 1 so that seq_q() is the product of the used extents.
    const auto i = static_cast<size_t>(d);
    s.tokens[i] = d < s.token_dims ? bucket_extent(s.tokens[i]) : 1;
    // A gemm's N (tokens_kv) stays exact: see the header.
    const bool exact_kv = s.op == TuneOp::gemm;
    s.tokens_kv[i] = d < s.token_dims ? (exact_kv ? s.tokens_kv[i] : bucket_extent(s.tokens_kv[i])) : 1;
    if (s.mask != MaskKind::neighborhood || d >= s.token_dims) s.neighborhood[i] = NeighborhoodDim{};
  }
  const bool sparse = s.mask == MaskKind::block || s.mask == MaskKind::element;
  s.density = sparse ? density_of_bucket(density_bucket(s.density)) : 1.0;
  if (s.mask != MaskKind::causal) s.causal_alignment = CausalAlignment::top_left;
  key.text = canonical_problem_text(s);
  key.hash = stable_hash(key.text);
  return key;
}

}  // namespace attnkit::tune
