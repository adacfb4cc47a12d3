// Which compiled backward kernel a CUDA attention backward runs: the tuner's choice among the backward
// registry's entries (fmha_backward_kernels()) for the call's dtype, width and mask policy, as for the
// forward (fmha_forward_selection.hpp, whose rules apply: capture never tunes, the caller's stream is
// waited for before timing, density 1 in sparse keys); ATTNKIT_FMHA_BACKWARD_CONFIG=<name> forces an entry
// as ATTNKIT_FMHA_CONFIG does for the forward. The backward is timed by FmhaAttentionRunner (its out and
// lse from the default forward). A device runs one or two entries per (dtype, width, policy): the
// portable tier's, and on compute capability 9.0 the Hopper tier's; a problem with a single valid config
// is decided without timing (local_tuning.hpp).
#pragma once
#include <string>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"
#include "cuda/fmha/fmha_backward_configs.hpp"
#include "cuda/tune/fmha_kernel_selection.hpp"
#include "tune/local_tuning.hpp"

namespace attnkit::cuda::fmha {

// multiprocessors: of the call's device (the KV-parallel split choice).
using BackwardSelection = KernelSelection<FmhaBackwardKernel>;

BackwardSelection select_backward_kernel(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                         const RunOptions& options, int device, const FmhaDevice& limits);

// The kernel a backward call runs with (run_backward, attention_backward_config): the capability checks
// of the call and the device, then select_backward_kernel; throws Status::unsupported when nothing fits.
BackwardSelection backward_selection(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                     const RunOptions& options);

}  // namespace attnkit::cuda::fmha
