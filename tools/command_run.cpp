// `attnkit run OP [options]`: allocate random inputs on the chosen backend's device, run the op
// (and with --backward its gradient), print the median time and useful throughput, and with
// --check compare every output against the brute-force float64 reference.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "attnkit/backend.hpp"
#include "cli_device.hpp"
#include "cli_parse.hpp"
#include "commands.hpp"
#include "run_settings.hpp"

namespace attnkit::cli {
namespace {

// Explicit bounds, so a bad value is reported as e.g. "Value 0 not in range 1 to 2147483647".
const CLI::Range kPositive(int64_t{1}, int64_t{std::numeric_limits<int32_t>::max()});
const CLI::Range kNonNegative(int64_t{0}, int64_t{std::numeric_limits<int32_t>::max()});

const std::vector<std::string> kOps{"attention",    "na1d",           "na2d",      "na3d",
                                    "block-sparse", "element-sparse", "retention", "gemm"};

int run_op(const RunSettings& settings) {
  RunContext context;
  context.dtype = parse_dtype(settings.dtype);
  const Backend backend = parse_backend(settings.backend);
  context.device = choose_device(backend);
  context.options.backend = backend;
  context.options.num_threads = settings.threads;
  context.rng.seed(settings.seed);
  if (settings.op == "retention") {
    return run_retention(settings, context);
  }
  if (settings.op == "gemm") {
    return run_gemm(settings, context);
  }
  return run_attention(settings, context);
}

void add_attention_options(CLI::App* app, RunSettings& s) {
  const char* group = "Attention (attention, na1d/2d/3d, block-sparse, element-sparse)";
  app->add_option("--batch", s.batch, "Batch size B (also the GEMM batch)")->check(kPositive)->group(group);
  app->add_option("--heads", s.heads, "Query heads Hq (retention: heads H)")->check(kPositive)->group(group);
  app->add_option("--heads-kv", s.heads_kv, "Key/value heads Hkv (default Hq)")->check(kPositive)->group(group);
  app->add_option("--tokens", s.tokens, "Query token extents, e.g. 4096 or 64x64 (retention: T)")->group(group);
  app->add_option("--tokens-kv", s.tokens_kv, "Key/value token extents (default: --tokens)")->group(group);
  app->add_option("--head-dim", s.head_dim, "Head dim D (retention: Dk)")->check(kPositive)->group(group);
  app->add_option("--head-dim-v", s.head_dim_v, "Value head dim Dv (default D)")->check(kPositive)->group(group);
  app->add_option("--kernel-size", s.kernel_size, "Neighborhood window per dim, e.g. 13x13 (one value: all dims)")
      ->group(group);
  app->add_option("--dilation", s.dilation, "Neighborhood dilation per dim")->group(group);
  app->add_option("--stride", s.stride, "Neighborhood stride per dim")->group(group);
  app->add_option("--causal", s.causal, "attention: causal mask (flag); na: causal per dim, e.g. 1 or 0x1")
      ->expected(0, 1)
      ->group(group);
  app->add_option("--causal-align", s.causal_align, "Causal diagonal when Sq != Sk: top-left|bottom-right")
      ->group(group);
  app->add_option("--block-size", s.block_size, "Block mask block sizes block_q x block_k, e.g. 64x64")->group(group);
  app->add_option("--density", s.density, "Fraction of true blocks/elements of the random (seeded) mask")
      ->check(CLI::Range(0.0, 1.0))
      ->group(group);
}

void add_retention_options(CLI::App* app, RunSettings& s) {
  const char* group = "Retention";
  app->add_option("--mode", s.mode, "parallel|chunkwise|recurrent")->group(group);
  app->add_option("--chunk", s.chunk, "Chunk size of the chunkwise form")->check(kPositive)->group(group);
  app->add_flag("--normalize", s.normalize, "RetNet's normalised parallel form (needs --mode parallel)")->group(group);
}

void add_gemm_options(CLI::App* app, RunSettings& s) {
  const char* group = "GEMM";
  app->add_option("--m", s.m, "Rows of op(A) and C")->check(kPositive)->group(group);
  app->add_option("--n", s.n, "Columns of op(B) and C")->check(kPositive)->group(group);
  app->add_option("--k", s.k, "Inner dimension")->check(kPositive)->group(group);
  app->add_flag("--transpose-a", s.transpose_a, "op(A) = A^T")->group(group);
  app->add_flag("--transpose-b", s.transpose_b, "op(B) = B^T")->group(group);
  app->add_option("--alpha", s.alpha, "C = alpha*op(A)*op(B) + beta*C")->group(group);
  app->add_option("--beta", s.beta, "C = alpha*op(A)*op(B) + beta*C")->group(group);
  app->add_flag("--allow-tf32", s.allow_tf32, "float32 on CUDA may use TF32 tensor cores")->group(group);
}

void add_common_options(CLI::App* app, RunSettings& s) {
  app->add_option("--dtype", s.dtype, "f32|f16|bf16|f64");
  app->add_option("--backend", s.backend, "auto|cpu|cuda (auto: cuda when a GPU is present)");
  app->add_flag("--backward", s.backward, "Also run and time the backward");
  app->add_option("--seed", s.seed, "Seed of the random inputs and masks");
  app->add_option("--warmup", s.warmup, "Untimed runs first")->check(kNonNegative);
  app->add_option("--repeat", s.repeat, "Timed runs (the median is reported)")->check(kPositive);
  app->add_option("--threads", s.threads, "CPU threads (0: all)")->check(kNonNegative);
  app->add_flag("--check", s.check, "Compare with the float64 brute-force reference; exit 1 on FAIL");
}

}  // namespace

Command add_run_command(CLI::App& parent) {
  auto settings = std::make_shared<RunSettings>();
  CLI::App* app = parent.add_subcommand("run", "Run, time and optionally check one op");
  app->add_option("op", settings->op, "attention|na1d|na2d|na3d|block-sparse|element-sparse|retention|gemm")
      ->required()
      ->check(CLI::IsMember(kOps));
  add_common_options(app, *settings);
  add_attention_options(app, *settings);
  add_retention_options(app, *settings);
  add_gemm_options(app, *settings);
  const CLI::Option* causal = app->get_option("--causal");
  return Command{app, [settings, causal] {
                   settings->causal_given = causal->count() > 0;
                   return run_op(*settings);
                 }};
}

}  // namespace attnkit::cli
