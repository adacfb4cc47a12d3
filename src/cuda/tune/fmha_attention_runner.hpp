// A tune::Runner that times the portable fused-attention forward or backward on a GPU (DESIGN §5
// speed method, §6.4), the way every CUDA tuning runner does (gpu_run_timer.hpp): inputs of the problem
// in several buffer sets used in turn (cold-L2 timings), each run bracketed by CUDA events on the
// runner's own held stream and synchronised, so the time is the kernels' (with the tile-list
// preprocessing of sparse masks, and the backward's preprocess and dQ kernels, which every call pays too).
//
// Every config, the default included, runs in the same conditions: the same buffer sets (picked by
// the tuner's run counter, which counts every candidate's runs, so no run finds its inputs in L2 from
// the run before), the same stream, the same workspace.
//
// Inputs are random (gpu_run_timer.hpp's pattern); block and element masks are
// random with the spec's density, unless the runner is given the call's own mask (`call_mask`): then
// every set reads that mask, since which tiles are full, partial or empty decides the sparse kernels'
// speed, and a synthetic mask of another pattern can rank the configs differently. The call's mask is
// only read, by the runner's stream, after the caller's stream was synchronised. The backward's out and lse come from
// running the registry's default forward kernel once per set. A config whose launch fails throws, which excludes it.
// The runner never runs while a caller's stream is capturing: the dispatch checks before building it.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"
#include "cuda/fmha/fmha_configs.hpp"
#include "cuda/tune/gpu_run_timer.hpp"
#include "tune/runner.hpp"

namespace attnkit::cuda::fmha {

class FmhaAttentionRunner : public tune::Runner {
 public:
  // spec.op: attention_forward or attention_backward, in f16 or bf16. `l2_bytes` sizes the rotation.
  // `call_mask`: the calling problem's mask (block and element masks are then read from it, not made
  // up); it must stay valid while the runner lives.
  FmhaAttentionRunner(const tune::ProblemSpec& spec, int device, int64_t l2_bytes, uint64_t seed = 1,
                      const AttentionMask* call_mask = nullptr);
  ~FmhaAttentionRunner() override;
  FmhaAttentionRunner(const FmhaAttentionRunner&) = delete;
  FmhaAttentionRunner& operator=(const FmhaAttentionRunner&) = delete;

  double measure_seconds(const tune::Config& config, int iteration) override;
  int buffer_sets() const { return static_cast<int>(sets_.size()); }

 private:
  struct BufferSet {
    void* memory = nullptr;  // one allocation holding every tensor of the set
    AttentionForward forward;
    AttentionBackward backward;
  };

  void build(int64_t l2_bytes, uint64_t seed);
  cudaStream_t stream() const { return timer_->stream(); }
  void compute_forward_outputs();
  // The forward launch of `config` on buffer set `set`, with the device's SM count (as a plan's).
  FmhaLaunch forward_launch(const BufferSet& set, const FmhaConfig& config) const;
  void reserve_workspace(int64_t bytes);
  void release() noexcept;

  tune::ProblemSpec spec_;
  std::optional<AttentionMask> call_mask_;
  int device_ = 0;
  std::unique_ptr<GpuRunTimer> timer_;
  std::vector<BufferSet> sets_;
  detail::AttentionShape shape_;
  void* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;
  std::vector<std::vector<int64_t>> extents_;  // of every tensor, kept alive for the views
};

// gpu_run_timer.hpp's, under the name the tools and tests know.
using cuda::device_l2_bytes;

}  // namespace attnkit::cuda::fmha
