// run_tuner_verification on a CUDA device (see tune/tuner_verification.hpp). Every problem is timed
// on one FmhaAttentionRunner (the same buffers and rotation for every config), so the exhaustive
// table and the tuner's choice compare like with like; the tuner itself starts cold (no cache
// folder, nothing in memory) and builds its own runner, as a call would, so its tuning time counts
// the input setup too.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "cuda/tune/fmha_attention_runner.hpp"
#include "cuda/tune/fmha_config_space.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"
#include "tune/candidate_ranking.hpp"
#include "tune/lazy_runner.hpp"
#include "tune/tuner_verification.hpp"

namespace attnkit::tune {
namespace {

using cuda::fmha::FmhaAttentionRunner;

struct NamedProblem {
  std::string name;
  ProblemSpec spec;
};

ProblemSpec base(int64_t batch, int64_t heads, int64_t head_dim) {
  ProblemSpec s;
  s.op = TuneOp::attention_forward;
  s.dtype = DType::bf16;
  s.batch = batch;
  s.heads_q = s.heads_kv = heads;
  s.head_dim = s.head_dim_v = head_dim;
  return s;
}

ProblemSpec flat(int64_t batch, int64_t heads, int64_t head_dim, int64_t tokens, MaskKind mask) {
  ProblemSpec s = base(batch, heads, head_dim);
  s.token_dims = 1;
  s.tokens = s.tokens_kv = {tokens, 1, 1};
  s.mask = mask;
  return s;
}

ProblemSpec neighborhood(int64_t batch, int64_t heads, std::vector<int64_t> tokens, std::vector<int64_t> kernel,
                         std::vector<int64_t> dilation = {}) {
  ProblemSpec s = base(batch, heads, 128);
  s.token_dims = static_cast<int32_t>(tokens.size());
  for (size_t d = 0; d < tokens.size(); ++d) {
    s.tokens[d] = s.tokens_kv[d] = tokens[d];
    s.neighborhood[d].kernel_size = kernel[d];
    s.neighborhood[d].dilation = dilation.empty() ? 1 : dilation[d];
  }
  s.mask = MaskKind::neighborhood;
  return s;
}

ProblemSpec block_sparse(double density) {
  ProblemSpec s = flat(1, 16, 128, 16384, MaskKind::block);
  s.block_q = s.block_k = 128;
  s.density = density;
  return s;
}

ProblemSpec backward(ProblemSpec spec) {
  spec.op = TuneOp::attention_backward;
  return spec;
}

std::vector<NamedProblem> problems(bool quick) {
  std::vector<NamedProblem> list = {
      {"dense S4k D64", flat(4, 16, 64, 4096, MaskKind::none)},
      {"dense S4k D64 causal", flat(4, 16, 64, 4096, MaskKind::causal)},
      {"dense S4k D128", flat(4, 16, 128, 4096, MaskKind::none)},
      {"dense S4k D128 causal", flat(4, 16, 128, 4096, MaskKind::causal)},
      {"dense S16k D64", flat(1, 16, 64, 16384, MaskKind::none)},
      {"dense S16k D64 causal", flat(1, 16, 64, 16384, MaskKind::causal)},
      {"dense S16k D128", flat(1, 16, 128, 16384, MaskKind::none)},
      {"dense S16k D128 causal", flat(1, 16, 128, 16384, MaskKind::causal)},
      {"na1d S16k k255 D128", neighborhood(2, 8, {16384}, {255})},
      {"na2d 96x96 k13 D128", neighborhood(4, 8, {96, 96}, {13, 13})},
      {"na2d 128x128 k15 dil2 D128", neighborhood(2, 8, {128, 128}, {15, 15}, {2, 2})},
      {"na3d 16x32x32 k7 D128", neighborhood(2, 8, {16, 32, 32}, {7, 7, 7})},
      {"block 10% S16k D128", block_sparse(0.1)},
      {"block 30% S16k D128", block_sparse(0.3)},
      {"bwd dense S4k D128 causal", backward(flat(4, 16, 128, 4096, MaskKind::causal))},
      {"bwd na2d 96x96 k13 D128", backward(neighborhood(4, 8, {96, 96}, {13, 13}))},
      {"bwd block 30% S16k D128", backward(block_sparse(0.3))},
  };
  if (quick) {
    std::vector<NamedProblem> half;
    for (size_t i = 0; i < list.size(); i += 2) half.push_back(list[i]);
    return half;
  }
  return list;
}

// Useful forward FLOPs are not needed here: ratios of times are what the targets compare.
struct Row {
  std::string name;
  size_t configs = 0;
  std::string best, tuned;
  double best_us = 0, tuned_us = 0, ratio = 0, tuning_s = 0;
  bool top_k_holds_best = false;
  std::string error;
};

}  // namespace

int run_tuner_verification(const VerificationOptions& options, std::ostream& out) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices <= options.device) {
    cudaGetLastError();
    out << "tuner verification: no CUDA device " << options.device << "\n";
    return 2;
  }
  cudaSetDevice(options.device);
  const DeviceDescription device = cuda::fmha::describe_cuda_device(options.device);
  const ConfigSpace* forward_space = builtin_config_spaces().find(TuneOp::attention_forward, Backend::cuda);
  const ConfigSpace* backward_space = builtin_config_spaces().find(TuneOp::attention_backward, Backend::cuda);
  if (forward_space == nullptr) {
    out << "tuner verification: no CUDA forward config space in this build\n";
    return 2;
  }
  const int64_t l2 = cuda::fmha::device_l2_bytes(options.device);
  out << "device: " << device.first.name << " (" << device.first.processors << " SMs, L2 " << l2 / (1 << 20)
      << " MiB), kernel set " << device.first.kernel_set_hash << ", " << forward_space->configs.size()
      << " forward and " << (backward_space != nullptr ? backward_space->configs.size() : 0) << " backward configs\n";

  MeasurementPolicy exhaustive;
  exhaustive.warmup_steps = 5;
  exhaustive.min_steps = options.exhaustive_steps;
  exhaustive.max_steps = options.exhaustive_steps;
  exhaustive.spread_threshold = 0.0;

  std::vector<Row> rows;
  const auto total_start = std::chrono::steady_clock::now();
  for (const NamedProblem& problem : problems(options.quick)) {
    Row row;
    row.name = problem.name;
    try {
      const ConfigSpace* space = is_backward(problem.spec.op) ? backward_space : forward_space;
      if (space == nullptr) throw Error(Status::unsupported, "no config space for this op");
      const ProblemKey key = make_problem_key(problem.spec);
      const CandidateRanking ranking = rank_candidates(*space, key.spec, device.second);
      row.configs = ranking.valid.size();
      if (ranking.valid.empty()) throw Error(Status::unsupported, "no valid config");

      // The tuner, cold: a fresh Tuner (memory only) and its own lazily built runner.
      TunerOptions tuner_options;
      tuner_options.device = device.first;
      tuner_options.limits = device.second;
      tuner_options.settings.mode = TuneMode::on;
      tuner_options.settings.top_k = options.top_k;
      tuner_options.settings.cache_dir = "";
      Tuner tuner(tuner_options);
      const int index = options.device;
      LazyRunner lazy([&key, index, l2] { return std::make_unique<FmhaAttentionRunner>(key.spec, index, l2); });
      const auto tune_start = std::chrono::steady_clock::now();
      const TuneChoice choice = tuner.choose(key, &lazy, false);
      row.tuning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - tune_start).count();
      row.tuned = choice.config->id;

      // Exhaustive, on one runner.
      FmhaAttentionRunner runner(key.spec, options.device, l2, 7);
      double best = 0;
      for (const RankedConfig& ranked : ranking.valid) {
        const ConfigTiming timing = measure_config(runner, *ranked.config, exhaustive);
        if (!timing.ok) continue;
        if (row.best.empty() || timing.median_seconds < best) {
          best = timing.median_seconds;
          row.best = ranked.config->id;
        }
        if (ranked.config->id == row.tuned) row.tuned_us = timing.median_seconds * 1e6;
      }
      row.best_us = best * 1e6;
      row.ratio = row.tuned_us > 0 ? row.best_us / row.tuned_us : 0.0;
      for (size_t i = 0; i < ranking.valid.size() && i < static_cast<size_t>(options.top_k); ++i) {
        row.top_k_holds_best = row.top_k_holds_best || ranking.valid[i].config->id == row.best;
      }
    } catch (const std::exception& e) {
      row.error = e.what();
    }
    rows.push_back(row);
    out << std::left << std::setw(28) << row.name;
    if (!row.error.empty()) {
      out << " error: " << row.error << "\n";
      continue;
    }
    char line[512];
    std::snprintf(line, sizeof line,
                  " configs %2zu  best %-30s %9.1f us  tuned %-30s %9.1f us  ratio %.3f  tuning %.2f s  top-%d %s\n",
                  row.configs, row.best.c_str(), row.best_us, row.tuned.c_str(), row.tuned_us, row.ratio, row.tuning_s,
                  options.top_k, row.top_k_holds_best ? "holds best" : "MISSES best");
    out << line << std::flush;
  }

  size_t ok = 0, at_ratio = 0, fast_tuning = 0, top_k_hits = 0, multi = 0, multi_top_k_hits = 0;
  double worst_ratio = 1.0, slowest = 0.0;
  for (const Row& row : rows) {
    if (!row.error.empty()) continue;
    ++ok;
    at_ratio += row.ratio >= 0.97;
    fast_tuning += row.tuning_s < 2.0;
    top_k_hits += row.top_k_holds_best;
    if (row.configs > 1) {
      ++multi;
      multi_top_k_hits += row.top_k_holds_best;
    }
    worst_ratio = std::min(worst_ratio, row.ratio);
    slowest = std::max(slowest, row.tuning_s);
  }
  const double top_k_rate = ok > 0 ? 100.0 * static_cast<double>(top_k_hits) / static_cast<double>(ok) : 0.0;
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - total_start).count();
  char summary[1024];
  std::snprintf(summary, sizeof summary,
                "summary: %zu problems measured (%zu failed), %zu with more than one valid config\n"
                "target tuned >= 0.97x exhaustive best: %zu/%zu problems (worst ratio %.3f) -> %s (need >= 12)\n"
                "target tuning a new problem < 2 s: %zu/%zu (slowest %.2f s) -> %s\n"
                "target top-%d holds the best in >= 80%%: %.0f%% (%zu/%zu; %zu/%zu among multi-config problems) -> %s\n"
                "total time %.1f s\n",
                ok, rows.size() - ok, multi, at_ratio, ok, worst_ratio, at_ratio >= 12 ? "MET" : "MISSED", fast_tuning,
                ok, slowest, fast_tuning == ok && ok > 0 ? "MET" : "MISSED", options.top_k, top_k_rate, top_k_hits, ok,
                multi_top_k_hits, multi, top_k_rate >= 80.0 ? "MET" : "MISSED", total_s);
  out << summary;
  const bool met = at_ratio >= 12 && fast_tuning == ok && ok > 0 && top_k_rate >= 80.0;
  return met ? 0 : 1;
}

}  // namespace attnkit::tune
