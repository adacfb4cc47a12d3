// `attnkit tune`: the tuner offline (DESIGN §6.8).
//   attnkit tune --dry-run OP [problem options] [--all]   lists the configs that can run the problem
//       (its bucket), cheapest predicted first, marking the default and the ones a tuning run times;
//   attnkit tune --optimize FILE [--dir DIR] [--force]     tunes every problem of a JSON-lines file
//       (format: src/tune/problem_file.hpp, docs/tuner.md) into the cache, printing progress.
// Backends: cpu, and cuda (device 0) in a build with CUDA. Problem
// options match `attnkit run` (OP = attention | na1d | na2d | na3d | block-sparse | element-sparse,
// --backward for the gradient).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>

#include "attnkit/error.hpp"
#include "cli_errors.hpp"
#include "cli_parse.hpp"
#include "commands.hpp"
#include "cpu/tune/cpu_attention_runner.hpp"
#include "tune/device_key.hpp"
#include "tune/offline_tuning.hpp"
#include "tune/problem_file.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include "cuda/tune/fmha_attention_runner.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"
#endif

namespace attnkit::cli {
namespace {

using namespace attnkit::tune;

struct TuneOptions {
  bool dry_run = false;
  std::string optimize_file;
  std::string op;
  bool backward = false;
  std::string dtype = "f16";
  int64_t batch = 1;
  int64_t heads = 8;
  int64_t heads_kv = 0;
  int64_t head_dim = 64;
  int64_t head_dim_v = 0;
  std::string tokens = "4096";
  std::string tokens_kv;
  std::string kernel_size = "7";
  std::string dilation = "1";
  std::string stride = "1";
  bool causal_given = false;
  std::string causal;  // value of --causal: attention "", "1" or "0"; na: per-dim flags ("" = all causal)
  std::string causal_align = "top-left";
  std::string block_size = "64";
  double density = 0.1;
  std::string backend = "cpu";
  int threads = 0;
  bool all = false;
  std::string dir;
  bool force = false;
  bool thorough = false;
  int top_k = 4;
  double margin = 0.03;
  int warmup = 5;
  int steps = 20;
};

ProblemSpec problem_from_options(const TuneOptions& o) {
  ProblemSpec s;
  s.op = o.backward ? TuneOp::attention_backward : TuneOp::attention_forward;
  s.dtype = parse_dtype(o.dtype);
  s.batch = o.batch;
  s.heads_q = o.heads;
  s.heads_kv = o.heads_kv > 0 ? o.heads_kv : o.heads;
  s.head_dim = o.head_dim;
  s.head_dim_v = o.head_dim_v > 0 ? o.head_dim_v : o.head_dim;
  const auto tokens = parse_extents(o.tokens, "--tokens");
  const auto tokens_kv = o.tokens_kv.empty() ? tokens : parse_extents(o.tokens_kv, "--tokens-kv");
  if (tokens.size() > 3 || tokens_kv.size() != tokens.size()) {
    throw UsageError("--tokens/--tokens-kv: " + o.tokens + " / " + o.tokens_kv +
                     "; allowed: 1 to 3 extents, the same count for both");
  }
  s.token_dims = static_cast<int32_t>(tokens.size());
  for (size_t d = 0; d < tokens.size(); ++d) {
    s.tokens[d] = tokens[d];
    s.tokens_kv[d] = tokens_kv[d];
  }
  if (o.op == "attention") {
    if (o.causal_given && !o.causal.empty() && o.causal != "1" && o.causal != "0") {
      throw UsageError("--causal: '" + o.causal + "' for attention; allowed: --causal (a flag), 1 or 0");
    }
    s.mask = o.causal_given && o.causal != "0" ? MaskKind::causal : MaskKind::none;
    s.causal_alignment = parse_alignment(o.causal_align);
  } else if (o.op == "na1d" || o.op == "na2d" || o.op == "na3d") {
    const int dims = o.op[2] - '0';
    if (s.token_dims != dims) {
      throw UsageError("--tokens: " + o.tokens + " has " + std::to_string(s.token_dims) + " extents but " + o.op +
                       " needs " + std::to_string(dims));
    }
    s.mask = MaskKind::neighborhood;
    const auto kernel = per_dimension(parse_extents(o.kernel_size, "--kernel-size"), dims, "--kernel-size");
    const auto dilation = per_dimension(parse_extents(o.dilation, "--dilation"), dims, "--dilation");
    const auto stride = per_dimension(parse_extents(o.stride, "--stride"), dims, "--stride");
    const auto causal = per_dimension(parse_flags(!o.causal_given    ? "0"
                                                  : o.causal.empty() ? "1"
                                                                     : o.causal,
                                                  "--causal"),
                                      dims, "--causal");
    for (int d = 0; d < dims; ++d) {
      const auto i = static_cast<size_t>(d);
      s.neighborhood[i] = NeighborhoodDim{kernel[i], dilation[i], stride[i], causal[i]};
    }
  } else if (o.op == "block-sparse") {
    s.mask = MaskKind::block;
    const auto blocks = per_dimension(parse_extents(o.block_size, "--block-size"), 2, "--block-size");
    s.block_q = blocks[0];
    s.block_k = blocks[1];
    s.density = o.density;
  } else if (o.op == "element-sparse") {
    s.mask = MaskKind::element;
    s.density = o.density;
  } else {
    throw UsageError("OP: '" + o.op + "'; allowed: attention, na1d, na2d, na3d, block-sparse, element-sparse");
  }
  validate_problem_spec(s);
  return s;
}

TunerSettings settings_from_options(const TuneOptions& o) {
  TunerSettings s = settings_from_environment();
  s.mode = TuneMode::on;  // offline tuning is what was asked for, whatever ATTNKIT_TUNE says
  s.deterministic = false;
  s.thorough_mode_forward = s.thorough_mode_backward = o.thorough;
  s.top_k = o.top_k;
  s.margin = o.margin;
  s.warmup_steps_forward = s.warmup_steps_backward = o.warmup;
  s.steps_forward = s.steps_backward = o.steps;
  if (!o.dir.empty()) s.cache_dir = o.dir;
  return s;
}

#if defined(ATTNKIT_WITH_CUDA)
constexpr int kDevice = 0;  // offline CUDA tuning runs on the first device (CUDA_VISIBLE_DEVICES picks it)
#endif

// The device tuned: its tuner options, how to time a problem on it, and how to name its processors.
struct OfflineDevice {
  TunerOptions options;
  RunnerFactory make_runner;
  std::string processors;  // e.g. "8 threads", "132 SMs"
};

OfflineDevice offline_device(const TuneOptions& o) {
  OfflineDevice device;
  device.options.registry = &builtin_config_spaces();
  device.options.settings = settings_from_options(o);
  const Backend backend = parse_backend(o.backend);
  if (backend == Backend::cuda) {
#if defined(ATTNKIT_WITH_CUDA)
    const DeviceDescription description = cuda::fmha::describe_cuda_device(kDevice);
    device.options.device = description.first;
    device.options.limits = description.second;
    const int64_t l2 = cuda::fmha::device_l2_bytes(kDevice);
    device.make_runner = [l2](const ProblemSpec& bucketed) -> std::unique_ptr<Runner> {
      return std::make_unique<cuda::fmha::FmhaAttentionRunner>(bucketed, kDevice, l2);
    };
    device.processors = std::to_string(description.first.processors) + " SMs";
    return device;
#else
    throw Error(Status::unsupported, "--backend: 'cuda'; this attnkit was built without CUDA; allowed: cpu");
#endif
  }
  if (backend != Backend::cpu) {
    throw Error(Status::unsupported, "--backend: '" + o.backend + "'; allowed: cpu, cuda");
  }
  device.options.device = cpu_device_key(o.threads, *device.options.registry);
  device.options.limits = cpu_device_limits(device.options.device.processors);
  device.make_runner = [](const ProblemSpec& bucketed) -> std::unique_ptr<Runner> {
    return std::make_unique<CpuAttentionRunner>(bucketed);
  };
  device.processors = std::to_string(device.options.device.processors) + " threads";
  return device;
}

std::string format_seconds(double seconds) {
  char text[32];
  if (seconds < 1e-3)
    std::snprintf(text, sizeof(text), "%.1f us", seconds * 1e6);
  else if (seconds < 1.0)
    std::snprintf(text, sizeof(text), "%.2f ms", seconds * 1e3);
  else
    std::snprintf(text, sizeof(text), "%.2f s", seconds);
  return text;
}

int print_dry_run(const TuneOptions& o) {
  const ProblemSpec spec = problem_from_options(o);
  const OfflineDevice device = offline_device(o);
  const TunerOptions& options = device.options;
  const ConfigSpace* space = options.registry->find(spec.op, options.device.backend);
  if (space == nullptr) throw Error(Status::unsupported, "no config space for " + std::string(op_name(spec.op)));
  const DryRunReport report = dry_run(*space, spec, options.limits, options.settings);
  std::printf("problem: %s\n", report.key.text.c_str());
  std::printf("device:  %s, %s\n", options.device.name.c_str(), device.processors.c_str());
  std::printf("%zu valid configs, cheapest predicted first (* default, + timed when tuning with top-k %d%s):\n",
              report.ranking.valid.size(), o.top_k, o.thorough ? ", thorough" : "");
  int width = 14;  // CUDA config names are longer than CPU ones
  for (const auto& config : space->configs) width = std::max(width, static_cast<int>(config.id.size()));
  std::printf("  %-*s %12s %10s %8s %10s %10s\n", width, "config", "predicted", "tiles", "waves", "GFLOP", "MB");
  for (const auto& ranked : report.ranking.valid) {
    const std::string& id = ranked.config->id;
    const bool timed = std::find(report.would_time.begin(), report.would_time.end(), id) != report.would_time.end();
    std::printf("%c%c%-*s %12s %10" PRId64 " %8" PRId64 " %10.3f %10.2f\n", id == report.default_id ? '*' : ' ',
                timed ? '+' : ' ', width, id.c_str(), format_seconds(ranked.cost.seconds).c_str(), ranked.cost.tiles,
                ranked.cost.waves, ranked.cost.flops * 1e-9, ranked.cost.bytes * 1e-6);
  }
  if (o.all) {
    std::printf("%zu configs cannot run it:\n", report.ranking.rejected.size());
    for (const auto& rejected : report.ranking.rejected) {
      std::printf("  %-*s %s\n", width, rejected.config->id.c_str(), rejected.reason.c_str());
    }
  } else if (!report.ranking.rejected.empty()) {
    std::printf("(%zu configs cannot run it; --all lists them with the reason)\n", report.ranking.rejected.size());
  }
  return 0;
}

int optimize(const TuneOptions& o) {
  const std::vector<ProblemSpec> problems = read_problem_list(o.optimize_file);
  const OfflineDevice device = offline_device(o);
  const TunerOptions& options = device.options;
  if (options.settings.cache_dir.empty()) {
    throw UsageError("--dir: no cache folder (HOME and ATTNKIT_CACHE_DIR are unset); pass --dir DIR");
  }
  Tuner tuner(options);
  std::printf("tuning %zu problems on %s (%s) into %s\n", problems.size(), options.device.name.c_str(),
              device.processors.c_str(), options.settings.cache_dir.c_str());
  const auto summary = tune_problem_list(
      tuner, problems, device.make_runner,
      [](const TuneProgress& p) {
        std::printf("[%zu/%zu] %s -> %s (%s); %zu configs timed, %s elapsed, ~%s left\n", p.problems_done,
                    p.problems_total, p.last_problem.c_str(), p.last_winner.empty() ? "failed" : p.last_winner.c_str(),
                    std::string(source_name(p.last_source)).c_str(), p.configs_timed,
                    format_seconds(p.elapsed_seconds).c_str(), format_seconds(p.estimated_left_seconds).c_str());
        std::fflush(stdout);
      },
      o.force);
  for (const auto& error : summary.errors) std::fprintf(stderr, "attnkit: tune: %s\n", error.c_str());
  std::printf("done: %zu tuned, %zu already cached, %zu failed; %zu configs timed\n", summary.tuned, summary.cached,
              summary.failed, summary.configs_timed);
  return summary.failed == 0 ? 0 : 1;
}

}  // namespace

Command add_tune_command(CLI::App& parent) {
  auto o = std::make_shared<TuneOptions>();
  CLI::App* app = parent.add_subcommand("tune", "Tune offline: list a problem's configs or fill the tuning cache");
  auto* dry = app->add_flag("--dry-run", o->dry_run, "List the configs that can run OP's problem, with predicted cost");
  auto* opt = app->add_option("--optimize", o->optimize_file, "Tune every problem of a JSON-lines FILE into the cache")
                  ->check(CLI::ExistingFile);
  dry->excludes(opt);
  app->add_option("op", o->op, "With --dry-run: attention, na1d, na2d, na3d, block-sparse, element-sparse");
  const char* problem = "Problem (with --dry-run; as for 'attnkit run')";
  app->add_flag("--backward", o->backward, "The gradient's configs")->group(problem);
  app->add_option("--dtype", o->dtype, "f32 | f16 | bf16 | f64")->group(problem);
  app->add_option("--batch", o->batch, "Batch size B")->check(CLI::PositiveNumber)->group(problem);
  app->add_option("--heads", o->heads, "Query heads Hq")->check(CLI::PositiveNumber)->group(problem);
  app->add_option("--heads-kv", o->heads_kv, "Key/value heads (default Hq)")
      ->check(CLI::PositiveNumber)
      ->group(problem);
  app->add_option("--head-dim", o->head_dim, "Head dim D")->check(CLI::PositiveNumber)->group(problem);
  app->add_option("--head-dim-v", o->head_dim_v, "Value head dim (default D)")
      ->check(CLI::PositiveNumber)
      ->group(problem);
  app->add_option("--tokens", o->tokens, "Query token extents, e.g. 4096 or 64x64")->group(problem);
  app->add_option("--tokens-kv", o->tokens_kv, "Key/value token extents (default --tokens)")->group(problem);
  app->add_option("--kernel-size", o->kernel_size, "Neighborhood window per dim, e.g. 7x7")->group(problem);
  app->add_option("--dilation", o->dilation, "Neighborhood dilation per dim")->group(problem);
  app->add_option("--stride", o->stride, "Neighborhood stride per dim")->group(problem);
  app->add_option("--causal", o->causal, "attention: causal (flag); na: causal per dim, e.g. 0x1")
      ->expected(0, 1)
      ->group(problem);
  app->add_option("--causal-align", o->causal_align, "top-left | bottom-right")->group(problem);
  app->add_option("--block-size", o->block_size, "Block mask block sizes, e.g. 64x64")->group(problem);
  app->add_option("--density", o->density, "Sparse mask density")->check(CLI::Range(0.0, 1.0))->group(problem);
  const char* tuning = "Tuning";
  app->add_option("--backend", o->backend, "Backend to tune: cpu, or cuda (device 0) in a CUDA build")->group(tuning);
  app->add_option("--threads", o->threads, "CPU threads of the device key (0 = all)")->group(tuning);
  app->add_flag("--all", o->all, "With --dry-run: also list the configs that cannot run, with the reason")
      ->group(tuning);
  app->add_option("--dir", o->dir, "Cache folder (default $ATTNKIT_CACHE_DIR or ~/.cache/attnkit)")->group(tuning);
  app->add_flag("--force", o->force, "Re-tune problems that already have a cached winner")->group(tuning);
  app->add_flag("--thorough", o->thorough, "Time every valid config, not only the top-k predicted")->group(tuning);
  app->add_option("--top-k", o->top_k, "Configs timed per problem (cheapest predicted)")
      ->check(CLI::PositiveNumber)
      ->group(tuning);
  app->add_option("--margin", o->margin,
                  "A non-default config must beat the default by more than this fraction (and the noise)")
      ->check(CLI::Range(0.0, 1.0))
      ->group(tuning);
  app->add_option("--warmup", o->warmup, "Untimed warm-up rounds (every candidate once each)")
      ->check(CLI::NonNegativeNumber)
      ->group(tuning);
  app->add_option("--steps", o->steps, "Most timed rounds (every candidate once each)")
      ->check(CLI::PositiveNumber)
      ->group(tuning);
  const CLI::Option* causal = app->get_option("--causal");
  return Command{app, [o, causal]() -> int {
                   o->causal_given = causal->count() > 0;
                   if (o->dry_run) {
                     if (o->op.empty()) throw UsageError("tune --dry-run: OP missing; allowed: attention, na1d, ...");
                     return print_dry_run(*o);
                   }
                   if (!o->optimize_file.empty()) return optimize(*o);
                   throw UsageError("tune: give --dry-run OP or --optimize FILE (see 'attnkit tune --help')");
                 }};
}

}  // namespace attnkit::cli
