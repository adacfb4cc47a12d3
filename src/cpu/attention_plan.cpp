// Plans of the CPU backend's attention (core/op_plan.hpp): the tuner's config is chosen once per call
// shape (for block and element masks from the density of the mask the plan was made with), then every
// run goes straight to the drivers of the chosen instruction set.
#include <memory>
#include <type_traits>

#include "core/tuned_config.hpp"
#include "cpu/attention_isa.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/tune/cpu_attention_dispatch.hpp"

namespace attnkit::cpu {
namespace {

template <class Problem>
class CpuAttentionPlan final : public detail::OpPlan<Problem> {
 public:
  CpuAttentionPlan(const detail::AttentionShape& shape, const tune::CpuAttentionChoice& choice)
      : shape_(shape), config_(choice.config), choice_(detail::tuned_config(choice.name, choice.source)) {}

  int64_t workspace_bytes() const override { return 0; }
  void run(const Problem& problem, const RunOptions& options) const override {
    if constexpr (std::is_same_v<Problem, AttentionForward>) {
      attention_forward_configured(problem, shape_, options, config_);
    } else {
      attention_backward_configured(problem, shape_, options, config_);
    }
  }
  TunedConfig config() const override { return choice_; }

 private:
  detail::AttentionShape shape_;
  CpuAttentionConfig config_;
  TunedConfig choice_;
};

}  // namespace

detail::MadePlan<AttentionForward> make_attention_forward_plan(const AttentionForward& problem,
                                                               const detail::AttentionShape& shape,
                                                               const RunOptions& options) {
  const tune::CpuAttentionChoice choice = tune::choose_cpu_attention_forward(problem, shape, !options.no_tuning);
  return {std::make_unique<CpuAttentionPlan<AttentionForward>>(shape, choice)};
}

detail::MadePlan<AttentionBackward> make_attention_backward_plan(const AttentionBackward& problem,
                                                                 const detail::AttentionShape& shape,
                                                                 const RunOptions& options) {
  const tune::CpuAttentionChoice choice = tune::choose_cpu_attention_backward(problem, shape, !options.no_tuning);
  return {std::make_unique<CpuAttentionPlan<AttentionBackward>>(shape, choice)};
}

}  // namespace attnkit::cpu
