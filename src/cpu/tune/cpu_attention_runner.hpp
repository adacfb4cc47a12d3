// A Runner that times the CPU backend's attention (validated once, then the drivers), for tuning the
// CPU config space offline and on a call's first run. It owns `buffer_sets` sets of
// random inputs and outputs and uses set `iteration % buffer_sets`, so consecutive runs do not find
// their inputs in cache. Runs go straight to the CPU drivers with the config under test
// (cpu::attention_*_configured), never through the tuner that is timing them.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"
#include "tune/runner.hpp"

namespace attnkit::tune {

class CpuAttentionRunner : public Runner {
 public:
  // spec.op must be attention_forward or attention_backward; throws Error(unsupported) otherwise.
  explicit CpuAttentionRunner(const ProblemSpec& spec, int buffer_sets = 2, uint64_t seed = 1);
  double measure_seconds(const Config& config, int iteration) override;

 private:
  struct BufferSet {
    std::vector<unsigned char> q, k, v, out, grad_out, grad_q, grad_k, grad_v;
    std::vector<float> lse;
    std::vector<unsigned char> mask;  // block or element mask, bool
    AttentionForward forward;
    AttentionBackward backward;
    detail::AttentionShape shape;
  };
  void build(BufferSet& set, uint64_t seed);

  ProblemSpec spec_;
  std::vector<BufferSet> sets_;
};

}  // namespace attnkit::tune
