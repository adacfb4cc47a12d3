// The CUDA plans of element-mask attention (MaskKind::element): a plan that holds the tile-list plan
// (cuda/fmha, the tensor-core path) and the scattered-sparse path (cuda/sparse) and runs one of them per
// call, as mask.element_path says:
//   tiles      the tile-list plan only;
//   scattered  the scattered path only; Status::unsupported with its message where it cannot run;
//   automatic  per call, from the mask tensor's cached stats (element_mask_stats.hpp; measured on the
//              first call with that mask, a synchronising read-back) and the cost model
//              (core/element_mask_path.hpp). Tiles when the scattered path cannot run the call, and while
//              the stream captures a CUDA graph unless the mask's stats are already cached; the scattered
//              path when only it can run the call.
// The workspace covers whichever path a run may take. Results never depend on the path (both compute the
// masked attention exactly), only speed.
#pragma once
#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"
#include "core/op_plan.hpp"

namespace attnkit::cuda::mask_path {

detail::MadePlan<AttentionForward> make_element_mask_forward_plan(const AttentionForward& problem,
                                                                  const detail::AttentionShape& shape,
                                                                  const RunOptions& options);
detail::MadePlan<AttentionBackward> make_element_mask_backward_plan(const AttentionBackward& problem,
                                                                    const detail::AttentionShape& shape,
                                                                    const RunOptions& options);

// Tests: how many runs of the plans that choose per call (automatic with both paths, or scattered) took
// each path (tiles, scattered) in this process. A plan of the tiles path alone is fmha's own and not counted.
int64_t element_path_runs(ElementMaskPath path);

}  // namespace attnkit::cuda::mask_path
