// `attnkit run OP [options]`: allocate random inputs on the chosen backend's device, run the op
// (and with --backward its gradient), report the median time and useful throughput, and with
// --check compare every output against the brute-force float64 reference. The report is text on
// stdout, or one JSON document with --json (fields in kJsonFields); progress goes to stderr.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "attnkit/backend.hpp"
#include "cli_device.hpp"
#include "cli_parse.hpp"
#include "commands.hpp"
#include "python_spellings.hpp"
#include "run_settings.hpp"

namespace attnkit::cli {
namespace {

// Explicit bounds, so a bad value is reported as e.g. "Value 0 not in range 1 to 2147483647".
const CLI::Range kPositive(int64_t{1}, int64_t{std::numeric_limits<int32_t>::max()});
const CLI::Range kNonNegative(int64_t{0}, int64_t{std::numeric_limits<int32_t>::max()});

const std::vector<std::string> kOps{"attention",    "na1d",           "na2d",      "na3d",
                                    "block-sparse", "element-sparse", "retention", "gemm"};

const char* const kJsonFields = R"(JSON output (--json): one document on stdout when the run ends:
  op, backend (as asked: auto|cpu|cuda), device (where it ran: cpu|cuda), dtype (f32|f16|bf16|f64)
  problem: attention ops: batch, heads, heads_kv, tokens and tokens_kv (lists of extents), head_dim,
             head_dim_v, attended_pairs, attended_fraction, mask: {kind: none|causal|neighborhood|
             block|element; causal: causal_alignment; neighborhood: kernel_size, dilation, stride,
             causal (lists, one entry per dimension); block: block_size [q, k], density; element: density,
             path (auto|tiles|scattered, as --mask-path asked)}
           retention: batch, tokens, heads, head_dim, head_dim_v, mode, chunk_size, normalize, gamma
           gemm: batch, m, n, k, transpose_a, transpose_b, alpha, beta, allow_tf32
  flops: forward, backward (not gemm), formula
  forward, and backward with --backward (not gemm): median_ms, min_ms, runs, warmup, flops_per_second
  check (with --check): passed, outputs: [{name, rel_l2 (null when NaN or infinite), tolerance, passed}]
Errors go to stderr (exit 2) and then nothing is printed on stdout; a failed check exits 1.)";

const char* const kPythonSpellingsNote =
    "Python's spellings are accepted too: --chunk-size (for --chunk), --causal-alignment (--causal-align), "
    "--is-causal (--causal), --mode chunk (chunkwise), top_left/bottom_right, float32/float16/bfloat16/float64.";

int run_op(const RunSettings& settings) {
  RunContext context;
  context.dtype = parse_dtype(settings.dtype);
  const Backend backend = parse_backend(settings.backend);
  context.device = choose_device(backend);
  context.options.backend = backend;
  context.options.num_threads = settings.threads;
  context.rng.seed(settings.seed);
  context.report = RunReport(settings.json);
  context.progress = ProgressOutput::to_stderr(settings.quiet);
  const char* device = context.device.type == DeviceType::cuda ? "cuda" : "cpu";
  context.report.line("attnkit run %s: backend %s on %s, dtype %s", settings.op.c_str(), settings.backend.c_str(),
                      device, dtype_flag_name(context.dtype));
  context.report.document() = Json{{"op", settings.op},
                                   {"backend", settings.backend},
                                   {"device", device},
                                   {"dtype", dtype_flag_name(context.dtype)}};
  int exit_code = 0;
  if (settings.op == "retention") {
    exit_code = run_retention(settings, context);
  } else if (settings.op == "gemm") {
    exit_code = run_gemm(settings, context);
  } else {
    exit_code = run_attention(settings, context);
  }
  context.report.print_document();
  return exit_code;
}

void add_retention_options(CLI::App* app, RunSettings& s) {
  const char* group = "Retention";
  app->add_option("--mode", s.mode, "parallel|chunkwise|recurrent")->group(group);
  app->add_option("--chunk", s.chunk, "Chunk size of the chunkwise form")->check(kPositive)->group(group);
  add_python_spelling(app, "--chunk-size", s.chunk)->check(kPositive);
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
  app->add_option("--dtype", s.dtype, std::string("f32|f16|bf16|f64 (default ") + kDefaultDType + ", as in Python)");
  app->add_option("--backend", s.backend, "auto|cpu|cuda (auto: cuda when a GPU is present)");
  app->add_flag("--backward", s.backward, "Also run and time the backward");
  app->add_option("--seed", s.seed, "Seed of the random inputs and masks");
  app->add_option("--warmup", s.warmup, "Untimed runs first")->check(kNonNegative);
  app->add_option("--repeat", s.repeat, "Timed runs (the median is reported)")->check(kPositive);
  app->add_option("--threads", s.threads, "CPU threads (0: all)")->check(kNonNegative);
  app->add_flag("--check", s.check, "Compare with the float64 brute-force reference; exit 1 on FAIL");
  app->add_flag("--json", s.json, "Report as one JSON document on stdout (fields below)");
  app->add_flag("--quiet", s.quiet, "No progress lines on stderr (errors are still printed)");
}

}  // namespace

Command add_run_command(CLI::App& parent) {
  auto settings = std::make_shared<RunSettings>();
  CLI::App* app = parent.add_subcommand("run", "Run, time and optionally check one op");
  app->add_option("op", settings->op, "attention|na1d|na2d|na3d|block-sparse|element-sparse|retention|gemm")
      ->required()
      ->check(CLI::IsMember(kOps));
  add_common_options(app, *settings);
  add_problem_options(app, *settings, "Attention (attention, na1d/2d/3d, block-sparse, element-sparse)");
  app->add_option("--mask-path", settings->mask_path,
                  "element-sparse on CUDA: auto (from the mask's density), tiles (tensor-core tile list) or "
                  "scattered (sparse path following the true entries); speed only, never results")
      ->check(CLI::IsMember({"auto", "tiles", "scattered"}))
      ->group("Attention (attention, na1d/2d/3d, block-sparse, element-sparse)");
  add_retention_options(app, *settings);
  add_gemm_options(app, *settings);
  app->footer(std::string(kJsonFields) + "\n\n" + kPythonSpellingsNote);
  return Command{app, [app, settings] {
                   note_causal_given(app, *settings);
                   return run_op(*settings);
                 }};
}

}  // namespace attnkit::cli
