// The measured stats of element masks (element_mask_measure.hpp), cached per mask view so that the same
// mask tensor coming again costs a look-up, not a measurement: keyed by the view (data pointer, device,
// extents, strides) and the tile shape the tiles were counted for, in a small least-recently-used cache.
//
// Only the choice of path depends on the stats, never a result: a mask whose contents change in place
// (same pointer, same shape) keeps the choice made from its first contents. While the stream captures a
// CUDA graph nothing is measured (a read-back would break the capture): a cached entry answers, else none.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "attnkit/tensor.hpp"
#include "core/element_mask_path.hpp"

namespace attnkit::cuda::mask_path {

inline constexpr int kElementMaskStatsCapacity = 64;

// The cached stats of `mask` for this tile shape, measuring them first unless `capturing` (then nullopt
// on a miss). `mask` is a validated element mask on the current device.
std::optional<detail::ElementMaskStats> element_mask_stats(const TensorView& mask, int64_t seq_q, int64_t seq_k,
                                                           int block_m, int block_n, cudaStream_t stream,
                                                           bool capturing);

// Tests: how many measurements (read-backs) ran in this process, and forgetting every cached entry.
int64_t element_mask_measurements();
void clear_element_mask_stats();

}  // namespace attnkit::cuda::mask_path
