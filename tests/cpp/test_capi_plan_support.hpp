// The C ABI's plan handles as the C++ tests hold them: an owning pointer that destroys the plan, CPU run options, and
// a run on data pointers alone (no stream, no workspace).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "attnkit/attnkit.h"

namespace attnkit::test {

struct PlanDestroyer {
  void operator()(attnkit_plan* plan) const { attnkit_plan_destroy(plan); }
};
using PlanHandle = std::unique_ptr<attnkit_plan, PlanDestroyer>;

inline attnkit_run_options c_cpu_options() {
  attnkit_run_options options;
  attnkit_run_options_init(&options);
  options.backend = ATTNKIT_BACKEND_CPU;
  return options;
}

inline attnkit_status run_plan(const PlanHandle& plan, const std::vector<void*>& data) {
  return attnkit_plan_run(plan.get(), data.data(), static_cast<int32_t>(data.size()), nullptr, nullptr, 0);
}

}  // namespace attnkit::test
