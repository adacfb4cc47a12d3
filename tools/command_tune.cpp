// `attnkit tune`: the tuner offline (DESIGN §6.8).
//   attnkit tune --dry-run OP [problem options] [--all]   lists the configs that can run the problem
//       (its bucket), cheapest predicted first, marking the default and the ones a tuning run times
//       (tune_dry_run.cpp);
//   attnkit tune --optimize FILE [--dir DIR] [--force]     tunes every problem of a JSON-lines file
//       (format: src/tune/problem_file.hpp, docs/tuner.md) into the cache, with progress on stderr
//       (tune_optimize.cpp).
// Backends: cpu, and cuda (device 0) in a build with CUDA. Problem options and their defaults match
// `attnkit run` (OP = attention | na1d | na2d | na3d | block-sparse | element-sparse, --backward for
// the gradient). --json prints one JSON document on stdout instead of text (fields in kJsonFields).
#include <memory>
#include <string>

#include "cli_errors.hpp"
#include "commands.hpp"
#include "python_spellings.hpp"
#include "tune_options.hpp"

namespace attnkit::cli {
namespace {

const char* const kJsonFields = R"(JSON output (--json): one document on stdout.
  --dry-run: problem (the bucket's key), problem_spec (the problem as a line of an --optimize file),
    device {backend, name, processors, compute_capability, cuda_runtime, cuda_driver, library_version,
    kernel_set_hash}, top_k, thorough, default (null when no config can run it),
    configs: [{config, default, timed, predicted_seconds, tiles, waves, flops, bytes}] cheapest first,
    rejected_count, and with --all rejected: [{config, reason}]
  --optimize: device {as above}, cache_dir, problems: [{problem, winner (null when it failed),
    source: tuned|cached|default|failed}] in the file's order, tuned, cached, failed, configs_timed,
    elapsed_seconds, errors (also printed on stderr)
Errors go to stderr (exit 2) and then nothing is printed on stdout; a problem that fails to tune exits 1.)";

const char* const kPythonSpellingsNote =
    "Python's spellings are accepted too: --causal-alignment (for --causal-align), --is-causal (--causal), "
    "--cache-dir (--dir), top_left/bottom_right, float32/float16/bfloat16/float64.";

void add_tune_problem_options(CLI::App* app, TuneOptions& o) {
  const char* problem = "Problem (with --dry-run; as for 'attnkit run', with its defaults)";
  app->add_flag("--backward", o.backward, "The gradient's configs")->group(problem);
  app->add_option("--dtype", o.dtype,
                  std::string("f32 | f16 | bf16 | f64 (default ") + kDefaultDType + ", as in Python)")
      ->group(problem);
  add_problem_options(app, o, problem);
}

void add_tuning_options(CLI::App* app, TuneOptions& o) {
  const char* tuning = "Tuning";
  app->add_option("--backend", o.backend, "Backend to tune: cpu, or cuda (device 0) in a CUDA build")->group(tuning);
  app->add_option("--threads", o.threads, "CPU threads of the device key (0 = all)")->group(tuning);
  app->add_flag("--all", o.all, "With --dry-run: also list the configs that cannot run, with the reason")
      ->group(tuning);
  app->add_option("--dir", o.dir, "Cache folder (default $ATTNKIT_CACHE_DIR or ~/.cache/attnkit)")->group(tuning);
  add_python_spelling(app, "--cache-dir", o.dir);
  app->add_flag("--force", o.force, "Re-tune problems that already have a cached winner")->group(tuning);
  app->add_flag("--thorough", o.thorough, "Time every valid config, not only the top-k predicted")->group(tuning);
  app->add_option("--top-k", o.top_k, "Configs timed per problem (cheapest predicted)")
      ->check(CLI::PositiveNumber)
      ->group(tuning);
  app->add_option("--margin", o.margin,
                  "A non-default config must beat the default by more than this fraction (and the noise)")
      ->check(CLI::Range(0.0, 1.0))
      ->group(tuning);
  app->add_option("--warmup", o.warmup, "Untimed warm-up rounds (every candidate once each)")
      ->check(CLI::NonNegativeNumber)
      ->group(tuning);
  app->add_option("--steps", o.steps, "Most timed rounds (every candidate once each)")
      ->check(CLI::PositiveNumber)
      ->group(tuning);
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
  app->add_flag("--json", o->json, "Print one JSON document on stdout instead of text (fields below)");
  app->add_flag("--quiet", o->quiet, "No progress lines on stderr (errors are still printed)");
  add_tune_problem_options(app, *o);
  add_tuning_options(app, *o);
  app->footer(std::string(kJsonFields) + "\n\n" + kPythonSpellingsNote);
  return Command{app, [app, o]() -> int {
                   note_causal_given(app, *o);
                   if (o->dry_run) {
                     if (o->op.empty()) throw UsageError("tune --dry-run: OP missing; allowed: attention, na1d, ...");
                     return print_dry_run(*o);
                   }
                   if (!o->optimize_file.empty()) return optimize(*o);
                   throw UsageError("tune: give --dry-run OP or --optimize FILE (see 'attnkit tune --help')");
                 }};
}

}  // namespace attnkit::cli
