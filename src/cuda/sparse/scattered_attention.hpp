// Host entry of the scattered-sparse attention path (CUDA): element masks whose true entries are few and
// scattered, so that tiles are almost never empty and tile skipping saves nothing. The mask is packed to
// bits once per call (per mask slice: [B|1, Hq|1] as the mask has them), and the kernels' work follows the
// true entries, not the S_q x S_k grid. Forward and backward; every dtype and head dim the dense CUDA path
// takes; GQA. Rows with no key: output 0, LSE -inf, zero gradients (DESIGN §3).
//
// The automatic choice between this path and the tile-list path (core/ and cuda/fmha) is made by the
// caller; these functions run the scattered path when asked and say when they cannot.
#pragma once
#include <cstdint>
#include <string>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::cuda::sparse {

// Empty when the scattered path runs `shape` with `mask` (kind element) on the current device;
// otherwise what it allows, as a sentence for an error message.
std::string scattered_forward_unsupported(const AttentionForward& problem, const detail::AttentionShape& shape);
std::string scattered_backward_unsupported(const AttentionBackward& problem, const detail::AttentionShape& shape);

// Device scratch a run needs (256-byte aligned sub-buffers included); depends only on the call shape.
int64_t scattered_forward_workspace_bytes(const AttentionForward& problem, const detail::AttentionShape& shape);
int64_t scattered_backward_workspace_bytes(const AttentionBackward& problem, const detail::AttentionShape& shape);

// Runs on `stream` (a cudaStream_t). `workspace` holds at least the bytes above, or is nullptr: then the
// call allocates stream-ordered (cudaMallocAsync / cudaFreeAsync), so it stays graph-capturable.
void run_scattered_forward(const AttentionForward& problem, const detail::AttentionShape& shape, void* workspace,
                           void* stream);
void run_scattered_backward(const AttentionBackward& problem, const detail::AttentionShape& shape, void* workspace,
                            void* stream);

// Tests: the shared memory per block the checks and launches above take the current device to have, at most
// `bytes` (0: the device's own), so that a GPU with more runs the launches of a GPU with less (SM80's 8-warp
// dK/dV kernel on an SM90) and shows their refusals. While a limit is set the device also counts as one before
// sm_90: the launches take the cp.async forms, as such a GPU would.
void set_scattered_shared_memory_limit(int bytes);

}  // namespace attnkit::cuda::sparse
