// A plan: one op's call shape validated, its backend chosen and its kernel configuration selected once,
// then run any number of times (the CUTLASS device-adapter model: can_implement / get_workspace_size /
// initialize once, run per call). Plans are made by the backends (make_*_plan in cpu/ and cuda/) and
// cached by PlanKey (plan_cache.hpp), so the workspace query and the run of a call share one plan, and
// a repeated call pays only the key, the cache look-up and its launches.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>

#include "attnkit/backend.hpp"
#include "attnkit/tuner.hpp"
#include "core/plan_cache.hpp"

namespace attnkit::detail {

template <class Problem>
class OpPlan {
 public:
  virtual ~OpPlan() = default;
  // Device scratch a run needs (RunOptions::workspace); 0 when none.
  virtual int64_t workspace_bytes() const = 0;
  // Runs `problem`, which has this plan's key: only its data pointers, the stream and the workspace
  // differ from the call the plan was made for. Validation has been done when the plan was made.
  virtual void run(const Problem& problem, const RunOptions& options) const = 0;
  // The kernel configuration the plan runs and where the choice came from ("default", "cache", "tuned").
  virtual TunedConfig config() const = 0;
  // false for a plan whose choice held only for the call that made it (MadePlan::reusable): holders of
  // a plan (C ABI handles) make a new one for their next run.
  bool reusable() const { return reusable_; }
  void set_reusable(bool reusable) { reusable_ = reusable; }

 private:
  bool reusable_ = true;
};

// What a backend hands back. `reusable` is false for a choice that only holds for this call (the
// tuner's default taken during CUDA-graph capture while tuning is on): such a plan is not cached.
template <class Problem>
struct MadePlan {
  std::unique_ptr<OpPlan<Problem>> plan;
  bool reusable = true;
};

// The cached plan of `key`, or a new one from make() (cached when reusable); *made says which.
template <class Problem, class Make>
std::shared_ptr<const OpPlan<Problem>> cached_plan(PlanCache<OpPlan<Problem>>& cache, const PlanKey& key, Make&& make,
                                                   bool* made_now = nullptr) {
  if (made_now != nullptr) *made_now = false;
  if (std::shared_ptr<const OpPlan<Problem>> plan = cache.find(key)) return plan;
  if (made_now != nullptr) *made_now = true;
  // Read before making: a settings change while the plan is made leaves it stale, not wrongly fresh.
  const uint64_t generation = plan_generation();
  MadePlan<Problem> made = make();
  made.plan->set_reusable(made.reusable);
  std::shared_ptr<const OpPlan<Problem>> plan = std::move(made.plan);
  if (made.reusable) cache.insert(key, plan, generation);
  return plan;
}

}  // namespace attnkit::detail
