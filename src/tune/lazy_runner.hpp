// A Runner built only when the tuner first times something. Dispatch hands one to every
// Tuner::choose call, and building a real runner (allocating and filling input buffers, on a GPU
// also streams and events) costs far more than the cache hit that almost every call is.
#pragma once
#include <functional>
#include <memory>

#include "tune/runner.hpp"

namespace attnkit::tune {

class LazyRunner : public Runner {
 public:
  explicit LazyRunner(std::function<std::unique_ptr<Runner>()> make) : make_(std::move(make)) {}
  double measure_seconds(const Config& config, int iteration) override {
    if (!runner_) runner_ = make_();
    return runner_->measure_seconds(config, iteration);
  }
  bool built() const { return runner_ != nullptr; }

 private:
  std::function<std::unique_ptr<Runner>()> make_;
  std::unique_ptr<Runner> runner_;
};

}  // namespace attnkit::tune
