#include "cpu/tune/cpu_attention_dispatch.hpp"

#include <exception>

#include "core/log.hpp"
#include "cpu/tune/cpu_attention_runner.hpp"
#include "cpu/tune/cpu_attention_space.hpp"
#include "cpu/tune/host_mask_density.hpp"
#include "tune/lazy_runner.hpp"
#include "tune/process_tuners.hpp"

namespace attnkit::tune {
namespace {

CpuAttentionChoice choose(TuneOp op, DType dtype, const detail::AttentionShape& shape, const AttentionMask& mask,
                          bool may_tune) {
  try {
    const ProblemSpec exact = attention_problem_spec(op, dtype, shape, mask, host_mask_density(mask));
    const ProblemKey key = make_problem_key(exact);
    const std::shared_ptr<Tuner> tuner = cpu_process_tuner();
    // The runner times the call's own sizes: the choice must hold on the problem that asked for it.
    LazyRunner runner([&exact] { return std::make_unique<CpuAttentionRunner>(exact); });
    const TuneChoice choice = tuner->choose(key, may_tune ? &runner : nullptr, /*capturing=*/false);
    return {cpu_attention_config(*choice.config), choice.config->id, choice.source};
  } catch (const std::exception& e) {
    detail::log_message(detail::LogLevel::warning, std::string("tuner: no CPU attention config from the tuner (") +
                                                       e.what() + "); using the drivers' defaults");
    return {cpu::CpuAttentionConfig{}, "driver-default", ChoiceSource::default_config};
  }
}

}  // namespace

CpuAttentionChoice choose_cpu_attention_forward(const AttentionForward& problem, const detail::AttentionShape& shape,
                                                bool may_tune) {
  return choose(TuneOp::attention_forward, problem.q.dtype, shape, problem.mask, may_tune);
}

CpuAttentionChoice choose_cpu_attention_backward(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                                 bool may_tune) {
  return choose(TuneOp::attention_backward, problem.q.dtype, shape, problem.mask, may_tune);
}

}  // namespace attnkit::tune
