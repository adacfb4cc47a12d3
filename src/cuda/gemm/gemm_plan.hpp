// The CUDA backend's gemm plan (core/gemm_plan.hpp): the problem in canonical form (gemm_shape.hpp),
// the kernel selected for it on the device (gemm_registry.hpp) and that kernel's runner, made once.
// The plan's config name is the kernel's (simt_*, or a row id of cmake/attnkit_gemm_kernels.cmake).
#pragma once
#include "attnkit/backend.hpp"
#include "attnkit/gemm.hpp"
#include "core/op_plan.hpp"

namespace attnkit::cuda::gemm {

detail::MadePlan<GemmProblem> make_gemm_plan(const GemmProblem& problem, const RunOptions& options);

}  // namespace attnkit::cuda::gemm
