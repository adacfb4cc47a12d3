#include "cuda/tune/gemm_tuning_runner.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/gemm/gemm_registry.hpp"
#include "cuda/gemm/gemm_staging.hpp"
#include "cuda/tune/gemm_config_space.hpp"

namespace attnkit::cuda::gemm {
namespace {

// Elements of one matrix of `outer` rows of `leading` elements, times the batch.
int64_t matrix_elements(int64_t outer, int64_t leading, int64_t batch) {
  return std::max<int64_t>(outer, 1) * std::max<int64_t>(leading, 1) * std::max<int64_t>(batch, 1);
}

}  // namespace

GemmTuningRunner::GemmTuningRunner(const tune::ProblemSpec& spec, int device, int64_t l2_bytes, uint64_t seed)
    : spec_(spec), device_(device) {
  if (spec.op != tune::TuneOp::gemm ||
      (spec.dtype != DType::f16 && spec.dtype != DType::bf16 && spec.dtype != DType::f32)) {
    throw Error(Status::unsupported, "CUDA gemm tuning runner: " + std::string(tune::op_name(spec.op)) + " " +
                                         std::string(dtype_name(spec.dtype)) +
                                         "; allowed: gemm in float16, bfloat16 or float32");
  }
  tune::validate_problem_spec(spec);
  shape_ = gemm_tuning_shape(spec);
  allow_tf32_ = gemm_spec_allows_tf32(spec);
  try {
    build(l2_bytes, seed);
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
}

void GemmTuningRunner::build(int64_t l2_bytes, uint64_t seed) {
  const DeviceGuard guard(device_);
  timer_ = std::make_unique<GpuRunTimer>(device_);
  const auto element = static_cast<int64_t>(dtype_size(spec_.dtype));
  const GemmShape& s = shape_;
  const int64_t a_bytes =
      element * matrix_elements(s.a_k_major() ? s.m : s.k, s.a_k_major() ? s.a_row : s.a_col, s.batch);
  const int64_t b_bytes =
      element * matrix_elements(s.b_k_major() ? s.n : s.k, s.b_k_major() ? s.b_col : s.b_row, s.batch);
  const int64_t c_bytes = element * matrix_elements(s.m, s.c_row, s.batch);
  b_offset_ = tuning_tensor_bytes(a_bytes);
  c_offset_ = b_offset_ + tuning_tensor_bytes(b_bytes);
  const int64_t set_bytes = c_offset_ + tuning_tensor_bytes(c_bytes);
  const RandomPattern pattern(spec_.dtype, seed);
  sets_.assign(static_cast<size_t>(tuning_buffer_sets(set_bytes, l2_bytes)), nullptr);
  for (void*& set : sets_) {
    check_cuda(cudaMalloc(&set, static_cast<size_t>(set_bytes)), "cudaMalloc (gemm tuning operands)");
    pattern.fill(set, set_bytes, timer_->stream());
  }
  // The pattern is freed on return: the copies from it must be done.
  check_cuda(cudaStreamSynchronize(timer_->stream()), "cudaStreamSynchronize (gemm tuning operands)");
}

GemmTuningRunner::~GemmTuningRunner() { release(); }

void GemmTuningRunner::release() noexcept {
  int previous = 0;
  const bool switched =
      cudaGetDevice(&previous) == cudaSuccess && previous != device_ && cudaSetDevice(device_) == cudaSuccess;
  if (timer_ != nullptr) timer_->synchronize();
  runners_.clear();
  for (void* set : sets_) {
    if (set != nullptr) cudaFree(set);
  }
  sets_.clear();
  timer_.reset();
  if (switched) cudaSetDevice(previous);
}

const GemmRunner& GemmTuningRunner::runner_for(const tune::Config& config) {
  const auto known = runners_.find(config.id);
  if (known != runners_.end()) return *known->second;
  const GemmKernel* kernel = gemm_kernel_of(config);
  if (kernel == nullptr) {
    throw Error(Status::internal, "CUDA gemm tuning runner: config " + config.id + " has no registry entry");
  }
  GemmShape bound = shape_;
  bound.a = sets_.front();
  bound.b = static_cast<char*>(sets_.front()) + b_offset_;
  bound.c = static_cast<char*>(sets_.front()) + c_offset_;
  const GemmDevice& device = gemm_device(device_);
  GemmStaging staging;
  const std::string why = gemm_config_refusal(*kernel, bound, device, allow_tf32_, &staging);
  if (!why.empty()) {
    throw Error(Status::unsupported, "CUDA gemm tuning runner: " + config.id + " cannot run the problem: " + why);
  }
  std::unique_ptr<GemmRunner> runner =
      kernel->make_runner(staging.any() ? staged_shape(bound, staging) : bound, device);
  runner = make_staged_runner(bound, staging, std::move(runner), device);
  return *runners_.emplace(config.id, std::move(runner)).first->second;
}

double GemmTuningRunner::measure_seconds(const tune::Config& config, int iteration) {
  const DeviceGuard guard(device_);
  // The driver calls of the Hopper rows (TMA descriptors) need the primary context current, which a thread
  // that never used the runtime lacks; cudaSetDevice makes it current (as the gemm plan does).
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const GemmRunner& runner = runner_for(config);
  void* workspace = timer_->workspace(runner.workspace_bytes());  // may synchronise: before the timed run
  // `iteration` counts every run of the measurement, whichever config: consecutive runs use consecutive sets.
  char* base = static_cast<char*>(sets_[static_cast<size_t>(iteration) % sets_.size()]);
  GemmShape shape = shape_;
  shape.a = base;
  shape.b = base + b_offset_;
  shape.c = base + c_offset_;
  return timer_->time([&](cudaStream_t stream) { runner.run(shape, 1.0f, 0.0f, workspace, stream); }, config.id);
}

}  // namespace attnkit::cuda::gemm
