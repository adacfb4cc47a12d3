// What every CUDA tuning runner (fmha_attention_runner.hpp, gemm_tuning_runner.hpp,
// retention_tuning_runner.hpp) shares, so that each op's configs are timed the same way (DESIGN §5 speed
// method, §6.4):
//  - inputs: random values in [-1, 1] from a 1 M-element pattern tiled over each tensor (generating every
//    element on the host would take longer than the tuning it serves), in several copies ("buffer sets")
//    used in turn, enough that one pass over them exceeds twice the L2 cache, so that no run finds its
//    inputs in L2 from the run before (the tuner's run counter picks the set);
//  - the clock: each run is bracketed by CUDA events on the runner's own stream and synchronised. The
//    stream is held by a host function until the start event, the launches and the stop event are all
//    queued, so the start event fires right before the kernels and the time is the GPU's, as for
//    back-to-back calls, not this thread's launch latency (which an idle GPU would otherwise add to every
//    run, more for configs whose launch does more host work). The hold gives up after kMaxHoldSeconds,
//    so nothing can wait on it forever.
#pragma once
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "attnkit/dtype.hpp"

namespace attnkit::cuda {

// The L2 size of `device` (cudaDevAttrL2CacheSize), e.g. 50 MB on an H100.
int64_t device_l2_bytes(int device);

inline constexpr int kMaxTuningBufferSets = 64;

// Buffer sets of `set_bytes` each that make one pass over them exceed twice `l2_bytes`: at least two,
// at most kMaxTuningBufferSets.
int tuning_buffer_sets(int64_t set_bytes, int64_t l2_bytes);

// `bytes` rounded up to a multiple of 256: a buffer set lays its tensors out at offsets of such sizes, so that every
// tensor starts as aligned as a kernel's vector loads and TMA need.
inline int64_t tuning_tensor_bytes(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// The random pattern on the device, uploaded once; fill() tiles it over device memory on a stream.
class RandomPattern {
 public:
  RandomPattern(DType dtype, uint64_t seed);
  ~RandomPattern();
  RandomPattern(const RandomPattern&) = delete;
  RandomPattern& operator=(const RandomPattern&) = delete;

  // Fills `bytes` at `dst` with repeats of the pattern (asynchronously on `stream`).
  void fill(void* dst, int64_t bytes, cudaStream_t stream) const;

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// A stream and two events of `device`, and the timing of one run on them (see above).
class GpuRunTimer {
 public:
  explicit GpuRunTimer(int device);
  ~GpuRunTimer();
  GpuRunTimer(const GpuRunTimer&) = delete;
  GpuRunTimer& operator=(const GpuRunTimer&) = delete;

  cudaStream_t stream() const { return stream_; }
  // Queues `enqueue(stream())` between the two events with the stream held until everything is queued,
  // waits for the stop event and returns the elapsed seconds. Work that synchronises the stream (growing a
  // workspace) belongs before the call. A launch error throws, naming `what`.
  double time(const std::function<void(cudaStream_t)>& enqueue, const std::string& what);
  // Waits for everything queued on the stream (errors ignored: for destructors).
  void synchronize() noexcept;
  // Device scratch of at least `bytes` for the timed runs (one buffer, grown after synchronising the stream:
  // call it before time()); null for 0 bytes. Freed with the timer.
  void* workspace(int64_t bytes);
  int64_t workspace_bytes() const { return workspace_bytes_; }

 private:
  void release() noexcept;

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  void* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;
  std::atomic<bool> stream_released_{true};  // the host function holding stream_ returns once set
};

}  // namespace attnkit::cuda
