// Which GEMM registry entry a CUDA gemm plan runs (asked once per plan, gemm_plan.cpp):
//  1. ATTNKIT_GEMM_CONFIG=<name> forces an entry, and a product without A and B (K = 0 or alpha = 0) runs
//     the SIMT entry: select_gemm_kernel decides, the tuner is not asked;
//  2. else the device's tuner answers for the call's problem key (cuda_config_choice.hpp: a cached winner,
//     the default, or -- mode on, RunOptions::no_tuning unset, the stream not capturing -- a tuning now with
//     a GemmTuningRunner on the call's sizes). A winner other than the key's default runs when its entry
//     computes the call's own operands (their strides and alignment; staged where the entry needs it);
//  3. the key's default, a winner that cannot take the call's operands, or a tuner that cannot answer (a
//     warning): select_gemm_kernel's choice on the call's own shape, the registry's rule, which is what the
//     tuner's default is for the key's representative (M bucketed; see gemm_config_space.hpp).
#pragma once
#include "attnkit/backend.hpp"
#include "cuda/gemm/gemm_registry.hpp"
#include "cuda/gemm/gemm_shape.hpp"
#include "tune/local_tuning.hpp"

namespace attnkit::cuda::gemm {

struct GemmSelection {
  GemmChoice choice;
  tune::ChoiceSource source = tune::ChoiceSource::default_config;
  bool provisional = false;  // the default, taken only because the caller's stream was capturing
};

GemmSelection select_gemm_config(const GemmShape& shape, bool allow_tf32, const RunOptions& options, int device);

}  // namespace attnkit::cuda::gemm
