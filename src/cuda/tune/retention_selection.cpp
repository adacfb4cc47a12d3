#include "cuda/tune/retention_selection.hpp"

#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "core/log.hpp"
#include "cuda/retention/retention_plan.hpp"
#include "cuda/tune/cuda_config_choice.hpp"
#include "cuda/tune/gpu_run_timer.hpp"
#include "cuda/tune/retention_config_space.hpp"
#include "cuda/tune/retention_tuning_runner.hpp"

namespace attnkit::cuda::retention {
namespace {

template <class Selection, class Problem, class Select>
TunedSelection<Selection> tuned_selection(tune::TuneOp op, const Problem& problem, const RunOptions& options,
                                          int device, Select&& select) {
  TunedSelection<Selection> tuned;
  const std::optional<ChunkShapeChoice> forced = forced_chunk_shape();
  // No tokens: the jobs have nothing to split (and the tuner's problems need T >= 1).
  if (forced.has_value() || !runs_chunk_jobs(problem) || problem.q.extents[1] == 0) {
    tuned.selection = select(forced.value_or(ChunkShapeChoice{}));
    return tuned;
  }
  // The rule first: a call no kernel runs fails with its own message before the tuner is asked.
  const Selection rule = select(ChunkShapeChoice{});
  try {
    const tune::ProblemSpec exact = retention_spec_of(op, problem.q, problem.v);
    const CudaConfigChoice answer =
        choose_cuda_config(exact, options, device, [&exact, device]() -> std::unique_ptr<tune::Runner> {
          return std::make_unique<RetentionTuningRunner>(exact, device, device_l2_bytes(device));
        });
    tuned.source = answer.choice.source;
    tuned.provisional = answer.provisional;
    if (answer.is_default) {
      tuned.selection = rule;
      return tuned;
    }
    try {
      tuned.selection = select(chunk_shape_of(*answer.choice.config));
      return tuned;
    } catch (const std::exception& e) {
      detail::log_message(detail::LogLevel::info, "tuner: retention winner " + answer.choice.config->id +
                                                      " cannot shape this call (" + e.what() + "); using the rule");
      tuned.source = tune::ChoiceSource::default_config;
    }
  } catch (const std::exception& e) {
    detail::log_message(detail::LogLevel::warning, std::string("tuner: no CUDA retention config from the tuner (") +
                                                       e.what() + "); using the rule");
    tuned.source = tune::ChoiceSource::default_config;
    tuned.provisional = false;
  }
  tuned.selection = rule;
  return tuned;
}

}  // namespace

tune::ProblemSpec retention_spec_of(tune::TuneOp op, const TensorView& q, const TensorView& v) {
  return tune::retention_problem_spec(op, q.dtype, q.extents[0], q.extents[2], q.extents[1], q.extents[3],
                                      v.extents[3]);
}

TunedSelection<ForwardSelection> tuned_forward_selection(const RetentionForward& problem, const RunOptions& options,
                                                         int device, int multiprocessors) {
  return tuned_selection<ForwardSelection>(
      tune::TuneOp::retention_forward, problem, options, device,
      [&, capability = compute_capability_of(device),
       step_bytes = dram_bytes_per_step_of(device)](const ChunkShapeChoice& choice) {
        return select_forward(problem, multiprocessors, on_device(choice, capability, step_bytes));
      });
}

TunedSelection<BackwardSelection> tuned_backward_selection(const RetentionBackward& problem, const RunOptions& options,
                                                           int device, int multiprocessors) {
  return tuned_selection<BackwardSelection>(
      tune::TuneOp::retention_backward, problem, options, device,
      [&, capability = compute_capability_of(device),
       step_bytes = dram_bytes_per_step_of(device)](const ChunkShapeChoice& choice) {
        return select_backward(problem, multiprocessors, on_device(choice, capability, step_bytes));
      });
}

}  // namespace attnkit::cuda::retention
