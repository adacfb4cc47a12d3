#include "core/attention_plan.hpp"

#include "core/attention_shape.hpp"
#include "core/validate.hpp"
#include "core/zero_size.hpp"
#include "cpu/cpu_backend.hpp"
#include "cuda/cuda_backend.hpp"

namespace attnkit::detail {
namespace {

void add_mask(PlanKey& key, const AttentionMask& mask) {
  key.add(static_cast<int64_t>(mask.kind));
  key.add(static_cast<int64_t>(mask.causal_alignment));
  key.add(static_cast<int64_t>(mask.dims));
  if (mask.kind == MaskKind::neighborhood) {
    for (const NeighborhoodDim& dim : mask.neighborhood) {
      key.add(dim.kernel_size);
      key.add(dim.dilation);
      key.add(dim.stride);
      key.add(int64_t{dim.causal});
    }
  }
  key.add(mask.block_q);
  key.add(mask.block_k);
  key.add(mask.block_mask);
  key.add(mask.element_mask);
  key.add(static_cast<int64_t>(mask.element_path));
  key.add(mask.rpb);
}

PlanCache<AttentionForwardPlan>& forward_plans() {
  static PlanCache<AttentionForwardPlan> cache;
  return cache;
}

PlanCache<AttentionBackwardPlan>& backward_plans() {
  static PlanCache<AttentionBackwardPlan> cache;
  return cache;
}

TunedConfig reported(TunedConfig config, bool made_now) {
  if (!made_now && config.source == "tuned") config.source = "cache";
  return config;
}

void validate(const AttentionForward& problem, const RunOptions& options) {
  validate_attention_forward(problem, options);
}
void validate(const AttentionBackward& problem, const RunOptions& options) {
  validate_attention_backward(problem, options);
}

bool needs_no_kernel(const AttentionForward& problem) { return attention_forward_needs_no_kernel(problem); }
bool needs_no_kernel(const AttentionBackward& problem) { return attention_backward_needs_no_kernel(problem); }

MadePlan<AttentionForward> make_plan(Backend backend, const AttentionForward& problem, const AttentionShape& shape,
                                     const RunOptions& options) {
  return backend == Backend::cuda ? cuda::make_attention_forward_plan(problem, shape, options)
                                  : cpu::make_attention_forward_plan(problem, shape, options);
}
MadePlan<AttentionBackward> make_plan(Backend backend, const AttentionBackward& problem, const AttentionShape& shape,
                                      const RunOptions& options) {
  return backend == Backend::cuda ? cuda::make_attention_backward_plan(problem, shape, options)
                                  : cpu::make_attention_backward_plan(problem, shape, options);
}

// The cached plan of an attention call: made by validating, then, unless the problem is zero-size and
// needs no kernel (core/zero_size.hpp), describing it and asking the call's backend.
template <class Problem>
std::shared_ptr<const OpPlan<Problem>> plan_of(PlanCache<OpPlan<Problem>>& cache, const PlanKey& key,
                                               const Problem& problem, const RunOptions& options, bool* made_now) {
  return cached_plan<Problem>(
      cache, key,
      [&] {
        validate(problem, options);
        const Backend backend = resolve_backend(options.backend, problem.q.device);
        if (needs_no_kernel(problem)) return zero_size_plan(problem);
        const AttentionShape shape = describe_attention(problem.q, problem.k, problem.v, problem.scale);
        // The tuner describes problems with head dims >= 1: a head dim 0 takes the default config, untimed.
        RunOptions plan_options = options;
        plan_options.no_tuning = options.no_tuning || shape.head_dim == 0 || shape.head_dim_v == 0;
        return make_plan(backend, problem, shape, plan_options);
      },
      made_now);
}

std::shared_ptr<const AttentionForwardPlan> forward_plan(const AttentionForward& problem, const RunOptions& options,
                                                         bool* made_now) {
  return plan_of(forward_plans(), attention_forward_key(problem, options), problem, options, made_now);
}

std::shared_ptr<const AttentionBackwardPlan> backward_plan(const AttentionBackward& problem, const RunOptions& options,
                                                           bool* made_now) {
  return plan_of(backward_plans(), attention_backward_key(problem, options), problem, options, made_now);
}

}  // namespace

PlanKey attention_forward_key(const AttentionForward& problem, const RunOptions& options) {
  PlanKey key;
  key.add(problem.q);
  key.add(problem.k);
  key.add(problem.v);
  key.add(problem.out);
  key.add(problem.lse);
  key.add(problem.scale);
  add_mask(key, problem.mask);
  key.add(options);
  return key;
}

PlanKey attention_backward_key(const AttentionBackward& problem, const RunOptions& options) {
  PlanKey key;
  for (const TensorView* view : {&problem.q, &problem.k, &problem.v, &problem.out, &problem.lse, &problem.grad_out,
                                 &problem.grad_q, &problem.grad_k, &problem.grad_v, &problem.grad_rpb}) {
    key.add(*view);
  }
  key.add(problem.scale);
  key.add(int64_t{problem.deterministic});
  key.add(static_cast<int64_t>(problem.kv_splits));
  key.add(problem.split_workspace_limit);
  add_mask(key, problem.mask);
  key.add(options);
  return key;
}

std::shared_ptr<const AttentionForwardPlan> attention_forward_plan(const AttentionForward& problem,
                                                                   const RunOptions& options) {
  return forward_plan(problem, options, nullptr);
}

std::shared_ptr<const AttentionBackwardPlan> attention_backward_plan(const AttentionBackward& problem,
                                                                     const RunOptions& options) {
  return backward_plan(problem, options, nullptr);
}

TunedConfig attention_forward_config_of(const AttentionForward& problem, const RunOptions& options) {
  bool made_now = false;
  const auto plan = forward_plan(problem, options, &made_now);
  return reported(plan->config(), made_now);
}

TunedConfig attention_backward_config_of(const AttentionBackward& problem, const RunOptions& options) {
  bool made_now = false;
  const auto plan = backward_plan(problem, options, &made_now);
  return reported(plan->config(), made_now);
}

void clear_attention_plans() {
  forward_plans().clear();
  backward_plans().clear();
}

}  // namespace attnkit::detail
