// A Runner that times the CPU backend's attention through the public API (attention_forward /
// attention_backward), for offline tuning of the CPU config space. It owns `buffer_sets` sets of
// random inputs and outputs and uses set `iteration % buffer_sets`, so consecutive runs do not find
// their inputs in cache. A config's `threads` goes to RunOptions::num_threads.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/attention.hpp"
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
  };
  void build(BufferSet& set, uint64_t seed);

  ProblemSpec spec_;
  std::vector<BufferSet> sets_;
};

}  // namespace attnkit::tune
