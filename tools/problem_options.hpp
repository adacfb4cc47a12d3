// The options that describe an attention problem (shape, mask), shared by `attnkit run` and
// `attnkit tune --dry-run`: both register them with add_problem_options(), so the two commands take
// the same names, defaults and Python spellings, and the same options describe the same problem.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace attnkit::cli {

// float32: what the Python API computes in by default (it takes torch's default dtype from its
// tensors) and what the README's examples use.
inline constexpr const char* kDefaultDType = "f32";

// Token extents of OP when --tokens is not given: 32x32 for na2d, 8x12x12 for na3d, 1024 for na1d,
// 512 otherwise (attention, the sparse ops, retention).
std::string default_tokens(const std::string& op);

struct ProblemOptions {
  int64_t batch = 1;
  int64_t heads = 4;
  int64_t heads_kv = 0;   // 0 = heads
  std::string tokens;     // "" = default_tokens(op)
  std::string tokens_kv;  // "" = tokens
  int64_t head_dim = 64;
  int64_t head_dim_v = 0;  // 0 = head_dim
  std::string kernel_size = "7";
  std::string dilation = "1";
  std::string stride = "1";
  bool causal_given = false;  // set by note_causal_given()
  std::string causal;         // value of --causal ("" when given without a value)
  std::string causal_align = "top-left";
  std::string block_size = "64";
  double density = 0.1;
};

// Registers --batch, --heads, ..., --density in `group`, and the hidden Python spellings --is-causal
// (for --causal) and --causal-alignment (for --causal-align).
void add_problem_options(CLI::App* app, ProblemOptions& options, const std::string& group);

// After parsing: whether --causal (or --is-causal) was given, which a value cannot tell.
void note_causal_given(const CLI::App* app, ProblemOptions& options);

}  // namespace attnkit::cli
