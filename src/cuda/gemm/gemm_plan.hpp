// The CUDA backend's gemm plan (core/gemm_plan.hpp): the problem in canonical form (gemm_shape.hpp),
// the kernel selected for it on the device and that kernel's runner, made once. The selection asks the
// device's tuner (src/cuda/tune/gemm_selection.hpp: a cached or tuned winner, else the registry's rule of
// gemm_registry.hpp; ATTNKIT_GEMM_CONFIG keeps priority). The plan's config name is the kernel's (simt_*,
// or a row id of cmake/attnkit_gemm_kernels.cmake, "+staged" when operands are staged) and its source where
// the choice came from; a default taken only because the stream was capturing is not kept in the plan cache.
#pragma once
#include "attnkit/backend.hpp"
#include "attnkit/gemm.hpp"
#include "core/op_plan.hpp"

namespace attnkit::cuda::gemm {

detail::MadePlan<GemmProblem> make_gemm_plan(const GemmProblem& problem, const RunOptions& options);

}  // namespace attnkit::cuda::gemm
