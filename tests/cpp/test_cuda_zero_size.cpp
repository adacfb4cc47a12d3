// Zero-size attention problems on CUDA tensors (DESIGN §4, src/core/zero_size.hpp): what the definition
// fixes is written on the device with the library's capturable memsets (src/core/fill_view.cpp), on the
// caller's stream, inside a CUDA graph too; head_dim 0 runs the kernels with every score 0. Outputs are
// poisoned with NaN first, and the padding around each view must stay NaN. Without CUDA (or a GPU)
// every test skips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "cuda_test_support.hpp"
#include "test_support.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(CudaZeroSize, SkipsWithoutCuda) {
  GTEST_SKIP() << "no CUDA device: this build has no CUDA backend (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

using test::cuda_device_present;
using test::expect_cuda;
using test::TestTensor;

class CudaZeroSize : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount found none";
  }
};

// A tensor padded by one element after every dimension but a 4-D tensor's last (strides stay multiples of
// 8 elements, as the kernels read them), filled with random values (inputs) or NaN (outputs), on the device.
TestTensor tensor(std::vector<int64_t> extents, DType dtype, bool output, uint64_t seed) {
  std::vector<int64_t> padding(extents.size(), 1);
  if (extents.size() == 4) padding.back() = 0;
  TestTensor t = TestTensor::make(dtype, extents, padding);
  if (output) {
    test::poison_nan(t.buffer.view);
  } else {
    std::mt19937_64 rng(seed);
    test::fill_random(t.buffer.view, rng, -1.0, 1.0);
  }
  t.upload();
  return t;
}

bool all_equal(const TensorView& view, double value) {
  bool same = true;
  test::for_each_offset(
      view, [&](int64_t off) { same = same && detail::load_as_double(view.data, view.dtype, off) == value; });
  return same;
}

TEST_F(CudaZeroSize, NoKeyGivesZeroOutputAndMinusInfLseOnTheCallersStreamAndInAGraph) {
  TestTensor q = tensor({2, 5, 2, 64}, DType::bf16, false, 1);
  TestTensor k = tensor({2, 0, 2, 64}, DType::bf16, false, 2);
  TestTensor v = tensor({2, 0, 2, 64}, DType::bf16, false, 3);
  TestTensor out = tensor({2, 5, 2, 64}, DType::bf16, true, 0);
  TestTensor lse = tensor({2, 5, 2}, DType::f32, true, 0);
  AttentionForward problem;
  problem.q = q.device;
  problem.k = k.device;
  problem.v = v.device;
  problem.out = out.device;
  problem.lse = lse.device;
  cudaStream_t stream = nullptr;
  expect_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  RunOptions options;
  options.backend = Backend::cuda;
  options.stream = stream;
  attention_forward(problem, options);
  expect_cuda(cudaStreamSynchronize(stream), "synchronize");
  out.download();
  lse.download();
  EXPECT_TRUE(all_equal(out.host, 0.0)) << "out of rows without keys is 0";
  EXPECT_TRUE(all_equal(lse.host, -INFINITY)) << "lse of rows without keys is -inf";
  EXPECT_TRUE(out.padding_untouched() && lse.padding_untouched()) << "written outside the views";

  // The same call captured into a graph and replayed on fresh poison.
  test::poison_nan(out.buffer.view);
  test::poison_nan(lse.buffer.view);
  out.upload();
  lse.upload();
  cudaGraphExec_t exec = nullptr;
  test::StreamCapture capture(stream);
  ASSERT_TRUE(capture.began()) << "cudaStreamBeginCapture";
  attention_forward(problem, options);
  cudaGraph_t graph = capture.end();
  ASSERT_NE(graph, nullptr) << "cudaStreamEndCapture";
  expect_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  expect_cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  expect_cuda(cudaStreamSynchronize(stream), "synchronize");
  out.download();
  lse.download();
  EXPECT_TRUE(all_equal(out.host, 0.0)) << "graph replay: out";
  EXPECT_TRUE(all_equal(lse.host, -INFINITY)) << "graph replay: lse";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_F(CudaZeroSize, BackwardWithoutKeysOrQueriesGivesZeroGradients) {
  for (const bool no_keys : {true, false}) {
    SCOPED_TRACE(no_keys ? "no keys" : "no queries");
    const int64_t sq = no_keys ? 5 : 0, sk = no_keys ? 0 : 7;
    TestTensor q = tensor({2, sq, 2, 64}, DType::f16, false, 4);
    TestTensor k = tensor({2, sk, 2, 64}, DType::f16, false, 5);
    TestTensor v = tensor({2, sk, 2, 64}, DType::f16, false, 6);
    TestTensor out = tensor({2, sq, 2, 64}, DType::f16, false, 7);
    TestTensor grad_out = tensor({2, sq, 2, 64}, DType::f16, false, 8);
    TestTensor lse = tensor({2, sq, 2}, DType::f32, false, 9);
    TestTensor grad_q = tensor({2, sq, 2, 64}, DType::f16, true, 0);
    TestTensor grad_k = tensor({2, sk, 2, 64}, DType::f16, true, 0);
    TestTensor grad_v = tensor({2, sk, 2, 64}, DType::f16, true, 0);
    AttentionBackward problem;
    problem.q = q.device;
    problem.k = k.device;
    problem.v = v.device;
    problem.out = out.device;
    problem.lse = lse.device;
    problem.grad_out = grad_out.device;
    problem.grad_q = grad_q.device;
    problem.grad_k = grad_k.device;
    problem.grad_v = grad_v.device;
    RunOptions options;
    options.backend = Backend::cuda;
    attention_backward(problem, options);
    expect_cuda(cudaDeviceSynchronize(), "synchronize");
    for (TestTensor* g : {&grad_q, &grad_k, &grad_v}) {
      g->download();
      EXPECT_TRUE(all_equal(g->host, 0.0)) << "a gradient of a problem without keys or queries is 0";
      EXPECT_TRUE(g->padding_untouched()) << "written outside the view";
    }
  }
}

TEST_F(CudaZeroSize, HeadDimZeroAveragesTheValuesOfTheAttendedKeys) {
  // q, k [1, 6, 1, 0], v [1, 6, 1, 64], causal: row i is the mean of v's rows 0..i (every score 0).
  TestTensor q = tensor({1, 6, 1, 0}, DType::bf16, false, 10);
  TestTensor k = tensor({1, 6, 1, 0}, DType::bf16, false, 11);
  TestTensor v = tensor({1, 6, 1, 64}, DType::bf16, false, 12);
  TestTensor out = tensor({1, 6, 1, 64}, DType::bf16, true, 0);
  AttentionForward problem;
  problem.q = q.device;
  problem.k = k.device;
  problem.v = v.device;
  problem.out = out.device;
  problem.mask.kind = MaskKind::causal;
  RunOptions options;
  options.backend = Backend::cuda;
  try {
    attention_forward(problem, options);
  } catch (const Error& e) {
    if (e.status() == Status::unsupported) GTEST_SKIP() << "the CUDA backend answers unsupported: " << e.what();
    throw;
  }
  expect_cuda(cudaDeviceSynchronize(), "synchronize");
  out.download();
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t x = 0; x < 64; ++x) {
      double mean = 0;
      for (int64_t j = 0; j <= i; ++j) mean += test::element_at(v.host, {0, j, 0, x}) / static_cast<double>(i + 1);
      EXPECT_NEAR(test::element_at(out.host, {0, i, 0, x}), mean, 2e-2) << "row " << i << ", column " << x;
    }
  }
  EXPECT_TRUE(out.padding_untouched()) << "written outside the view";
}

#endif

}  // namespace
}  // namespace attnkit
