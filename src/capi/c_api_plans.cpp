// The C ABI's plans (attnkit_attention_*_plan, attnkit_retention_*_plan, attnkit_gemm_plan, attnkit_plan_run): a handle
// owns the call shape it was made from (the problem with its views) and the cached plan of that shape
// (core/attention_plan.hpp). A run copies the shape, puts the caller's data pointers into its tensor fields (checking
// presence and alignment against the shape, the only things a pointer can change about a plan; a field with no elements
// is present whatever its pointer, NULL included) and runs the plan;
// when the tuner's settings have changed since (plan generation), or the plan was made for one call only
// (a default taken during CUDA-graph capture while tuning is on), it first takes the current plan.
// Nothing else is validated again.
#include <array>
#include <atomic>
#include <iterator>
#include <memory>
#include <string>

#include "attnkit/attention.hpp"
#include "attnkit/attnkit.h"
#include "capi/c_api_convert.hpp"
#include "capi/c_api_errors.hpp"
#include "core/attention_plan.hpp"
#include "core/gemm_plan.hpp"
#include "core/retention_plan.hpp"
#include "core/zero_size.hpp"

struct attnkit_plan {
  virtual ~attnkit_plan() = default;
  virtual int64_t workspace_bytes() const = 0;
  virtual void run(void* const* data, int32_t count, const attnkit::RunOptions& options) const = 0;
};

namespace attnkit::capi {
namespace {

using detail::OpPlan;

template <class Problem>
struct PlanTraits;

template <>
struct PlanTraits<AttentionForward> {
  static constexpr const char* kNames[] = {"q",       "k", "v", "out", "lse", "mask.block_mask", "mask.element_mask",
                                           "mask.rpb"};
  static std::array<TensorView*, 8> fields(AttentionForward& p) {
    return {&p.q, &p.k, &p.v, &p.out, &p.lse, &p.mask.block_mask, &p.mask.element_mask, &p.mask.rpb};
  }
  static std::shared_ptr<const OpPlan<AttentionForward>> plan(const AttentionForward& p, const RunOptions& o) {
    return detail::attention_forward_plan(p, o);
  }
};

template <>
struct PlanTraits<AttentionBackward> {
  static constexpr const char* kNames[] = {"q",
                                           "k",
                                           "v",
                                           "out",
                                           "lse",
                                           "grad_out",
                                           "grad_q",
                                           "grad_k",
                                           "grad_v",
                                           "mask.block_mask",
                                           "mask.element_mask",
                                           "mask.rpb",
                                           "grad_rpb"};
  static std::array<TensorView*, 13> fields(AttentionBackward& p) {
    return {&p.q,
            &p.k,
            &p.v,
            &p.out,
            &p.lse,
            &p.grad_out,
            &p.grad_q,
            &p.grad_k,
            &p.grad_v,
            &p.mask.block_mask,
            &p.mask.element_mask,
            &p.mask.rpb,
            &p.grad_rpb};
  }
  static std::shared_ptr<const OpPlan<AttentionBackward>> plan(const AttentionBackward& p, const RunOptions& o) {
    return detail::attention_backward_plan(p, o);
  }
};

template <>
struct PlanTraits<RetentionForward> {
  static constexpr const char* kNames[] = {"q", "k", "v", "out", "initial_state", "final_state", "decay"};
  static std::array<TensorView*, 7> fields(RetentionForward& p) {
    return {&p.q, &p.k, &p.v, &p.out, &p.initial_state, &p.final_state, &p.decay};
  }
  static std::shared_ptr<const OpPlan<RetentionForward>> plan(const RetentionForward& p, const RunOptions& o) {
    return detail::retention_forward_plan(p, o);
  }
};

template <>
struct PlanTraits<RetentionBackward> {
  static constexpr const char* kNames[] = {
      "q",      "k",      "v",      "grad_out",           "initial_state", "grad_final_state",
      "grad_q", "grad_k", "grad_v", "grad_initial_state", "decay"};
  static std::array<TensorView*, 11> fields(RetentionBackward& p) {
    return {&p.q,      &p.k,      &p.v,      &p.grad_out,           &p.initial_state, &p.grad_final_state,
            &p.grad_q, &p.grad_k, &p.grad_v, &p.grad_initial_state, &p.decay};
  }
  static std::shared_ptr<const OpPlan<RetentionBackward>> plan(const RetentionBackward& p, const RunOptions& o) {
    return detail::retention_backward_plan(p, o);
  }
};

template <>
struct PlanTraits<GemmProblem> {
  static constexpr const char* kNames[] = {"a", "b", "c"};
  static std::array<TensorView*, 3> fields(GemmProblem& p) { return {&p.a, &p.b, &p.c}; }
  static std::shared_ptr<const OpPlan<GemmProblem>> plan(const GemmProblem& p, const RunOptions& o) {
    return detail::gemm_plan(p, o);
  }
};

template <class Problem>
class PlanHandle final : public attnkit_plan {
  using Traits = PlanTraits<Problem>;

 public:
  PlanHandle(const Problem& problem, const RunOptions& options) : shape_(problem), options_(options) {
    auto shape_fields = Traits::fields(const_cast<Problem&>(shape_));
    for (size_t i = 0; i < shape_fields.size(); ++i) {
      no_elements_[i] = detail::has_no_elements(*shape_fields[i]);
    }
    const uint64_t generation = detail::plan_generation();
    current_.store(std::make_shared<const Current>(Current{Traits::plan(shape_, options_), generation}));
  }

  int64_t workspace_bytes() const override { return current_.load()->plan->workspace_bytes(); }

  void run(void* const* data, int32_t count, const RunOptions& per_run) const override {
    auto shape_fields = Traits::fields(const_cast<Problem&>(shape_));
    if (count != static_cast<int32_t>(shape_fields.size())) {
      throw Error(Status::invalid_argument, "count: " + std::to_string(count) +
                                                "; allowed: " + std::to_string(shape_fields.size()) +
                                                ", the number of tensor fields of the plan's args struct");
    }
    if (count > 0 && data == nullptr)
      throw Error(Status::invalid_argument, "data: NULL; allowed: an array of pointers");
    Problem problem = shape_;
    auto fields = Traits::fields(problem);
    for (size_t i = 0; i < fields.size(); ++i) check_pointer(i, data[i], *shape_fields[i], no_elements_[i]);
    for (size_t i = 0; i < fields.size(); ++i) fields[i]->data = data[i];
    RunOptions options = options_;
    options.stream = per_run.stream;
    options.workspace = per_run.workspace;
    options.workspace_bytes = per_run.workspace_bytes;
    std::shared_ptr<const Current> current = current_.load();
    if (const uint64_t now = detail::plan_generation(); now != current->generation || !current->plan->reusable()) {
      current = std::make_shared<const Current>(Current{Traits::plan(problem, options_), now});
      current_.store(current);
    }
    current->plan->run(problem, options);
  }

 private:
  // A field with no elements is given with any pointer, NULL included (nothing is read or written through
  // it); its alignment is still the plan's, NULL counting as 16-byte aligned as in the plan key.
  static void check_pointer(size_t i, const void* data, const TensorView& shape, bool no_elements) {
    const bool given = data != nullptr || no_elements;
    const bool shape_given = shape.defined() || no_elements;
    const bool presence_differs = given != shape_given;
    const bool alignment_differs =
        given && detail::address_alignment_bits(data) != detail::address_alignment_bits(shape.data);
    if (!presence_differs && !alignment_differs) return;
    const std::string name = "data[" + std::to_string(i) + "] (" + Traits::kNames[i] + ")";
    if (presence_differs) {
      throw Error(Status::invalid_argument, name + ": " + (data ? "a tensor" : "NULL") + "; allowed: " +
                                                (shape_given ? "a tensor (the plan was made with one; NULL only "
                                                               "for a tensor with an extent 0)"
                                                             : "NULL (the plan was made without it)"));
    }
    throw Error(Status::invalid_argument,
                name + ": address mod 16 is " + std::to_string(detail::address_alignment_bits(data)) +
                    "; allowed: " + std::to_string(detail::address_alignment_bits(shape.data)) +
                    ", the alignment the plan was made with (make a plan for this alignment)");
  }

  // A plan and the generation it was taken in, swapped as one.
  struct Current {
    std::shared_ptr<const OpPlan<Problem>> plan;
    uint64_t generation = 0;
  };

  const Problem shape_;
  // Per tensor field of shape_: whether it has no elements (then it is given whatever its pointer, NULL included).
  std::array<bool, std::size(Traits::kNames)> no_elements_{};
  const RunOptions options_;
  mutable std::atomic<std::shared_ptr<const Current>> current_;
};

RunOptions plan_options(const attnkit_run_options* options, int32_t flags) {
  if ((flags & ~ATTNKIT_PLAN_NO_TUNING) != 0) {
    throw Error(Status::invalid_argument,
                "flags: " + std::to_string(flags) + "; allowed: 0 or ATTNKIT_PLAN_NO_TUNING (1)");
  }
  RunOptions run = to_run_options(options);
  run.no_tuning = (flags & ATTNKIT_PLAN_NO_TUNING) != 0;
  run.workspace = nullptr;
  run.workspace_bytes = 0;
  return run;
}

// The body of every attnkit_*_plan: `args` (named `args_name` in the message when NULL) converted by `convert` into
// the problem of a new handle in *plan.
template <class Problem, class Args, class Convert>
attnkit_status make_plan(const Args* args, const char* args_name, Convert convert, const attnkit_run_options* options,
                         int32_t flags, attnkit_plan** plan) {
  return guarded_call([&] {
    require_args(args, args_name);
    require_args(plan, "plan");
    *plan = new PlanHandle<Problem>(convert(*args), plan_options(options, flags));
  });
}

}  // namespace
}  // namespace attnkit::capi

using namespace attnkit::capi;

extern "C" {

attnkit_status attnkit_attention_forward_plan(const attnkit_attention_forward_args* args,
                                              const attnkit_run_options* options, int32_t flags, attnkit_plan** plan) {
  return make_plan<attnkit::AttentionForward>(args, "attnkit_attention_forward_args", to_attention_forward, options,
                                              flags, plan);
}

attnkit_status attnkit_attention_backward_plan(const attnkit_attention_backward_args* args,
                                               const attnkit_run_options* options, int32_t flags, attnkit_plan** plan) {
  return make_plan<attnkit::AttentionBackward>(args, "attnkit_attention_backward_args", to_attention_backward, options,
                                               flags, plan);
}

attnkit_status attnkit_retention_forward_plan(const attnkit_retention_forward_args* args,
                                              const attnkit_run_options* options, int32_t flags, attnkit_plan** plan) {
  return make_plan<attnkit::RetentionForward>(args, "attnkit_retention_forward_args", to_retention_forward, options,
                                              flags, plan);
}

attnkit_status attnkit_retention_backward_plan(const attnkit_retention_backward_args* args,
                                               const attnkit_run_options* options, int32_t flags, attnkit_plan** plan) {
  return make_plan<attnkit::RetentionBackward>(args, "attnkit_retention_backward_args", to_retention_backward, options,
                                               flags, plan);
}

attnkit_status attnkit_gemm_plan(const attnkit_gemm_args* args, const attnkit_run_options* options, int32_t flags,
                                 attnkit_plan** plan) {
  return make_plan<attnkit::GemmProblem>(args, "attnkit_gemm_args", to_gemm, options, flags, plan);
}

attnkit_status attnkit_plan_workspace_size(const attnkit_plan* plan, int64_t* bytes) {
  return guarded_call([&] {
    require_args(plan, "attnkit_plan");
    require_args(bytes, "bytes");
    *bytes = plan->workspace_bytes();
  });
}

attnkit_status attnkit_plan_run(const attnkit_plan* plan, void* const* data, int32_t count, void* stream,
                                void* workspace, int64_t workspace_bytes) {
  return guarded_call([&] {
    require_args(plan, "attnkit_plan");
    if (workspace_bytes < 0) {
      throw attnkit::Error(attnkit::Status::invalid_argument,
                           "workspace_bytes: " + std::to_string(workspace_bytes) + "; allowed: >= 0");
    }
    attnkit::RunOptions per_run;
    per_run.stream = stream;
    per_run.workspace = workspace;
    per_run.workspace_bytes = workspace_bytes;
    plan->run(data, count, per_run);
  });
}

void attnkit_plan_destroy(attnkit_plan* plan) { delete plan; }

}  // extern "C"
