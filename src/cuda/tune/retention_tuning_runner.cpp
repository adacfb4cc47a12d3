#include "cuda/tune/retention_tuning_runner.hpp"

#include <cuda_runtime_api.h>

#include <array>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/retention/retention_jobs.hpp"
#include "cuda/retention/retention_plan.hpp"
#include "cuda/tune/retention_config_space.hpp"

namespace attnkit::cuda::retention {
namespace {

// Tensors of a set, in layout order; the backward's only after kOut.
enum Slot : size_t { kQ, kK, kV, kOut, kGradOut, kGradQ, kGradK, kGradV, kSlots };

}  // namespace

RetentionTuningRunner::RetentionTuningRunner(const tune::ProblemSpec& spec, int device, int64_t l2_bytes, uint64_t seed)
    : spec_(spec), device_(device) {
  const bool op_ok = spec.op == tune::TuneOp::retention_forward || spec.op == tune::TuneOp::retention_backward;
  if (!op_ok || (spec.dtype != DType::f16 && spec.dtype != DType::bf16)) {
    throw Error(Status::unsupported, "CUDA retention tuning runner: " + std::string(tune::op_name(spec.op)) + " " +
                                         std::string(dtype_name(spec.dtype)) +
                                         "; allowed: retention_fwd or retention_bwd in float16 or bfloat16");
  }
  tune::validate_problem_spec(spec);
  try {
    build(l2_bytes, seed);
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
}

void RetentionTuningRunner::build(int64_t l2_bytes, uint64_t seed) {
  const tune::ProblemSpec& s = spec_;
  const bool backward = s.op == tune::TuneOp::retention_backward;
  const DeviceGuard guard(device_);
  multiprocessors_ = multiprocessors_of(device_);
  capability_ = compute_capability_of(device_);
  dram_bytes_per_step_ = dram_bytes_per_step_of(device_);
  timer_ = std::make_unique<GpuRunTimer>(device_);
  const int64_t tokens = s.tokens[0];
  const std::array<int64_t, 4> key_extents{s.batch, tokens, s.heads_q, s.head_dim};
  const std::array<int64_t, 4> value_extents{s.batch, tokens, s.heads_q, s.head_dim_v};
  std::array<const std::array<int64_t, 4>*, kSlots> extents{};
  extents[kQ] = extents[kK] = extents[kGradQ] = extents[kGradK] = &key_extents;
  extents[kV] = extents[kOut] = extents[kGradOut] = extents[kGradV] = &value_extents;
  const auto element = static_cast<int64_t>(dtype_size(s.dtype));
  std::array<int64_t, kSlots> offsets{};
  int64_t set_bytes = 0;
  for (size_t i = 0; i < kSlots; ++i) {
    if (backward ? i == kOut : i > kOut) continue;  // the backward reads dO, not out
    offsets[i] = set_bytes;
    const auto& e = *extents[i];
    set_bytes += tuning_tensor_bytes(e[0] * e[1] * e[2] * e[3] * element);
  }
  const RandomPattern pattern(s.dtype, seed);
  sets_.resize(static_cast<size_t>(tuning_buffer_sets(set_bytes, l2_bytes)));
  for (BufferSet& set : sets_) {
    check_cuda(cudaMalloc(&set.memory, static_cast<size_t>(set_bytes)), "cudaMalloc (retention tuning tensors)");
    pattern.fill(set.memory, set_bytes, timer_->stream());
    auto* base = static_cast<char*>(set.memory);
    auto view = [&](size_t i) {
      return make_view(base + offsets[i], s.dtype, 4, extents[i]->data(), Device{DeviceType::cuda, device_});
    };
    if (backward) {
      RetentionBackward& b = set.backward;
      b.q = view(kQ);
      b.k = view(kK);
      b.v = view(kV);
      b.grad_out = view(kGradOut);
      b.grad_q = view(kGradQ);
      b.grad_k = view(kGradK);
      b.grad_v = view(kGradV);
    } else {
      RetentionForward& f = set.forward;
      f.q = view(kQ);
      f.k = view(kK);
      f.v = view(kV);
      f.out = view(kOut);
    }
  }
  // The pattern is freed on return: the copies from it must be done.
  check_cuda(cudaStreamSynchronize(timer_->stream()), "cudaStreamSynchronize (retention tuning tensors)");
}

RetentionTuningRunner::~RetentionTuningRunner() { release(); }

void RetentionTuningRunner::release() noexcept {
  int previous = 0;
  const bool switched =
      cudaGetDevice(&previous) == cudaSuccess && previous != device_ && cudaSetDevice(device_) == cudaSuccess;
  if (timer_ != nullptr) timer_->synchronize();
  plans_.clear();
  for (BufferSet& set : sets_) {
    if (set.memory != nullptr) cudaFree(set.memory);
  }
  sets_.clear();
  timer_.reset();
  if (switched) cudaSetDevice(previous);
}

const RetentionTuningRunner::ConfigPlans& RetentionTuningRunner::plans_for(const tune::Config& config) {
  const auto known = plans_.find(config.id);
  if (known != plans_.end()) return known->second;
  const ChunkShapeChoice choice = on_device(chunk_shape_of(config), capability_, dram_bytes_per_step_);
  ConfigPlans plans;
  // A shape that cannot run the problem throws here (Status::unsupported), which excludes the config.
  if (spec_.op == tune::TuneOp::retention_backward) {
    const RetentionBackward& problem = sets_.front().backward;
    plans.backward = plan_of_selection(problem, select_backward(problem, multiprocessors_, choice), device_,
                                       tune::ChoiceSource::tuned);
  } else {
    const RetentionForward& problem = sets_.front().forward;
    plans.forward = plan_of_selection(problem, select_forward(problem, multiprocessors_, choice), device_,
                                      tune::ChoiceSource::tuned);
  }
  return plans_.emplace(config.id, std::move(plans)).first->second;
}

double RetentionTuningRunner::measure_seconds(const tune::Config& config, int iteration) {
  const DeviceGuard guard(device_);
  const ConfigPlans& plans = plans_for(config);
  const int64_t needed = plans.forward ? plans.forward->workspace_bytes() : plans.backward->workspace_bytes();
  void* workspace = timer_->workspace(needed);  // may synchronise: before the timed run
  // `iteration` counts every run of the measurement, whichever config: consecutive runs use consecutive sets.
  const BufferSet& set = sets_[static_cast<size_t>(iteration) % sets_.size()];
  return timer_->time(
      [&](cudaStream_t stream) {
        RunOptions options;
        options.backend = Backend::cuda;
        options.stream = stream;
        options.workspace = workspace;
        options.workspace_bytes = timer_->workspace_bytes();
        if (plans.forward) {
          plans.forward->run(set.forward, options);
        } else {
          plans.backward->run(set.backward, options);
        }
      },
      config.id);
}

}  // namespace attnkit::cuda::retention
