// How a CUDA retention plan shapes its chunkwise jobs (asked once per plan, retention_plan.cpp), as
// gemm_selection.hpp does for the gemm:
//  1. normalize=true and the explicit decay matrix run the parallel form's kernels: nothing to choose, the
//     tuner is not asked;
//  2. ATTNKIT_RETENTION_CONFIG forces its choice (retention_jobs.hpp), the tuner is not asked;
//  3. else the device's tuner answers for the call's problem key (cuda_config_choice.hpp: a cached winner,
//     the default, or -- mode on, RunOptions::no_tuning unset, the stream not capturing -- a tuning now with
//     a RetentionTuningRunner on the call's sizes). A winner other than the key's default shapes the jobs
//     (retention_config_space.hpp's ChunkShapeChoice of the config);
//  4. the key's default, a winner that cannot shape the call, or a tuner that cannot answer (a warning):
//     the rule (ChunkShapeChoice{}) on the call's own sizes, which is what plans ran before the tuner
//     covered retention and what the tuner's default is for the key's representative.
#pragma once
#include "attnkit/retention.hpp"
#include "cuda/retention/retention_jobs.hpp"
#include "tune/local_tuning.hpp"

namespace attnkit::cuda::retention {

template <class Selection>
struct TunedSelection {
  Selection selection;
  tune::ChoiceSource source = tune::ChoiceSource::default_config;
  bool provisional = false;  // the default, taken only because the caller's stream was capturing
};

// Throw Status::unsupported as select_forward / select_backward do when no kernel runs the call.
TunedSelection<ForwardSelection> tuned_forward_selection(const RetentionForward& problem, const RunOptions& options,
                                                         int device, int multiprocessors);
TunedSelection<BackwardSelection> tuned_backward_selection(const RetentionBackward& problem, const RunOptions& options,
                                                           int device, int multiprocessors);

// The tuner's problem of a call (tune/problem_spec.hpp's retention_problem_spec of its q and v).
tune::ProblemSpec retention_spec_of(tune::TuneOp op, const TensorView& q, const TensorView& v);

}  // namespace attnkit::cuda::retention
