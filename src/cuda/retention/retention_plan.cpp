#include "cuda/retention/retention_plan.hpp"

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/error.hpp"
#include "core/tuned_config.hpp"
#include "core/zero_size.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/kernel_attributes.hpp"
#include "cuda/retention/retention_jobs.hpp"
#include "cuda/tune/retention_selection.hpp"

namespace attnkit::cuda::retention {
namespace {

int device_attribute(cudaDeviceAttr attribute, int device) {
  int value = 0;
  check_cuda(cudaDeviceGetAttribute(&value, attribute, device), "cudaDeviceGetAttribute");
  return value;
}

// Runs on SM80 and newer (mma.sync bf16, cp.async); returns the multiprocessor count.
int prepare_device(int device) {
  const int major = device_attribute(cudaDevAttrComputeCapabilityMajor, device);
  const int minor = device_attribute(cudaDevAttrComputeCapabilityMinor, device);
  if (major < 8) {
    throw Error(Status::unsupported, "device " + std::to_string(device) + ": compute capability " +
                                         std::to_string(major) + "." + std::to_string(minor) +
                                         " for the CUDA backend's retention; allowed: 8.0 or newer, or CPU tensors");
  }
  return device_attribute(cudaDevAttrMultiProcessorCount, device);
}

// The parallel backward's largest launches (Dv = 256 with a float32 decay matrix) need more shared memory per block
// than SM80 allows (163 KiB against SM90's 227 KiB): refused there, naming what fits.
void require_shared_memory(const JobShape& job, int device) {
  const int limit = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (job.kernel == nullptr || job.shared_bytes <= limit) return;
  throw Error(Status::unsupported,
              "retention backward on device " + std::to_string(device) + ": its " + job.kernel->family +
                  " kernel needs " + std::to_string(job.shared_bytes) +
                  " bytes of shared memory per block, the device allows " + std::to_string(limit) +
                  "; allowed: a smaller Dv, a decay matrix in the inputs' dtype (half the bytes of float32), or CPU "
                  "tensors");
}

void raise_shared_memory(const ChunkKernel* kernel, int shared_bytes = 0) {
  check_cuda(
      raise_dynamic_shared_memory_once(kernel->function, shared_bytes != 0 ? shared_bytes : kernel->shared_bytes),
      "cudaFuncSetAttribute(retention kernel)");
}

// One job: with segments, first every segment's own state into the workspace (one CTA a part of a segment:
// state_splits parts each), then the outputs.
void launch(const ChunkJob& job, float* segment_states, cudaStream_t stream) {
  if (job.kernel == nullptr || job.ctas == 0) return;
  if (job.params.segments > 1) {
    ChunkParams params = job.params;
    params.segment_states = segment_states;
    params.state_only = 1;
    job.kernel->launch(params, job.ctas * params.state_splits, stream);
    check_launch("retention_chunk_kernel (segment states)");
    params.state_only = 0;
    job.kernel->launch(params, job.ctas, stream);
  } else {
    job.kernel->launch(job.params, job.ctas, stream);
  }
  check_launch((std::string("retention kernel ") + job.kernel->family).c_str());
}

// Jobs of one instance in one grid (ChunkJobs), each job's segment states at its own offset in `segment_states`: with
// segments, first the segmented jobs' own states (one launch), then every job's outputs (one launch); jobs of equal CTA
// counts interleaved (ChunkJobs::interleaved: a head's jobs side by side). A job alone runs the one-job kernel.
void launch_together(const std::vector<const ChunkJob*>& jobs, float* segment_states, cudaStream_t stream) {
  if (jobs.size() == 1) {
    launch(*jobs.front(), segment_states, stream);
    return;
  }
  const ChunkKernel* kernel = jobs.front()->kernel;
  auto launch_of = [&](bool state_only) {
    ChunkJobs grid;
    int64_t ctas = 0;
    int64_t workspace_offset = 0;  // bytes
    for (const ChunkJob* job : jobs) {
      const bool segmented = job->params.segments > 1;
      if (!state_only || segmented) {
        ChunkParams& params = grid.jobs[grid.count];
        params = job->params;
        params.state_only = state_only ? 1 : 0;
        if (segmented) {
          params.segment_states = reinterpret_cast<float*>(reinterpret_cast<char*>(segment_states) + workspace_offset);
        }
        grid.first_cta[grid.count] = ctas;
        ctas += state_only ? job->ctas * params.state_splits : job->ctas;
        ++grid.count;
      }
      workspace_offset += job->workspace_bytes;
    }
    if (grid.count == 0) return;
    const int64_t per_job = grid.count > 1 ? grid.first_cta[1] : 0;  // equal counts: job j's CTAs from j x per_job
    bool equal = per_job > 0 && ctas == per_job * grid.count;
    for (int j = 2; j < grid.count; ++j) equal = equal && grid.first_cta[j] == j * per_job;
    grid.interleaved = equal ? 1 : 0;
    kernel->launch_jobs(grid, ctas, stream);
    check_launch(state_only ? "retention_chunk_kernel (joint segment states)" : "retention_chunk_kernel (joint)");
  };
  launch_of(true);
  launch_of(false);
}

// The backward's jobs in order, those that share an instance with the job before them in the same launches.
void launch_joint(const std::array<ChunkJob, 3>& jobs, float* segment_states, cudaStream_t stream) {
  std::vector<const ChunkJob*> group;
  float* group_states = segment_states;
  auto flush = [&] {
    if (!group.empty()) launch_together(group, group_states, stream);
    for (const ChunkJob* job : group) {
      group_states = reinterpret_cast<float*>(reinterpret_cast<char*>(group_states) + job->workspace_bytes);
    }
    group.clear();
  };
  for (const ChunkJob& job : jobs) {
    if (job.kernel == nullptr || job.ctas == 0) continue;
    if (!group.empty() && (group.front()->kernel != job.kernel || job.kernel->launch_jobs == nullptr ||
                           static_cast<int>(group.size()) == kMaxChunkJobs)) {
      flush();
    }
    if (job.kernel->launch_jobs == nullptr) {
      launch(job, group_states, stream);
      group_states = reinterpret_cast<float*>(reinterpret_cast<char*>(group_states) + job.workspace_bytes);
      continue;
    }
    group.push_back(&job);
  }
  flush();
}

// The segment states' memory (and the parallel backward's row terms): the caller's workspace, else
// stream-ordered memory freed after the launches on the same stream (no synchronisation; capturable in a
// CUDA graph).
class SegmentStates {
 public:
  SegmentStates(int64_t bytes, const RunOptions& options, cudaStream_t stream, const char* op) : stream_(stream) {
    if (bytes == 0) return;
    if (options.workspace != nullptr) {
      if (options.workspace_bytes < bytes) {
        throw Error(Status::invalid_argument, "options.workspace_bytes: " + std::to_string(options.workspace_bytes) +
                                                  " bytes for a " + op + " that needs " + std::to_string(bytes) +
                                                  "; allowed: at least that many bytes, or no workspace");
      }
      data_ = static_cast<float*>(options.workspace);
      return;
    }
    void* memory = nullptr;
    check_cuda(cudaMallocAsync(&memory, static_cast<size_t>(bytes), stream),
               "cudaMallocAsync (retention segment states)");
    data_ = static_cast<float*>(memory);
    owned_ = true;
  }
  ~SegmentStates() {
    if (owned_) cudaFreeAsync(data_, stream_);
  }
  SegmentStates(const SegmentStates&) = delete;
  SegmentStates& operator=(const SegmentStates&) = delete;
  float* data() const { return data_; }

 private:
  cudaStream_t stream_ = nullptr;
  float* data_ = nullptr;
  bool owned_ = false;
};

// The Hopper decay-matrix kernel's tile map: the workspace's first 16-byte aligned byte (its size counts 16 more).
unsigned char* tile_map_of(float* workspace) {
  const auto address = reinterpret_cast<std::uintptr_t>(workspace);
  return reinterpret_cast<unsigned char*>((address + 15) / 16 * 16);
}

std::string kernel_name(const JobShape& job) {
  return std::string(dtype_name(job.kernel->dtype)) + "_" + job.kernel->family + "_dk" +
         std::to_string(job.kernel->head_dim) + "_dv" + std::to_string(job.kernel->value_block) + "_seg" +
         std::to_string(job.segments);
}

// The per-head decay a run uses: the plan's, unless the call brings other values (same key, new gamma).
class Decay {
 public:
  Decay(std::vector<double> gamma, int64_t heads)
      : gamma_(std::move(gamma)), heads_(heads), log2_gamma_(log2_decay(gamma_, heads)) {}

  template <class Use>
  void with(const std::vector<double>& gamma, Use&& use) const {
    if (gamma == gamma_) {
      use(log2_gamma_);
    } else {
      use(log2_decay(gamma, heads_));
    }
  }

 private:
  std::vector<double> gamma_;
  int64_t heads_ = 0;
  std::vector<float> log2_gamma_;
};

class ForwardPlan final : public detail::OpPlan<RetentionForward> {
 public:
  ForwardPlan(const RetentionForward& problem, ForwardSelection selection, int device, tune::ChoiceSource source)
      : selection_(selection), device_(device), source_(source), decay_(problem.gamma, problem.q.extents[2]) {}

  int64_t workspace_bytes() const override { return selection_.workspace_bytes; }

  void run(const RetentionForward& problem, const RunOptions& options) const override {
    const DeviceGuard guard(device_);
    const auto stream = static_cast<cudaStream_t>(options.stream);
    const SegmentStates states(selection_.workspace_bytes, options, stream, "retention forward");
    decay_.with(problem.gamma, [&](const std::vector<float>& log2_gamma) {
      ChunkJob job = fill_forward(problem, selection_, log2_gamma);
      if (is_wgmma_matrix_kernel(*job.kernel)) job.params.decay.tile_map = tile_map_of(states.data());
      launch(job, states.data(), stream);
    });
  }

  TunedConfig config() const override { return detail::tuned_config(kernel_name(selection_.job), source_); }

 private:
  ForwardSelection selection_;
  int device_ = 0;
  tune::ChoiceSource source_;
  Decay decay_;
};

class BackwardPlan final : public detail::OpPlan<RetentionBackward> {
 public:
  BackwardPlan(const RetentionBackward& problem, BackwardSelection selection, int device, tune::ChoiceSource source)
      : selection_(selection), device_(device), source_(source), decay_(problem.gamma, problem.q.extents[2]) {}

  int64_t workspace_bytes() const override { return selection_.workspace_bytes; }

  void run(const RetentionBackward& problem, const RunOptions& options) const override {
    const DeviceGuard guard(device_);
    const auto stream = static_cast<cudaStream_t>(options.stream);
    const SegmentStates states(selection_.workspace_bytes, options, stream, "retention backward");
    decay_.with(problem.gamma, [&](const std::vector<float>& log2_gamma) {
      if (selection_.parallel_form) {
        // The workspace holds the row terms: written by the first job, read by the others.
        for (const ChunkJob& job : fill_parallel_backward(problem, selection_, log2_gamma, states.data())) {
          launch(job, nullptr, stream);
        }
        return;
      }
      const std::array<ChunkJob, 3> jobs = fill_backward(problem, selection_, log2_gamma);
      if (selection_.joint) {
        launch_joint(jobs, states.data(), stream);
      } else {
        for (const ChunkJob& job : jobs) launch(job, states.data(), stream);
      }
    });
  }

  TunedConfig config() const override {
    return detail::tuned_config(kernel_name(selection_.dq) + "+" + kernel_name(selection_.dv), source_);
  }

 private:
  BackwardSelection selection_;
  int device_ = 0;
  tune::ChoiceSource source_;
  Decay decay_;
};

}  // namespace

std::unique_ptr<detail::OpPlan<RetentionForward>> plan_of_selection(const RetentionForward& problem,
                                                                    const ForwardSelection& selection, int device,
                                                                    tune::ChoiceSource source) {
  const DeviceGuard guard(device);
  ForwardSelection chosen = selection;
  // A grouped matrix-form CTA that needs more shared memory than the device allows (SM80 at Dk = 128) runs one
  // member per CTA instead.
  const ChunkKernel* kernel = chosen.job.kernel;
  if (kernel != nullptr && kernel->members > 1 &&
      kernel->shared_bytes > device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) {
    if (const ChunkKernel* single = find_normalized_kernel(kernel->dtype, kernel->head_dim, 1))
      chosen.job.kernel = single;
  }
  // The Hopper wgmma kernel where the choice asks for it (the rule does) and the device and the job allow it, else the
  // job's own.
  if (chosen.wgmma) {
    const int capability = compute_capability_of(device);
    if (const ChunkKernel* wgmma = wgmma_chunk_kernel_for(chosen.job.kernel, chosen.wgmma_wide_dv, capability)) {
      chosen.job.kernel = wgmma;
    }
    // A decay matrix: the Hopper decay-matrix kernel (CTAs of 128 value columns where Dk = 128 and Dv allows), the
    // normalised-form kernel kept for calls that do not allow its 16-byte copies.
    const int64_t dk = problem.q.extents[3], dv = problem.v.extents[3];
    const ChunkKernel* matrix =
        capability == 90 && detail::is_given(problem.decay) && dk <= 128
            ? find_wgmma_matrix_kernel(problem.q.dtype, static_cast<int>(dk), dk == 128 && dv % 128 == 0 ? 128 : 64)
            : nullptr;
    if (matrix != nullptr) {
      raise_shared_memory(chosen.job.kernel);
      chosen.matrix_fallback = chosen.job.kernel;
      chosen.job.kernel = matrix;
      // Its map of the nonzero tiles, 16-byte aligned in the workspace (tile_map_of).
      chosen.workspace_bytes =
          decay_map_bytes(problem.decay.extents[0], problem.q.extents[1], problem.k.extents[1]) + 16;
    }
  }
  raise_shared_memory(chosen.job.kernel);
  return std::make_unique<ForwardPlan>(problem, chosen, device, source);
}

std::unique_ptr<detail::OpPlan<RetentionBackward>> plan_of_selection(const RetentionBackward& problem,
                                                                     const BackwardSelection& selection, int device,
                                                                     tune::ChoiceSource source) {
  const DeviceGuard guard(device);
  BackwardSelection chosen = selection;
  // Grouped matrix-form kernels that need more shared memory than the device allows (SM80) run one member per CTA.
  if (chosen.parallel_form && chosen.dq.kernel != nullptr && chosen.dq.kernel->members > 1 &&
      chosen.dq.shared_bytes > device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) {
    one_member_parallel_backward(problem, chosen);
  }
  // The Hopper wgmma kernel for each chunkwise job where the choice asks for it (the rule does) and the device and
  // the job allow it. dQ and dK carry Dk value columns, dV Dv.
  if (chosen.wgmma && !chosen.parallel_form) {
    const int capability = compute_capability_of(device);
    const int64_t dk = problem.q.extents[3], dv = problem.v.extents[3];
    for (auto [job, value_dim] : {std::pair{&chosen.dq, dk}, std::pair{&chosen.dk, dk}, std::pair{&chosen.dv, dv}}) {
      const ChunkKernel* wgmma = wgmma_chunk_kernel_for(job->kernel, chosen.wgmma_wide ? value_dim : 0, capability);
      if (wgmma != nullptr) {
        job->kernel = wgmma;
        job->shared_bytes = 0;
      }
    }
  }
  for (const JobShape* job : {&chosen.dq, &chosen.dk, &chosen.dv}) require_shared_memory(*job, device);
  for (const JobShape* job : {&chosen.dq, &chosen.dk, &chosen.dv}) {
    raise_shared_memory(job->kernel, job->shared_bytes);
    if (chosen.joint && job->kernel != nullptr && job->kernel->jobs_function != nullptr) {
      check_cuda(
          raise_dynamic_shared_memory_once(job->kernel->jobs_function,
                                           job->shared_bytes != 0 ? job->shared_bytes : job->kernel->shared_bytes),
          "cudaFuncSetAttribute(retention joint kernel)");
    }
  }
  return std::make_unique<BackwardPlan>(problem, chosen, device, source);
}

int multiprocessors_of(int device) { return prepare_device(device); }

int compute_capability_of(int device) {
  return 10 * device_attribute(cudaDevAttrComputeCapabilityMajor, device) +
         device_attribute(cudaDevAttrComputeCapabilityMinor, device);
}

double dram_bytes_per_step_of(int device) {
  // A device that does not answer leaves the rule its wave model (0), not an error.
  auto attribute = [device](cudaDeviceAttr which) {
    int value = 0;
    if (cudaDeviceGetAttribute(&value, which, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0.0;
    }
    return static_cast<double>(value);
  };
  return dram_bytes_per_step(attribute(cudaDevAttrMemoryClockRate), attribute(cudaDevAttrGlobalMemoryBusWidth),
                             attribute(cudaDevAttrClockRate));
}

detail::MadePlan<RetentionForward> make_forward_plan(const RetentionForward& problem, const RunOptions& options) {
  const int device = problem.q.device.index;
  const DeviceGuard guard(device);
  const int multiprocessors = prepare_device(device);
  const TunedSelection<ForwardSelection> tuned = tuned_forward_selection(problem, options, device, multiprocessors);
  detail::MadePlan<RetentionForward> made;
  made.plan = plan_of_selection(problem, tuned.selection, device, tuned.source);
  made.reusable = !tuned.provisional;
  return made;
}

detail::MadePlan<RetentionBackward> make_backward_plan(const RetentionBackward& problem, const RunOptions& options) {
  const int device = problem.q.device.index;
  const DeviceGuard guard(device);
  const int multiprocessors = prepare_device(device);
  const TunedSelection<BackwardSelection> tuned = tuned_backward_selection(problem, options, device, multiprocessors);
  detail::MadePlan<RetentionBackward> made;
  made.plan = plan_of_selection(problem, tuned.selection, device, tuned.source);
  made.reusable = !tuned.provisional;
  return made;
}

}  // namespace attnkit::cuda::retention
