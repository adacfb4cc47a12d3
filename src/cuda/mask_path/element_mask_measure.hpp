// The measuring pass behind the automatic element-mask path (core/element_mask_path.hpp): one read of a
// bool [B|1, Hq|1, Sq, Sk] mask on the GPU counting its true entries and, for a tile shape, its non-empty
// and full tiles over every mask slice, read back to the host. It synchronises the caller's stream (a
// device-to-host copy of three counters), so callers run it once per mask tensor and never while the
// stream captures a CUDA graph (element_mask_stats.hpp).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "attnkit/tensor.hpp"
#include "core/element_mask_path.hpp"

namespace attnkit::cuda::mask_path {

// `mask` is a validated element mask of a call with `seq_q` queries and `seq_k` keys, on the current device.
detail::ElementMaskStats measure_element_mask(const TensorView& mask, int64_t seq_q, int64_t seq_k, int block_m,
                                              int block_n, cudaStream_t stream);

}  // namespace attnkit::cuda::mask_path
