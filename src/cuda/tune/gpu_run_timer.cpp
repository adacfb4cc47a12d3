#include "cuda/tune/gpu_run_timer.hpp"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "core/float_convert.hpp"
#include "cuda/common/cuda_check.hpp"

namespace attnkit::cuda {
namespace {

constexpr int64_t kPatternElements = int64_t{1} << 20;

// The longest a stream is held (see the header); far longer than queuing one run takes.
constexpr double kMaxHoldSeconds = 0.5;

void CUDART_CB hold_until_released(void* flag) {
  const auto* released = static_cast<const std::atomic<bool>*>(flag);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kMaxHoldSeconds);
  while (!released->load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
}

// Holds `stream` from construction (a host function that waits for `released`) until release() or
// destruction, so an exception between cannot leave the stream waiting.
class StreamHold {
 public:
  StreamHold(cudaStream_t stream, std::atomic<bool>& released) : released_(released) {
    released_.store(false, std::memory_order_release);
    const cudaError_t status = cudaLaunchHostFunc(stream, hold_until_released, &released_);
    if (status != cudaSuccess) released_.store(true, std::memory_order_release);
    check_cuda(status, "cudaLaunchHostFunc (hold the tuning stream)");
  }
  ~StreamHold() { release(); }
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;
  void release() { released_.store(true, std::memory_order_release); }

 private:
  std::atomic<bool>& released_;
};

}  // namespace

int64_t device_l2_bytes(int device) {
  int bytes = 0;
  check_cuda(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device), "cudaDeviceGetAttribute(L2)");
  return bytes;
}

int tuning_buffer_sets(int64_t set_bytes, int64_t l2_bytes) {
  const int64_t wanted = (2 * l2_bytes + set_bytes - 1) / std::max<int64_t>(set_bytes, 1);
  return static_cast<int>(std::clamp<int64_t>(wanted, 2, kMaxTuningBufferSets));
}

RandomPattern::RandomPattern(DType dtype, uint64_t seed) {
  const auto element = static_cast<int64_t>(dtype_size(dtype));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<unsigned char> pattern(static_cast<size_t>(kPatternElements * element));
  for (int64_t i = 0; i < kPatternElements; ++i) detail::store_from_double(pattern.data(), dtype, i, uniform(rng));
  check_cuda(cudaMalloc(&data_, pattern.size()), "cudaMalloc (tuning pattern)");
  bytes_ = static_cast<int64_t>(pattern.size());
  const cudaError_t status = cudaMemcpy(data_, pattern.data(), pattern.size(), cudaMemcpyHostToDevice);
  if (status != cudaSuccess) {
    cudaFree(data_);
    data_ = nullptr;
    check_cuda(status, "cudaMemcpy (tuning pattern)");
  }
}

RandomPattern::~RandomPattern() {
  if (data_ != nullptr) cudaFree(data_);
}

void RandomPattern::fill(void* dst, int64_t bytes, cudaStream_t stream) const {
  for (int64_t offset = 0; offset < bytes; offset += bytes_) {
    check_cuda(cudaMemcpyAsync(static_cast<char*>(dst) + offset, data_,
                               static_cast<size_t>(std::min(bytes_, bytes - offset)), cudaMemcpyDeviceToDevice, stream),
               "cudaMemcpyAsync (tuning inputs)");
  }
}

GpuRunTimer::GpuRunTimer(int device) : device_(device) {
  const DeviceGuard guard(device);
  try {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check_cuda(cudaEventCreate(&start_), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop_), "cudaEventCreate");
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
}

GpuRunTimer::~GpuRunTimer() { release(); }

void GpuRunTimer::synchronize() noexcept {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
}

void* GpuRunTimer::workspace(int64_t bytes) {
  if (bytes > workspace_bytes_) {
    synchronize();
    if (workspace_ != nullptr) cudaFree(workspace_);
    workspace_ = nullptr;
    workspace_bytes_ = 0;
    check_cuda(cudaMalloc(&workspace_, static_cast<size_t>(bytes)), "cudaMalloc (tuning workspace)");
    workspace_bytes_ = bytes;
  }
  return workspace_;
}

void GpuRunTimer::release() noexcept {
  int previous = 0;
  const bool switched =
      cudaGetDevice(&previous) == cudaSuccess && previous != device_ && cudaSetDevice(device_) == cudaSuccess;
  synchronize();
  if (workspace_ != nullptr) cudaFree(workspace_);
  workspace_ = nullptr;
  workspace_bytes_ = 0;
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (stop_ != nullptr) cudaEventDestroy(stop_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  start_ = stop_ = nullptr;
  stream_ = nullptr;
  if (switched) cudaSetDevice(previous);
}

double GpuRunTimer::time(const std::function<void(cudaStream_t)>& enqueue, const std::string& what) {
  StreamHold hold(stream_, stream_released_);
  check_cuda(cudaEventRecord(start_, stream_), "cudaEventRecord");
  enqueue(stream_);
  check_cuda(cudaGetLastError(), what.c_str());
  check_cuda(cudaEventRecord(stop_, stream_), "cudaEventRecord");
  hold.release();  // everything is queued: let the GPU run it back to back
  check_cuda(cudaEventSynchronize(stop_), "cudaEventSynchronize");
  float ms = 0.0f;
  check_cuda(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
  return static_cast<double>(ms) * 1e-3;
}

}  // namespace attnkit::cuda
