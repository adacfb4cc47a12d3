// Which compiled forward kernel a CUDA attention plan runs (the tuner's choice among the registry
// entries that match the call's dtype, compiled head-dim width and mask policy and fit the device).
// Asked once per plan (core/op_plan.hpp), never per call:
//
//  1. ATTNKIT_FMHA_CONFIG=<config name> forces an entry (benchmarks, config sweeps; read when a plan is
//     made);
//  2. else the device's tuner (tune/process_tuners.hpp) answers for the call's problem key: a cached
//     winner, or the default, or — mode on, RunOptions::no_tuning unset, the call's stream not capturing
//     a CUDA graph — tunes now with an FmhaAttentionRunner on the call's own sizes, its own stream and
//     buffers, after waiting for the caller's stream so that its pending work does not share the GPU
//     with the timings. A default taken only because the stream was capturing is provisional: the plan
//     is not kept, and a later call outside the capture tunes.
//  Block and element masks live on the GPU, so their density is not read (a device-to-host copy):
//  their keys carry density 1 (see docs/tuner.md).
//  If the tuner cannot answer, the registry default is used, so tuning never breaks a call.
//  Device limits (capability, shared memory, SMs) and the tuner's device description are read once per
//  device and process.
#pragma once
#include <string>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"
#include "cuda/fmha/fmha_configs.hpp"
#include "cuda/tune/cuda_config_choice.hpp"
#include "cuda/tune/fmha_kernel_selection.hpp"
#include "tune/local_tuning.hpp"
#include "tune/process_tuners.hpp"

namespace attnkit::cuda::fmha {

using ForwardSelection = KernelSelection<FmhaKernel>;

ForwardSelection select_forward_kernel(const AttentionForward& problem, const detail::AttentionShape& shape,
                                       const RunOptions& options, int device, const FmhaDevice& limits);

// The kernel a forward call runs with (run_forward, attention_forward_config): the capability checks of
// the call and the device, then select_forward_kernel; throws Status::unsupported when nothing fits.
ForwardSelection forward_selection(const AttentionForward& problem, const detail::AttentionShape& shape,
                                   const RunOptions& options);

// What the validity of a kernel config depends on for `device`: its compute capability, its opt-in
// shared memory per block and its SM count (read once per device).
FmhaDevice fmha_device(int device);

// fmha_device(device), after throwing Status::unsupported unless it has compute capability 8.0 or newer
// (SM80 tensor cores, cp.async).
FmhaDevice require_sm80_device(int device);

// The device tuner's answer for an attention call of `op` (a cached winner, the default, or — mode on,
// options.no_tuning unset, stream not capturing — a tuning now on the call's sizes, after waiting for the
// caller's stream). Throws when the tuner cannot answer.
using AttentionConfigChoice = CudaConfigChoice;
AttentionConfigChoice choose_attention_config(tune::TuneOp op, DType dtype, const detail::AttentionShape& shape,
                                              const AttentionMask& mask, const RunOptions& options, int device);

// cudaStreamIsCapturing on `stream` (nullptr = the legacy default stream); a query that fails counts
// as capturing, since timing inside a capture would break it.
bool stream_is_capturing(void* stream);

// The key and limits of a CUDA device for its tuner: name, SMs, capability, runtime/driver, kernel-set
// hash; shared memory, threads and registers from the device attributes (read once per device).
tune::DeviceDescription describe_cuda_device(int device);

}  // namespace attnkit::cuda::fmha
