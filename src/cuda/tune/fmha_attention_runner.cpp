#include "cuda/tune/fmha_attention_runner.hpp"

#include <algorithm>
#include <optional>
#include <random>

#include "attnkit/error.hpp"
#include "core/float_convert.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/fmha/fmha_arguments.hpp"
#include "cuda/fmha/fmha_backward_arguments.hpp"
#include "cuda/tune/fmha_config_space.hpp"
#include "cuda/tune/fmha_forward_selection.hpp"

namespace attnkit::cuda::fmha {
namespace {

// Tensors of a set, in layout order.
enum Slot : size_t { kQ, kK, kV, kOut, kLse, kGradOut, kGradQ, kGradK, kGradV, kMask, kSlots };

int64_t product(const std::vector<int64_t>& extents) {
  int64_t n = 1;
  for (const int64_t e : extents) n *= e;
  return n;
}

std::vector<int64_t> tensor_extents(const tune::ProblemSpec& s, const std::array<int64_t, kMaxTokenDims>& tokens,
                                    int64_t heads, int64_t last) {
  std::vector<int64_t> extents{s.batch};
  for (int d = 0; d < s.token_dims; ++d) extents.push_back(tokens[static_cast<size_t>(d)]);
  extents.push_back(heads);
  if (last > 0) extents.push_back(last);
  return extents;
}

}  // namespace

FmhaAttentionRunner::FmhaAttentionRunner(const tune::ProblemSpec& spec, int device, int64_t l2_bytes, uint64_t seed,
                                         const AttentionMask* call_mask)
    : spec_(spec), device_(device) {
  if (call_mask != nullptr && call_mask->kind == spec.mask) call_mask_ = *call_mask;
  const bool op_ok = spec.op == tune::TuneOp::attention_forward || spec.op == tune::TuneOp::attention_backward;
  if (!op_ok || (spec.dtype != DType::f16 && spec.dtype != DType::bf16)) {
    throw Error(Status::unsupported, "CUDA tuning runner: " + std::string(tune::op_name(spec.op)) + " " +
                                         std::string(dtype_name(spec.dtype)) +
                                         "; allowed: attention_fwd or attention_bwd in float16 or bfloat16");
  }
  tune::validate_problem_spec(spec);
  try {
    build(l2_bytes, seed);
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
}

void FmhaAttentionRunner::build(int64_t l2_bytes, uint64_t seed) {
  const tune::ProblemSpec& spec = spec_;
  const bool backward = spec.op == tune::TuneOp::attention_backward;
  const DeviceGuard guard(device_);
  timer_ = std::make_unique<GpuRunTimer>(device_);
  const cudaStream_t stream = timer_->stream();

  const int64_t element = static_cast<int64_t>(dtype_size(spec.dtype));
  const bool block = spec.mask == MaskKind::block;
  const bool sparse = block || spec.mask == MaskKind::element;
  const bool synthetic_mask = sparse && !call_mask_.has_value();
  const int64_t mask_rows = block ? (spec.seq_q() + spec.block_q - 1) / spec.block_q : spec.seq_q();
  const int64_t mask_cols = block ? (spec.seq_k() + spec.block_k - 1) / spec.block_k : spec.seq_k();
  extents_.assign(kSlots, {});
  extents_[kQ] = extents_[kGradQ] = tensor_extents(spec, spec.tokens, spec.heads_q, spec.head_dim);
  extents_[kK] = extents_[kGradK] = tensor_extents(spec, spec.tokens_kv, spec.heads_kv, spec.head_dim);
  extents_[kV] = extents_[kGradV] = tensor_extents(spec, spec.tokens_kv, spec.heads_kv, spec.head_dim_v);
  extents_[kOut] = extents_[kGradOut] = tensor_extents(spec, spec.tokens, spec.heads_q, spec.head_dim_v);
  extents_[kLse] = tensor_extents(spec, spec.tokens, spec.heads_q, 0);
  extents_[kMask] = {1, 1, mask_rows, mask_cols};
  std::vector<int64_t> offsets(kSlots, 0);
  int64_t set_bytes = 0;
  for (size_t i = 0; i < kSlots; ++i) {
    const bool used = (i < kGradOut || backward) && (i != kMask || synthetic_mask);
    if (!used) continue;
    offsets[i] = set_bytes;
    const int64_t size = i == kLse ? 4 : i == kMask ? 1 : element;
    set_bytes += tuning_tensor_bytes(product(extents_[i]) * size);
  }
  const int count = tuning_buffer_sets(set_bytes, l2_bytes);

  // The random inputs (in [-1, 1]) and the mask, on the host once.
  const RandomPattern pattern(spec.dtype, seed);
  std::mt19937_64 rng(seed + 1);
  std::vector<unsigned char> mask_host;
  if (synthetic_mask) {
    std::bernoulli_distribution attend(spec.density);
    mask_host.resize(static_cast<size_t>(mask_rows * mask_cols));
    for (auto& m : mask_host) m = attend(rng) ? 1 : 0;
  }

  sets_.resize(static_cast<size_t>(count));
  for (BufferSet& set : sets_) {
    check_cuda(cudaMalloc(&set.memory, static_cast<size_t>(set_bytes)), "cudaMalloc (tuning inputs)");
    auto* base = static_cast<char*>(set.memory);
    auto view = [&](size_t i, DType dtype) {
      return make_view(base + offsets[i], dtype, static_cast<int32_t>(extents_[i].size()), extents_[i].data(),
                       Device{DeviceType::cuda, device_});
    };
    AttentionForward& f = set.forward;
    f.q = view(kQ, spec.dtype);
    f.k = view(kK, spec.dtype);
    f.v = view(kV, spec.dtype);
    f.out = view(kOut, spec.dtype);
    f.lse = view(kLse, DType::f32);
    const size_t random_slots = backward ? kGradOut + 1 : kV + 1;
    for (size_t i = 0; i < random_slots; ++i) {
      if (i == kOut || i == kLse) continue;  // written by the forward
      pattern.fill(base + offsets[i], product(extents_[i]) * element, stream);
    }
    f.mask.kind = spec.mask;
    f.mask.causal_alignment = spec.causal_alignment;
    if (spec.mask == MaskKind::neighborhood) {
      f.mask.dims = spec.token_dims;
      f.mask.neighborhood = spec.neighborhood;
      // The call's own bias table (read only): its shape follows the heads and kernel sizes of the spec.
      if (call_mask_.has_value()) f.mask.rpb = call_mask_->rpb;
    }
    if (sparse) {
      TensorView mask;
      if (synthetic_mask) {
        mask = view(kMask, DType::boolean);
        check_cuda(cudaMemcpyAsync(mask.data, mask_host.data(), mask_host.size(), cudaMemcpyHostToDevice, stream),
                   "cudaMemcpyAsync (tuning mask)");
      } else {
        mask = block ? call_mask_->block_mask : call_mask_->element_mask;
      }
      if (block) {
        f.mask.block_mask = mask;
        f.mask.block_q = spec.block_q;
        f.mask.block_k = spec.block_k;
      } else {
        f.mask.element_mask = mask;
      }
    }
    if (backward) {
      AttentionBackward& b = set.backward;
      b.q = f.q;
      b.k = f.k;
      b.v = f.v;
      b.out = f.out;
      b.lse = f.lse;
      b.mask = f.mask;
      b.grad_out = view(kGradOut, spec.dtype);
      b.grad_q = view(kGradQ, spec.dtype);
      b.grad_k = view(kGradK, spec.dtype);
      b.grad_v = view(kGradV, spec.dtype);
    }
  }
  shape_ = detail::describe_attention(sets_[0].forward.q, sets_[0].forward.k, sets_[0].forward.v, std::nullopt);
  if (backward) {
    check_backward_supported(sets_[0].backward, shape_);
    compute_forward_outputs();
  } else {
    check_forward_supported(sets_[0].forward, shape_);
  }
  // The pattern is freed on return: the copies from it must be done.
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (tuning inputs)");
}

FmhaLaunch FmhaAttentionRunner::forward_launch(const BufferSet& set, const FmhaConfig& config) const {
  FmhaLaunch launch = make_forward_launch(set.forward, shape_, config);
  launch.multiprocessors = fmha_device(device_).multiprocessors;
  return launch;
}

void FmhaAttentionRunner::compute_forward_outputs() {
  const FmhaKernel* kernel = fmha_default_kernel(spec_.dtype, spec_.head_dim, spec_.head_dim_v,
                                                 fmha_policy_for(spec_.mask), fmha_device(device_));
  for (BufferSet& set : sets_) {
    if (kernel == nullptr) {
      // No forward for this width: zeros for out and lse (only the timing matters here).
      check_cuda(cudaMemsetAsync(set.forward.out.data, 0,
                                 static_cast<size_t>(set.forward.out.numel()) * dtype_size(spec_.dtype), stream()),
                 "cudaMemsetAsync");
      check_cuda(cudaMemsetAsync(set.forward.lse.data, 0, static_cast<size_t>(set.forward.lse.numel()) * 4, stream()),
                 "cudaMemsetAsync");
      continue;
    }
    const FmhaLaunch launch = forward_launch(set, kernel->config);
    reserve_workspace(kernel->workspace_bytes(launch));
    kernel->launch(launch, FmhaWorkspace{workspace_, workspace_bytes_}, stream());
    check_cuda(cudaGetLastError(), "forward kernel (tuning inputs)");
  }
}

void FmhaAttentionRunner::reserve_workspace(int64_t bytes) {
  if (bytes <= workspace_bytes_) return;
  check_cuda(cudaStreamSynchronize(stream()), "cudaStreamSynchronize (tuning workspace)");
  if (workspace_ != nullptr) cudaFree(workspace_);
  workspace_ = nullptr;
  workspace_bytes_ = 0;
  check_cuda(cudaMalloc(&workspace_, static_cast<size_t>(bytes)), "cudaMalloc (tuning workspace)");
  workspace_bytes_ = bytes;
}

FmhaAttentionRunner::~FmhaAttentionRunner() { release(); }

void FmhaAttentionRunner::release() noexcept {
  int previous = 0;
  const bool switched =
      cudaGetDevice(&previous) == cudaSuccess && previous != device_ && cudaSetDevice(device_) == cudaSuccess;
  if (timer_ != nullptr) timer_->synchronize();
  for (BufferSet& set : sets_) {
    if (set.memory != nullptr) cudaFree(set.memory);
  }
  sets_.clear();
  if (workspace_ != nullptr) cudaFree(workspace_);
  workspace_ = nullptr;
  timer_.reset();
  if (switched) cudaSetDevice(previous);
}

double FmhaAttentionRunner::measure_seconds(const tune::Config& config, int iteration) {
  const DeviceGuard guard(device_);
  // `iteration` counts every run of the measurement, whichever config: consecutive runs use
  // consecutive sets, so each run's inputs were last touched sets_.size() runs ago.
  const BufferSet& set = sets_[static_cast<size_t>(iteration) % sets_.size()];
  // Workspace growth synchronises the stream: it happens before the timed run.
  if (spec_.op == tune::TuneOp::attention_backward) {
    const FmhaBackwardKernel* kernel = backward_kernel_of(config);
    if (kernel == nullptr)
      throw Error(Status::internal, "CUDA tuning runner: config " + config.id + " has no backward kernel entry");
    const FmhaBackwardLaunch launch =
        make_backward_launch(set.backward, shape_, kernel->config, fmha_device(device_).multiprocessors);
    reserve_workspace(kernel->workspace_bytes(launch));
    return timer_->time(
        [&](cudaStream_t stream) {
          kernel->launch(launch, FmhaBackwardWorkspace{workspace_, workspace_bytes_}, stream);
        },
        config.id);
  }
  const FmhaKernel* kernel = forward_kernel_of(config);
  if (kernel == nullptr)
    throw Error(Status::internal, "CUDA tuning runner: config " + config.id + " has no forward kernel entry");
  const FmhaLaunch launch = forward_launch(set, kernel->config);
  reserve_workspace(kernel->workspace_bytes(launch));
  return timer_->time(
      [&](cudaStream_t stream) {
        kernel->launch(launch, FmhaWorkspace{workspace_, workspace_bytes_}, stream);
      },
      config.id);
}

}  // namespace attnkit::cuda::fmha
