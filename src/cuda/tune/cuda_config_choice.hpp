// The CUDA device tuner's answer for one call, the same procedure for every op (attention forward and
// backward, gemm, retention forward and backward): the call's problem key (its spec bucketed), a cached
// winner, or the default, or -- mode on, RunOptions::no_tuning unset, the call's stream not capturing a
// CUDA graph -- a tuning now with a runner built on the call's own sizes, after waiting for the caller's
// stream so that its pending work does not share the GPU with the timings. A default taken only because
// the stream was capturing is provisional: the plan holding it is not kept, and a later call outside the
// capture tunes. Throws when the tuner cannot answer (the op has no space, no config can run the problem).
#pragma once
#include <functional>
#include <memory>

#include "attnkit/backend.hpp"
#include "tune/runner.hpp"
#include "tune/tuner.hpp"

namespace attnkit::cuda {

struct CudaConfigChoice {
  tune::TuneChoice choice;
  bool provisional = false;  // the default only because the stream was capturing while tuning is on
  // The config is the key's default (Tuner::default_choice), whatever the source: not tuned, or tuned and
  // nothing beat it. Ops whose registry rule depends on sizes that the key buckets (gemm, retention) then
  // run their rule on the call's own sizes.
  bool is_default = false;
};

// `exact`: the call's problem (not bucketed: a choice must hold on the problem that asked for it).
// `make_runner` is called only when something is timed, after the caller's stream was synchronised.
using TuningRunnerMaker = std::function<std::unique_ptr<tune::Runner>()>;
CudaConfigChoice choose_cuda_config(const tune::ProblemSpec& exact, const RunOptions& options, int device,
                                    const TuningRunnerMaker& make_runner);

}  // namespace attnkit::cuda
