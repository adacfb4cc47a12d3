// Brute-force attention, deliberately simple and separate from the threaded CPU backend, used to
// check it (tests) and to check other backends (`attnkit run --check`).
//
// Everything is computed in double from an explicit Sq x Sk boolean mask built by evaluating
// DESIGN §3 literally for every (query, key) pair. Inputs are read and outputs written through
// each view's own dtype, so outputs may be float64 views while inputs are fp16. The backward uses
// the problem's `out` and `lse` (delta = dout.out, P = exp(scale q.k - lse)), exactly the function
// the library's backward computes, so a backend's gradients can be compared tightly. A relative
// positional bias (mask.rpb) is added to every visible score; its gradient (grad_rpb) is the sum of the
// score gradients that read each entry.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::cpu::reference {

// Row-major Sq x Sk matrix: 1 where query i of batch b and query head h attends key j.
std::vector<uint8_t> explicit_attention_mask(const AttentionMask& mask, const detail::AttentionShape& shape, int64_t b,
                                             int64_t h);

void attention_forward_reference(const AttentionForward& problem, const detail::AttentionShape& shape,
                                 const RunOptions& options);
void attention_backward_reference(const AttentionBackward& problem, const detail::AttentionShape& shape,
                                  const RunOptions& options);

}  // namespace attnkit::cpu::reference
