// The CUDA backend's retention plans (core/op_plan.hpp): made once per call shape (capability checks,
// kernel choice, the opt-in shared memory raised once per device), then each run fills the kernel
// params from the call's tensors (retention_jobs.hpp) and launches on the caller's stream.
//
// Kernels (selected in retention_jobs.cpp): every form without normalisation runs through the chunkwise
// kernel (retention_chunk_kernel.cuh) -- parallel, chunkwise and recurrent retention are the same sums
// (DESIGN §3), so they agree to rounding; its chunk is 64 tokens whatever chunk_size says (chunk_size
// only sets how the CPU backend groups its sums). Forward calls of at most 16 tokens run the recurrent
// decode kernel; normalize=true and the explicit decay matrix run the parallel forward. The backward is
// three chunkwise jobs (retention_jobs.hpp), or for normalize=true and the decay matrix the parallel
// form's four launches (retention_parallel_backward_common.cuh).
#pragma once
#include "attnkit/retention.hpp"
#include "core/op_plan.hpp"

namespace attnkit::cuda::retention {

detail::MadePlan<RetentionForward> make_forward_plan(const RetentionForward& problem, const RunOptions& options);
detail::MadePlan<RetentionBackward> make_backward_plan(const RetentionBackward& problem, const RunOptions& options);

}  // namespace attnkit::cuda::retention
