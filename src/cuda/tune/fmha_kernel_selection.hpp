// The choice of a kernel-registry entry for an attention plan, one procedure for both directions
// (fmha_forward_selection.hpp, fmha_backward_selection.hpp give it their registry):
//  1. an entry forced through the environment (ATTNKIT_FMHA_CONFIG / ATTNKIT_FMHA_BACKWARD_CONFIG) runs
//     as the registry default does (forced_config_name; the registry's default function honours it);
//  2. else the tuner's choice (choose_attention_config), taken as the entry its config holds
//     (tune::Config::entry), when that entry fits the device;
//  3. else — the tuner cannot answer, or its entry does not fit — the registry default, with a warning.
#pragma once
#include <exception>
#include <string>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"
#include "core/log.hpp"
#include "cuda/fmha/fmha_configs.hpp"
#include "tune/local_tuning.hpp"

namespace attnkit::cuda::fmha {

template <class Kernel>
struct KernelSelection {
  const Kernel* kernel = nullptr;  // nullptr: no compiled kernel can run the call on this device
  std::string name;
  tune::ChoiceSource source = tune::ChoiceSource::default_config;
  bool provisional = false;  // the default, taken only because the caller's stream was capturing
  int multiprocessors = 0;   // of the call's device
};

// Direction: the registry's traits, with
//   static constexpr tune::TuneOp op; static constexpr const char* forced_variable; static const char* name;
//   static const Kernel* registry_default(DType, const detail::AttentionShape&, MaskKind, const FmhaDevice&);
//   static std::string config_name(const Kernel&); static const Kernel* entry_of(const tune::Config&);
//   static bool fits(const Kernel&, const FmhaDevice&).
// choose: the tuner's answer (choose_attention_config), a callable so that this header needs no CUDA.
template <class Direction, class Kernel, class Choose>
KernelSelection<Kernel> select_registry_kernel(DType dtype, const detail::AttentionShape& shape, MaskKind mask,
                                               const FmhaDevice& limits, Choose&& choose) {
  auto registry_default = [&] {
    KernelSelection<Kernel> selection;
    selection.kernel = Direction::registry_default(dtype, shape, mask, limits);
    if (selection.kernel != nullptr) selection.name = Direction::config_name(*selection.kernel);
    selection.multiprocessors = limits.multiprocessors;
    return selection;
  };
  if (forced_config_name(Direction::forced_variable) != nullptr) return registry_default();
  try {
    const auto answer = choose();
    KernelSelection<Kernel> selection;
    selection.kernel = Direction::entry_of(*answer.choice.config);
    selection.name = answer.choice.config->id;
    selection.source = answer.choice.source;
    selection.provisional = answer.provisional;
    selection.multiprocessors = limits.multiprocessors;
    if (selection.kernel != nullptr && Direction::fits(*selection.kernel, limits)) return selection;
  } catch (const std::exception& e) {
    detail::log_message(detail::LogLevel::warning, std::string("tuner: no CUDA ") + Direction::name +
                                                       " config from the tuner (" + e.what() +
                                                       "); using the registry default");
  }
  return registry_default();
}

}  // namespace attnkit::cuda::fmha
