// The CPU backend gives bitwise identical results whatever the thread count: the forward's query
// tiles and the backward's dK/dV slices are fixed by the problem, not by the threads.
#include <gtest/gtest.h>

#include "test_cpu_attention_problem.hpp"

namespace attnkit::test {
namespace {

AttentionCase threads_case() {
  AttentionCase c;
  c.dtype = DType::f32;
  c.batch = 1;
  c.tokens = {24, 23};  // enough rows for several backward slices per (batch, kv head)
  c.heads_q = 2;
  c.heads_kv = 1;
  c.head_dim = 16;
  c.mask = neighborhood_mask({5, 7}, {2, 1});
  return c;
}

TEST(CpuAttentionThreads, ForwardIsIdenticalWithOneAndTwoThreads) {
  AttentionTensors one(threads_case());
  AttentionTensors two(threads_case());
  one.run_forward(1);
  two.run_forward(2);
  ASSERT_TRUE(all_finite(one.out.view));
  EXPECT_EQ(max_abs_difference(two.out.view, one.out.view), 0.0);
  EXPECT_EQ(max_abs_difference(two.lse.view, one.lse.view), 0.0);
}

TEST(CpuAttentionThreads, BackwardIsIdenticalWithOneAndTwoThreads) {
  AttentionTensors one(threads_case());
  AttentionTensors two(threads_case());
  one.run_forward(1);
  one.run_backward(1);
  two.run_forward(2);
  two.run_backward(2);
  ASSERT_TRUE(all_finite(one.grad_k.view));
  EXPECT_EQ(max_abs_difference(two.grad_q.view, one.grad_q.view), 0.0);
  EXPECT_EQ(max_abs_difference(two.grad_k.view, one.grad_k.view), 0.0);
  EXPECT_EQ(max_abs_difference(two.grad_v.view, one.grad_v.view), 0.0);
}

}  // namespace
}  // namespace attnkit::test
