#include "core/plan_cache.hpp"

namespace attnkit::detail {
namespace {

std::atomic<uint64_t> generation{1};

}  // namespace

uint64_t plan_generation() { return generation.load(std::memory_order_acquire); }

void invalidate_plans() { generation.fetch_add(1, std::memory_order_acq_rel); }

}  // namespace attnkit::detail
