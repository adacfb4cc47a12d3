// The CUDA backend's retention plans (core/op_plan.hpp): made once per call shape (capability checks,
// kernel choice, the opt-in shared memory raised once per device), then each run fills the kernel
// params from the call's tensors (retention_jobs.hpp) and launches on the caller's stream. The chunkwise
// jobs' shapes come from the device's tuner (src/cuda/tune/retention_selection.hpp: a cached or tuned
// winner, else the rule of retention_jobs.hpp; ATTNKIT_RETENTION_CONFIG keeps priority); a default taken
// only because the stream was capturing is not kept in the plan cache.
//
// Kernels (selected in retention_jobs.cpp): every form without normalisation runs through the chunkwise
// kernel (retention_chunk_kernel.cuh) -- parallel, chunkwise and recurrent retention are the same sums
// (DESIGN §3), so they agree to rounding; its chunk is 64 tokens whatever chunk_size says (chunk_size
// only sets how the CPU backend groups its sums). Forward calls of at most 16 tokens run the recurrent
// decode kernel; normalize=true and the explicit decay matrix run the parallel forward. The backward is
// three chunkwise jobs (retention_jobs.hpp), or for normalize=true and the decay matrix the parallel
// form's four launches (retention_parallel_backward_common.cuh).
#pragma once
#include <memory>

#include "attnkit/retention.hpp"
#include "core/op_plan.hpp"
#include "cuda/retention/retention_jobs.hpp"
#include "tune/local_tuning.hpp"

namespace attnkit::cuda::retention {

detail::MadePlan<RetentionForward> make_forward_plan(const RetentionForward& problem, const RunOptions& options);
detail::MadePlan<RetentionBackward> make_backward_plan(const RetentionBackward& problem, const RunOptions& options);

// The plan of a given selection, its shared memory raised (the tuning runner, retention_tuning_runner.hpp,
// times each config through the plan a call with it would run). `source` is what config() reports.
std::unique_ptr<detail::OpPlan<RetentionForward>> plan_of_selection(const RetentionForward& problem,
                                                                    const ForwardSelection& selection, int device,
                                                                    tune::ChoiceSource source);
std::unique_ptr<detail::OpPlan<RetentionBackward>> plan_of_selection(const RetentionBackward& problem,
                                                                     const BackwardSelection& selection, int device,
                                                                     tune::ChoiceSource source);

// The multiprocessors of `device`, after throwing Status::unsupported unless it has compute capability 8.0 or
// newer (the retention kernels use mma.sync bf16 and cp.async).
int multiprocessors_of(int device);
// 10 * major + minor of `device`'s compute capability.
int compute_capability_of(int device);
// What `device`'s DRAM moves in one chunk step of a D64 wgmma CTA (retention_jobs.hpp's dram_bytes_per_step, from its
// memory clock, bus width and SM clock); 0 where the device does not say.
double dram_bytes_per_step_of(int device);

}  // namespace attnkit::cuda::retention
