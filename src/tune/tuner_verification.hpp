// The GPU check of the tuner's targets (issue #5; run by bench/bench_tuner_gpu): for a fixed list of
// problems (forward: dense 4k/16k, D64/D128, causal or not; neighborhood 1-D/2-D/3-D; block masks at
// 10 % and 30 %; backward: dense causal, 2-D neighborhood, block 30 %) it times every valid config (exhaustive), tunes
// each problem from a cold tuner (memory only) timing the wall time of that first call, and reports per problem the
// exhaustive best, the tuned choice, their ratio, the tuning time and whether the cost model's top-K held the best,
// then the summary lines the targets need (>= 0.97x the best on >= 12 problems, tuning < 2 s, top-K holds the best in
// >= 80 % of problems). Only CUDA builds can run it; elsewhere it reports that and returns 2.
#pragma once
#include <ostream>

namespace attnkit::tune {

struct VerificationOptions {
  int device = 0;
  int exhaustive_steps = 30;  // timed runs per config when timing exhaustively (median)
  int top_k = 4;              // the tuner's setting during the check
  bool quick = false;         // half the problems, for a smoke run
};

// 0 when every target is met, 1 when one is missed, 2 when it cannot run (no CUDA, no GPU).
int run_tuner_verification(const VerificationOptions& options, std::ostream& out);

}  // namespace attnkit::tune
