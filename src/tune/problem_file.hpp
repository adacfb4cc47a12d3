// Problem lists for offline tuning (`attnkit tune --optimize FILE`): JSON lines, one problem per
// line; blank lines and lines starting with '#' are skipped. Fields (all but op optional):
//   {"op": "attention_fwd", "dtype": "float16", "batch": 2, "heads": 8, "heads_kv": 2,
//    "head_dim": 64, "head_dim_v": 64, "tokens": [56, 56], "tokens_kv": [56, 56],
//    "mask": "neighborhood", "kernel_size": [7, 7], "dilation": [1, 1], "stride": [1, 1],
//    "causal": [false, false], "causal_alignment": "top_left", "block_q": 64, "block_k": 64,
//    "density": 0.25, "variant": 0, "rpb": 0}
// Defaults: dtype float16, batch 1, heads 1, heads_kv = heads, head_dim 64, head_dim_v = head_dim,
// tokens_kv = tokens, mask none; per-dimension lists may be a single number (applied to every dim);
// "rpb": 1 marks a neighborhood problem with a relative positional bias.
// Retention (retention_fwd, retention_bwd): "tokens" is T, "heads" H, "head_dim" Dk, "head_dim_v" Dv.
// gemm, in problem_spec.hpp's canonical form (C row-major):
//   {"op": "gemm", "dtype": "bf16", "batch": 1, "m": 1024, "n": 4096, "k": 4096, "transpose_a": false,
//    "transpose_b": true, "allow_tf32": false}
// where "m", "n", "k" may also be written "tokens", "tokens_kv", "head_dim" and the flags as "variant" bits.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tune/problem_spec.hpp"

namespace attnkit::tune {

// Throws Error(invalid_argument) naming the field and what is allowed; validates the result.
ProblemSpec problem_spec_from_json(std::string_view json_text);
std::string problem_spec_to_json(const ProblemSpec& spec);  // one line, round-trips

// Throws Error(invalid_argument) prefixed with "FILE:LINE: ".
std::vector<ProblemSpec> read_problem_list(const std::filesystem::path& file);

}  // namespace attnkit::tune
