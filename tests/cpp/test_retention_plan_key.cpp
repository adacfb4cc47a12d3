// The retention plan key (core/retention_plan.hpp) holds ATTNKIT_RETENTION_CONFIG: the CUDA backend reads it when a
// plan is made, so a process that changes it between calls must get a plan made under the new value (the
// benchmark times several values in one process).
#include <cstdlib>
#include <string>

#include "core/retention_plan.hpp"
#include "test_validate_problems.hpp"

namespace attnkit::test {
namespace {

// Sets ATTNKIT_RETENTION_CONFIG (unset for null) for the object's lifetime, then restores the value before.
class ScopedConfig {
 public:
  explicit ScopedConfig(const char* value) {
    if (const char* before = std::getenv("ATTNKIT_RETENTION_CONFIG")) {
      before_ = before;
      had_ = true;
    }
    if (value != nullptr) {
      setenv("ATTNKIT_RETENTION_CONFIG", value, 1);
    } else {
      unsetenv("ATTNKIT_RETENTION_CONFIG");
    }
  }
  ~ScopedConfig() {
    if (had_) {
      setenv("ATTNKIT_RETENTION_CONFIG", before_.c_str(), 1);
    } else {
      unsetenv("ATTNKIT_RETENTION_CONFIG");
    }
  }
  ScopedConfig(const ScopedConfig&) = delete;
  ScopedConfig& operator=(const ScopedConfig&) = delete;

 private:
  std::string before_;
  bool had_ = false;
};

detail::PlanKey forward_key_under(const char* config) {
  const ScopedConfig scoped(config);
  return detail::retention_forward_key(valid_retention_forward(), {});
}

detail::PlanKey backward_key_under(const char* config) {
  const ScopedConfig scoped(config);
  return detail::retention_backward_key(valid_retention_backward(), {});
}

TEST(RetentionPlanKey, DiffersByTheForcedConfig) {
  EXPECT_FALSE(forward_key_under(nullptr) == forward_key_under("joint=1"));
  EXPECT_FALSE(forward_key_under("joint=1") == forward_key_under("joint=1,segments=2"));
  EXPECT_FALSE(backward_key_under(nullptr) == backward_key_under("joint=1"));
  EXPECT_FALSE(backward_key_under("block=32") == backward_key_under("block=64"));
}

TEST(RetentionPlanKey, IsTheSameForTheSameConfigAndForUnsetOrEmpty) {
  EXPECT_TRUE(forward_key_under("joint=1") == forward_key_under("joint=1"));
  EXPECT_TRUE(forward_key_under(nullptr) == forward_key_under(""));
  EXPECT_TRUE(backward_key_under(nullptr) == backward_key_under(""));
}

}  // namespace
}  // namespace attnkit::test
