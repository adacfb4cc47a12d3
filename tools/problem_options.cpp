#include "problem_options.hpp"

#include <limits>

#include "python_spellings.hpp"

namespace attnkit::cli {

std::string default_tokens(const std::string& op) {
  if (op == "na2d") return "32x32";
  if (op == "na3d") return "8x12x12";
  if (op == "na1d") return "1024";
  return "512";
}

void add_problem_options(CLI::App* app, ProblemOptions& o, const std::string& group) {
  // Explicit bounds, so a bad value is reported as e.g. "Value 0 not in range 1 to 2147483647".
  const CLI::Range positive(int64_t{1}, int64_t{std::numeric_limits<int32_t>::max()});
  app->add_option("--batch", o.batch, "Batch size B (also the GEMM batch)")->check(positive)->group(group);
  app->add_option("--heads", o.heads, "Query heads Hq (retention: heads H)")->check(positive)->group(group);
  app->add_option("--heads-kv", o.heads_kv, "Key/value heads Hkv (default Hq)")->check(positive)->group(group);
  app->add_option("--tokens", o.tokens, "Query token extents, e.g. 4096 or 64x64 (retention: T); default per op")
      ->group(group);
  app->add_option("--tokens-kv", o.tokens_kv, "Key/value token extents (default: --tokens)")->group(group);
  app->add_option("--head-dim", o.head_dim, "Head dim D (retention: Dk)")->check(positive)->group(group);
  app->add_option("--head-dim-v", o.head_dim_v, "Value head dim Dv (default D)")->check(positive)->group(group);
  app->add_option("--kernel-size", o.kernel_size, "Neighborhood window per dim, e.g. 13x13 (one value: all dims)")
      ->group(group);
  app->add_option("--dilation", o.dilation, "Neighborhood dilation per dim")->group(group);
  app->add_option("--stride", o.stride, "Neighborhood stride per dim")->group(group);
  app->add_option("--causal", o.causal, "attention: causal mask (flag); na: causal per dim, e.g. 1 or 0x1")
      ->expected(0, 1)
      ->group(group);
  app->add_option("--causal-align", o.causal_align, "Causal diagonal when Sq != Sk: top-left|bottom-right")
      ->group(group);
  add_python_spelling(app, "--is-causal", o.causal)->expected(0, 1);
  add_python_spelling(app, "--causal-alignment", o.causal_align);
  app->add_option("--block-size", o.block_size, "Block mask block sizes block_q x block_k, e.g. 64x64")->group(group);
  app->add_option("--density", o.density, "Fraction of true blocks/elements of the random (seeded) mask")
      ->check(CLI::Range(0.0, 1.0))
      ->group(group);
}

void note_causal_given(const CLI::App* app, ProblemOptions& o) {
  o.causal_given = app->get_option("--causal")->count() + app->get_option("--is-causal")->count() > 0;
}

}  // namespace attnkit::cli
