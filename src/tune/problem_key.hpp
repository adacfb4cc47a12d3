// The canonical identity of a tuning problem: the spec with its varying sizes bucketed
// (extent_bucket.hpp), printed as one stable, human-readable line, plus that line's stable hash.
// Every problem in a bucket has the same key, so they share one tuned config; the key's spec (the
// bucket's representative, sizes rounded up) is what the cost model and offline tuning run on.
//
// The text lists only the fields that matter for the op and mask, in a fixed order, e.g.
//   attention_fwd float16 b=2 hq=8 hkv=2 d=64 dv=64 q=56x56 kv=56x56 mask=neighborhood k=7x7 dil=1x1 st=1x1 causal=0x0
//   retention_fwd bfloat16 b=2 h=8 t=4096 dk=128 dv=128
//   gemm float16 b=1 m=1024 n=4096 k=4096 op=nt          (op: A then B, n = as stored, t = transposed; " tf32")
// It is the record key in cache files, so changing its format needs a cache format version bump.
//
// What is bucketed: the batch and the token extents (attention: Q and KV; retention: T; gemm: M, the
// dimension that follows the tokens of a model's activations). A gemm's N and K are a model's weight
// shapes and decide which kernels can run it (alignment), so they stay exact; head dims are never bucketed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tune/problem_spec.hpp"

namespace attnkit::tune {

struct ProblemKey {
  ProblemSpec spec;  // bucketed
  std::string text;
  uint64_t hash = 0;  // stable_hash(text)

  friend bool operator==(const ProblemKey& a, const ProblemKey& b) { return a.hash == b.hash && a.text == b.text; }
};

// Buckets `exact` (batch, token extents, density) and derives text and hash. Does not validate.
ProblemKey make_problem_key(const ProblemSpec& exact);

// The canonical line of an already bucketed spec.
std::string canonical_problem_text(const ProblemSpec& bucketed);

}  // namespace attnkit::tune
