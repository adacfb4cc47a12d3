// Retention on the CUDA backend (src/cuda/retention/) against the CPU backend run in float64 on the
// same rounded inputs (DESIGN §5: relative L2 <= 5e-3 for float16, 1.5e-2 for bfloat16). Every output
// is poisoned with NaN first and must be fully written; the padding around each view must stay NaN.
// Covers odd lengths, both head dims, Dv != Dk, every mode, initial and final states, per-head gamma,
// custom scales, padded and misaligned views, CUDA-graph replay, the backward's four gradients, the
// parallel form's backward (normalised, and over a decay matrix with Tq != Tk: causal and zero-tiled matrices
// whose zero tiles the kernels skip, row strides that are no multiple of 4 elements), and the messages of what
// the CUDA backend does not run. Without CUDA (or a GPU) every test skips.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/retention.hpp"
#include "core/float_convert.hpp"
#include "core/retention_plan.hpp"
#include "cuda_test_support.hpp"
#include "retention_test_support.hpp"
#include "test_support.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "cuda/retention/retention_chunk_registry.hpp"
#include "cuda/retention/retention_jobs.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(CudaRetention, SkipsWithoutCuda) {
  GTEST_SKIP() << "no CUDA device: this build has no CUDA backend (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

using retention_test::set_backward_tensors;
using test::cuda_device_present;
using test::expect_cuda;
using test::TestTensor;

class CudaRetention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount found none";
  }
};

double tolerance(DType dtype) { return dtype == DType::bf16 ? 1.5e-2 : 5e-3; }

RunOptions on_cuda() {
  RunOptions options;
  options.backend = Backend::cuda;
  return options;
}

RunOptions on_cpu() {
  RunOptions options;
  options.backend = Backend::cpu;
  return options;
}

// Layout of the sequence tensors: padding after the batch, token and head dimensions (strides stay
// multiples of 8 elements: the vector path), or one element after every row (odd strides: the
// element-wise path).
enum class Layout { packed, padded, misaligned };

std::vector<int64_t> padding_for(Layout layout) {
  switch (layout) {
    case Layout::packed: return {0, 0, 0, 0};
    case Layout::padded: return {1, 3, 2, 0};
    case Layout::misaligned: return {1, 1, 1, 1};
  }
  return {0, 0, 0, 0};
}

TestTensor input(const std::vector<int64_t>& extents, DType dtype, const std::vector<int64_t>& padding, uint64_t seed) {
  TestTensor t = TestTensor::make(dtype, extents, padding);
  test::poison_nan(t.buffer.view);
  std::mt19937_64 rng(seed);
  test::fill_random(t.host, rng, -1.0, 1.0);
  t.upload();
  return t;
}

TestTensor output(const std::vector<int64_t>& extents, DType dtype, const std::vector<int64_t>& padding) {
  TestTensor t = TestTensor::make(dtype, extents, padding);
  test::poison_nan(t.buffer.view);
  t.upload();
  return t;
}

// A float64 copy of a tensor's logical elements (contiguous): the CPU reference's operand.
struct Wide {
  test::HostTensor tensor;
  explicit Wide(const TestTensor& t) {
    std::vector<int64_t> extents(t.host.extents.begin(), t.host.extents.begin() + t.host.rank);
    tensor = test::HostTensor::contiguous(DType::f64, extents);
    const std::vector<double> values = test::to_doubles(t.host);
    auto* out = static_cast<double*>(tensor.view.data);
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  }
  const TensorView& view() const { return tensor.view; }
};

test::HostTensor wide_output(const TestTensor& t) {
  std::vector<int64_t> extents(t.host.extents.begin(), t.host.extents.begin() + t.host.rank);
  return test::HostTensor::contiguous(DType::f64, extents);
}

// The CPU reference of a backward call: float64 copies of its operands, float64 gradients of its gradients' shapes.
struct WideBackward {
  Wide q, k, v, grad_out;
  test::HostTensor grad_q, grad_k, grad_v;

  WideBackward(const TestTensor& q_, const TestTensor& k_, const TestTensor& v_, const TestTensor& grad_out_,
               const TestTensor& grad_q_, const TestTensor& grad_k_, const TestTensor& grad_v_)
      : q(q_),
        k(k_),
        v(v_),
        grad_out(grad_out_),
        grad_q(wide_output(grad_q_)),
        grad_k(wide_output(grad_k_)),
        grad_v(wide_output(grad_v_)) {}

  // `p` on these operands, into these gradients.
  RetentionBackward call(RetentionBackward p) const {
    set_backward_tensors(p, q.view(), k.view(), v.view(), grad_out.view(), grad_q.view, grad_k.view, grad_v.view);
    return p;
  }
};

// The GPU's downloaded gradients against the CPU's: within `tol` (where `compare`), without NaN, with their
// padding untouched.
void expect_gradients_match(const TestTensor& dq, const TestTensor& dk, const TestTensor& dv, const WideBackward& ref,
                            double tol, bool compare = true) {
  if (compare) {
    EXPECT_LE(test::relative_l2(dq.host, ref.grad_q.view), tol) << "grad_q";
    EXPECT_LE(test::relative_l2(dk.host, ref.grad_k.view), tol) << "grad_k";
    EXPECT_LE(test::relative_l2(dv.host, ref.grad_v.view), tol) << "grad_v";
  }
  for (const TestTensor* t : {&dq, &dk, &dv}) {
    EXPECT_FALSE(test::any_nan(t->host));
    EXPECT_TRUE(t->padding_untouched());
  }
}

struct Case {
  int64_t batch = 2, tokens = 65, heads = 3, dk = 64, dv = 64;
  DType dtype = DType::bf16;
  RetentionMode mode = RetentionMode::chunkwise;
  int64_t chunk_size = 64;
  bool normalize = false;  // with mode parallel and no states
  bool initial_state = false;
  bool final_state = false;
  std::vector<double> gamma;
  std::optional<double> scale;
  Layout layout = Layout::padded;
  uint64_t seed = 1;
};

std::string describe(const Case& c) {
  std::ostringstream text;
  text << "B" << c.batch << " T" << c.tokens << " H" << c.heads << " Dk" << c.dk << " Dv" << c.dv << " "
       << dtype_name(c.dtype) << " mode " << static_cast<int>(c.mode) << (c.initial_state ? " +S0" : "")
       << (c.final_state ? " +S1" : "");
  return text.str();
}

// Runs the forward on the GPU and on the CPU (float64) and compares out and the final state. With `kernel_family`,
// the plan's kernel must be of that family ("wgmma_chunk64") or, with `expect_family` false, must not be.
void expect_forward_matches_cpu(const Case& c, const char* kernel_family = nullptr, bool expect_family = true) {
  SCOPED_TRACE(describe(c));
  const std::vector<int64_t> pad = padding_for(c.layout);
  const std::vector<int64_t> state_pad{0, 1, 0, 0};
  TestTensor q = input({c.batch, c.tokens, c.heads, c.dk}, c.dtype, pad, c.seed);
  TestTensor k = input({c.batch, c.tokens, c.heads, c.dk}, c.dtype, pad, c.seed + 1);
  TestTensor v = input({c.batch, c.tokens, c.heads, c.dv}, c.dtype, pad, c.seed + 2);
  TestTensor s0 = input({c.batch, c.heads, c.dk, c.dv}, DType::f32, state_pad, c.seed + 3);
  TestTensor out = output({c.batch, c.tokens, c.heads, c.dv}, c.dtype, pad);
  TestTensor s1 = output({c.batch, c.heads, c.dk, c.dv}, DType::f32, state_pad);

  RetentionForward p;
  p.q = q.device;
  p.k = k.device;
  p.v = v.device;
  p.out = out.device;
  if (c.initial_state) p.initial_state = s0.device;
  if (c.final_state) p.final_state = s1.device;
  p.gamma = c.gamma;
  p.scale = c.scale;
  p.mode = c.mode;
  p.chunk_size = c.chunk_size;
  p.normalize = c.normalize;
  if (kernel_family != nullptr) {
    const std::string name = detail::retention_forward_plan(p, on_cuda())->config().name;
    EXPECT_EQ(name.find(kernel_family) != std::string::npos, expect_family) << name;
  }
  retention_forward(p, on_cuda());
  expect_cuda(cudaDeviceSynchronize(), "retention_forward");
  out.download();
  s1.download();

  const Wide wq(q), wk(k), wv(v), ws0(s0);
  test::HostTensor ref_out = wide_output(out);
  test::HostTensor ref_s1 = wide_output(s1);
  RetentionForward r = p;
  r.q = wq.view();
  r.k = wk.view();
  r.v = wv.view();
  r.out = ref_out.view;
  r.initial_state = c.initial_state ? ws0.view() : TensorView{};
  r.final_state = c.final_state ? ref_s1.view : TensorView{};
  retention_forward(r, on_cpu());

  if (c.tokens > 0) {
    EXPECT_LE(test::relative_l2(out.host, ref_out.view), tolerance(c.dtype));
    EXPECT_FALSE(test::any_nan(out.host));
  }
  EXPECT_TRUE(out.padding_untouched());
  if (c.final_state) {
    EXPECT_LE(test::relative_l2(s1.host, ref_s1.view), tolerance(c.dtype));
    EXPECT_FALSE(test::any_nan(s1.host));
    EXPECT_TRUE(s1.padding_untouched());
  } else {
    EXPECT_TRUE(test::any_nan(s1.host)) << "final_state was not asked for but written";
  }
}

// Forces ATTNKIT_RETENTION_CONFIG for the lifetime of the object; plans read it when they are made, so
// the cached retention plans are dropped on both ends.
class ScopedRetentionConfig {
 public:
  explicit ScopedRetentionConfig(const char* value) {
    setenv("ATTNKIT_RETENTION_CONFIG", value, 1);
    detail::clear_retention_plans();
  }
  ~ScopedRetentionConfig() {
    unsetenv("ATTNKIT_RETENTION_CONFIG");
    detail::clear_retention_plans();
  }
  ScopedRetentionConfig(const ScopedRetentionConfig&) = delete;
  ScopedRetentionConfig& operator=(const ScopedRetentionConfig&) = delete;
};

// Why the wgmma chunk kernel cannot run here, or empty when it can (a compute capability 9.0 device and a build with
// the sm_90a target).
std::string wgmma_chunk_unavailable() {
  int major = 0, minor = 0;
  expect_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "cudaDeviceGetAttribute");
  expect_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), "cudaDeviceGetAttribute");
  if (major != 9 || minor != 0) {
    return "the wgmma chunk kernel needs a compute capability 9.0 device; device 0 is " + std::to_string(major) + "." +
           std::to_string(minor);
  }
  if (cuda::retention::find_wgmma_chunk_kernel(DType::bf16, 64, 64) == nullptr) {
    return "this build has no wgmma chunk kernel (ATTNKIT_CUDA_ARCHS without 90a)";
  }
  return "";
}

// The forward tests that the Wgmma* tests below repeat run on the mma.sync chunk kernel (the default's on devices
// other than 9.0); on a 9.0 device the other forward and backward tests run the default, the wgmma kernel.
constexpr const char* kMmaSyncKernel = "wgmma=0";

TEST_F(CudaRetention, ForwardMatchesCpuForLengthsThatAreNoMultipleOfTheChunk) {
  const ScopedRetentionConfig mma_sync(kMmaSyncKernel);
  for (const int64_t tokens : {1, 63, 64, 65, 200, 1000}) {
    for (const DType dtype : {DType::bf16, DType::f16}) {
      Case c;
      c.tokens = tokens;
      c.dtype = dtype;
      c.seed = static_cast<uint64_t>(tokens);
      expect_forward_matches_cpu(c);
    }
  }
}

TEST_F(CudaRetention, ForwardMatchesCpuForEachHeadDimAndValueDim) {
  const ScopedRetentionConfig mma_sync(kMmaSyncKernel);
  for (const auto& [dk, dv] : std::vector<std::pair<int64_t, int64_t> >{
           {64, 64}, {128, 128}, {128, 64}, {64, 128}, {64, 32}, {128, 96}, {64, 256}}) {
    Case c;
    c.dk = dk;
    c.dv = dv;
    c.tokens = 130;
    c.final_state = true;
    expect_forward_matches_cpu(c);
  }
}

TEST_F(CudaRetention, ForwardCarriesInitialStateAndWritesFinalState) {
  const ScopedRetentionConfig mma_sync(kMmaSyncKernel);
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (const int64_t tokens : {1, 65, 300}) {
      Case c;
      c.dtype = dtype;
      c.tokens = tokens;
      c.dk = 128;
      c.dv = 128;
      c.initial_state = true;
      c.final_state = true;
      expect_forward_matches_cpu(c);
    }
  }
}

TEST_F(CudaRetention, ForwardWithoutTokensWritesTheInitialStateAsFinalState) {
  Case c;
  c.tokens = 0;
  c.initial_state = true;
  c.final_state = true;
  expect_forward_matches_cpu(c);
}

TEST_F(CudaRetention, ForwardUsesPerHeadGammaAndCustomScale) {
  const ScopedRetentionConfig mma_sync(kMmaSyncKernel);
  Case c;
  c.heads = 4;
  c.tokens = 257;
  c.gamma = {0.5, 0.9, 0.99, 0.999};
  c.scale = 0.3;
  c.initial_state = true;
  c.final_state = true;
  expect_forward_matches_cpu(c);
}

TEST_F(CudaRetention, ForwardDefaultGammaBeyondThePerHeadParamsIsComputedOnTheDevice) {
  Case c;
  c.batch = 1;
  c.heads = 600;
  c.tokens = 70;
  c.final_state = true;
  expect_forward_matches_cpu(c);
}

TEST_F(CudaRetention, ForwardReadsPackedPaddedAndMisalignedViews) {
  const ScopedRetentionConfig mma_sync(kMmaSyncKernel);
  for (const Layout layout : {Layout::packed, Layout::padded, Layout::misaligned}) {
    for (const DType dtype : {DType::bf16, DType::f16}) {
      Case c;
      c.layout = layout;
      c.dtype = dtype;
      c.tokens = 100;
      c.initial_state = true;
      c.final_state = true;
      expect_forward_matches_cpu(c);
    }
  }
}

TEST_F(CudaRetention, ForwardRunsEveryModeAndChunkSizeWithTheSameResult) {
  for (const RetentionMode mode : {RetentionMode::parallel, RetentionMode::chunkwise, RetentionMode::recurrent}) {
    for (const int64_t chunk : {16, 64, 100}) {
      Case c;
      c.mode = mode;
      c.chunk_size = chunk;
      c.tokens = 150;
      c.initial_state = mode != RetentionMode::parallel;
      c.final_state = true;
      expect_forward_matches_cpu(c);
    }
  }
}

TEST_F(CudaRetention, NormalizedParallelForwardMatchesCpu) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (const auto& [tokens, dk, dv] : std::vector<std::tuple<int64_t, int64_t, int64_t> >{
             {1, 64, 64}, {65, 64, 64}, {200, 128, 128}, {333, 128, 64}}) {
      Case c;
      c.dtype = dtype;
      c.tokens = tokens;
      c.dk = dk;
      c.dv = dv;
      c.mode = RetentionMode::parallel;
      c.normalize = true;
      c.gamma = {0.6, 0.99, 0.9995};  // row sums of |score| on both sides of the clamp at 1
      expect_forward_matches_cpu(c);
    }
  }
}

TEST_F(CudaRetention, NormalizedParallelForwardReadsMisalignedViewsAndManyHeads) {
  Case c;
  c.layout = Layout::misaligned;
  c.batch = 1;
  c.heads = 24;  // the default decays of the last heads round to 1 in float32
  c.tokens = 150;
  c.mode = RetentionMode::parallel;
  c.normalize = true;
  expect_forward_matches_cpu(c);
}

TEST_F(CudaRetention, ForwardDecodeStepAgainstALongState) {
  for (const int64_t tokens : {1, 4}) {
    Case c;
    c.batch = 8;
    c.heads = 16;
    c.tokens = tokens;
    c.dk = 128;
    c.dv = 128;
    c.mode = RetentionMode::recurrent;
    c.initial_state = true;
    c.final_state = true;
    c.layout = Layout::packed;
    expect_forward_matches_cpu(c);
  }
}

TEST_F(CudaRetention, ForwardManyHeadsRunUnsegmented) {
  Case c;  // B*H*Dv/64 = 512 CTAs, more than any GPU's multiprocessors: no sequence split
  c.batch = 16;
  c.heads = 16;
  c.tokens = 96;
  c.dk = 128;
  c.dv = 128;
  c.initial_state = true;
  c.final_state = true;
  expect_forward_matches_cpu(c);
}

TEST_F(CudaRetention, ForwardSplitsLongSequencesOfFewHeadsIntoSegments) {
  for (const int64_t tokens : {700, 3001}) {
    Case c;  // one (batch, head) pair: the sequence is cut into segments that start from the states before them
    c.batch = 1;
    c.heads = 1;
    c.tokens = tokens;
    c.dk = 128;
    c.dv = 128;
    c.gamma = {0.999};
    c.initial_state = true;
    c.final_state = true;
    expect_forward_matches_cpu(c);
  }
}

TEST_F(CudaRetention, ForwardReplaysFromACudaGraphOnTheCallersStream) {
  const std::vector<int64_t> pad{0, 0, 0, 0};
  TestTensor q = input({2, 77, 2, 64}, DType::bf16, pad, 5);
  TestTensor k = input({2, 77, 2, 64}, DType::bf16, pad, 6);
  TestTensor v = input({2, 77, 2, 64}, DType::bf16, pad, 7);
  TestTensor first = output({2, 77, 2, 64}, DType::bf16, pad);
  TestTensor replayed = output({2, 77, 2, 64}, DType::bf16, pad);
  cudaStream_t stream = nullptr;
  expect_cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
  RunOptions options = on_cuda();
  options.stream = stream;
  RetentionForward p;
  p.q = q.device;
  p.k = k.device;
  p.v = v.device;
  p.out = first.device;
  retention_forward(p, options);  // makes the plan outside the capture
  p.out = replayed.device;
  cudaGraph_t graph = nullptr;
  {
    test::StreamCapture capture(stream);
    ASSERT_TRUE(capture.began());
    retention_forward(p, options);
    graph = capture.end();
  }
  ASSERT_NE(graph, nullptr);
  cudaGraphExec_t exec = nullptr;
  expect_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  expect_cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  expect_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  first.download();
  replayed.download();
  EXPECT_EQ(test::max_abs_difference(replayed.host, first.host), 0.0);
  EXPECT_FALSE(test::any_nan(replayed.host));
}

// ---- backward ----------------------------------------------------------------------------------

struct BackwardCase {
  Case shape;
  bool grad_final_state = false;
  bool grad_initial_state = false;
  // An initial state in, and gradients for both states.
  void with_states() {
    shape.initial_state = true;
    grad_final_state = true;
    grad_initial_state = true;
  }
};

// With `wgmma_jobs` >= 0, the plan must run that many of its two named job kernels (dQ/dK's and dV's) on the wgmma
// kernel.
void expect_backward_matches_cpu(const BackwardCase& bc, int wgmma_jobs = -1) {
  const Case& c = bc.shape;
  SCOPED_TRACE(describe(c) + (bc.grad_final_state ? " +dS1" : "") + (bc.grad_initial_state ? " +dS0" : ""));
  const std::vector<int64_t> pad = padding_for(c.layout);
  const std::vector<int64_t> state_pad{0, 1, 0, 0};
  TestTensor q = input({c.batch, c.tokens, c.heads, c.dk}, c.dtype, pad, c.seed);
  TestTensor k = input({c.batch, c.tokens, c.heads, c.dk}, c.dtype, pad, c.seed + 1);
  TestTensor v = input({c.batch, c.tokens, c.heads, c.dv}, c.dtype, pad, c.seed + 2);
  TestTensor dout = input({c.batch, c.tokens, c.heads, c.dv}, c.dtype, pad, c.seed + 3);
  TestTensor s0 = input({c.batch, c.heads, c.dk, c.dv}, DType::f32, state_pad, c.seed + 4);
  TestTensor ds1 = input({c.batch, c.heads, c.dk, c.dv}, DType::f32, state_pad, c.seed + 5);
  TestTensor dq = output({c.batch, c.tokens, c.heads, c.dk}, c.dtype, pad);
  TestTensor dk = output({c.batch, c.tokens, c.heads, c.dk}, c.dtype, pad);
  TestTensor dv = output({c.batch, c.tokens, c.heads, c.dv}, c.dtype, pad);
  TestTensor ds0 = output({c.batch, c.heads, c.dk, c.dv}, DType::f32, state_pad);

  RetentionBackward p;
  set_backward_tensors(p, q.device, k.device, v.device, dout.device, dq.device, dk.device, dv.device);
  if (c.initial_state) p.initial_state = s0.device;
  if (bc.grad_final_state) p.grad_final_state = ds1.device;
  if (bc.grad_initial_state) p.grad_initial_state = ds0.device;
  p.gamma = c.gamma;
  p.scale = c.scale;
  p.mode = c.mode;
  p.chunk_size = c.chunk_size;
  p.normalize = c.normalize;
  if (wgmma_jobs >= 0) {
    const std::string name = detail::retention_backward_plan(p, on_cuda())->config().name;
    int found = 0;
    for (size_t at = name.find("wgmma_chunk64"); at != std::string::npos; at = name.find("wgmma_chunk64", at + 1)) {
      ++found;
    }
    EXPECT_EQ(found, wgmma_jobs) << name;
  }
  retention_backward(p, on_cuda());
  expect_cuda(cudaDeviceSynchronize(), "retention_backward");
  for (TestTensor* t : {&dq, &dk, &dv, &ds0}) t->download();

  const WideBackward ref(q, k, v, dout, dq, dk, dv);
  const Wide ws0(s0), wds1(ds1);
  test::HostTensor ref_ds0 = wide_output(ds0);
  RetentionBackward r = ref.call(p);
  r.initial_state = c.initial_state ? ws0.view() : TensorView{};
  r.grad_final_state = bc.grad_final_state ? wds1.view() : TensorView{};
  r.grad_initial_state = bc.grad_initial_state ? ref_ds0.view : TensorView{};
  retention_backward(r, on_cpu());

  const double tol = tolerance(c.dtype);
  expect_gradients_match(dq, dk, dv, ref, tol, c.tokens > 0);
  if (bc.grad_initial_state) {
    EXPECT_LE(test::relative_l2(ds0.host, ref_ds0.view), tol) << "grad_initial_state";
    EXPECT_FALSE(test::any_nan(ds0.host));
    EXPECT_TRUE(ds0.padding_untouched());
  }
}

// The forward of case c, then its backward with the gradients of both states.
void expect_forward_and_backward_match_cpu(const Case& c) {
  expect_forward_matches_cpu(c);
  BackwardCase bc;
  bc.shape = c;
  bc.grad_final_state = true;
  bc.grad_initial_state = true;
  expect_backward_matches_cpu(bc);
}

// Lengths around the 64-token chunk, both dtypes (seeds tokens + seed_offset); `wgmma_jobs` as in
// expect_backward_matches_cpu.
void expect_odd_length_backwards_match_cpu(uint64_t seed_offset, int wgmma_jobs = -1) {
  for (const int64_t tokens : {1, 63, 65, 200}) {
    for (const DType dtype : {DType::bf16, DType::f16}) {
      BackwardCase bc;
      bc.shape.tokens = tokens;
      bc.shape.dtype = dtype;
      bc.shape.seed = static_cast<uint64_t>(tokens) + seed_offset;
      expect_backward_matches_cpu(bc, wgmma_jobs);
    }
  }
}

TEST_F(CudaRetention, BackwardMatchesCpuForOddLengths) { expect_odd_length_backwards_match_cpu(11); }

TEST_F(CudaRetention, BackwardMatchesCpuForEachHeadDimPair) {
  for (const auto& [dk, dv] : std::vector<std::pair<int64_t, int64_t> >{{64, 64}, {128, 128}, {128, 64}, {64, 128}}) {
    BackwardCase bc;
    bc.shape.dk = dk;
    bc.shape.dv = dv;
    bc.shape.tokens = 130;
    bc.with_states();
    expect_backward_matches_cpu(bc, wgmma_chunk_unavailable().empty() ? 2 : 0);  // the default's kernel
  }
}

// `tokens` with an initial state, per-head gamma (a fast decay among them) and a custom scale.
BackwardCase decayed_case_with_initial_state(int64_t tokens) {
  BackwardCase bc;
  bc.shape.tokens = tokens;
  bc.shape.initial_state = true;
  bc.shape.gamma = {0.6, 0.95, 0.999};
  bc.shape.scale = 0.2;
  return bc;
}

TEST_F(CudaRetention, BackwardCarriesStateGradientsBothWays) {
  for (const bool grad_final : {false, true}) {
    for (const bool grad_initial : {false, true}) {
      BackwardCase bc = decayed_case_with_initial_state(190);
      bc.grad_final_state = grad_final;
      bc.grad_initial_state = grad_initial;
      expect_backward_matches_cpu(bc);
    }
  }
}

// The state update scales key j of a chunk of L tokens by gamma^(L-1-j); a fast decay with a short last chunk
// must give the zero rows past L a factor 0, not gamma to a negative power (infinity times zero).
TEST_F(CudaRetention, AFastDecayWithAShortLastChunkMatchesCpuForwardAndBackward) {
  for (const int64_t tokens : {1, 70, 130}) {
    Case c;
    c.heads = 3;
    c.tokens = tokens;
    c.dk = 128;
    c.dv = 64;
    c.gamma = {1e-3, 0.05, 0.5};
    c.initial_state = true;
    c.final_state = true;
    c.seed = static_cast<uint64_t>(tokens) + 5;
    expect_forward_and_backward_match_cpu(c);
  }
}

// One batch of two heads and 1500 tokens with both states: the rule cuts the sequence into segments.
BackwardCase segmented_backward_case(int64_t dk, int64_t dv) {
  BackwardCase bc;
  bc.shape.batch = 1;
  bc.shape.heads = 2;
  bc.shape.tokens = 1500;
  bc.shape.dk = dk;
  bc.shape.dv = dv;
  bc.shape.gamma = {0.99, 0.9995};
  bc.with_states();
  return bc;
}

TEST_F(CudaRetention, BackwardSplitsLongSequencesOfFewHeadsIntoSegments) {
  expect_backward_matches_cpu(segmented_backward_case(64, 128));
}

// f16, 97 tokens with both states, in packed-padded and misaligned views; `wgmma_jobs` as in
// expect_backward_matches_cpu.
void expect_padded_and_misaligned_backwards_match_cpu(int wgmma_jobs = -1) {
  for (const Layout layout : {Layout::packed, Layout::misaligned}) {
    BackwardCase bc;
    bc.shape.layout = layout;
    bc.shape.dtype = DType::f16;
    bc.shape.tokens = 97;
    bc.with_states();
    expect_backward_matches_cpu(bc, wgmma_jobs);
  }
}

TEST_F(CudaRetention, BackwardReadsPaddedAndMisalignedViews) { expect_padded_and_misaligned_backwards_match_cpu(); }

TEST_F(CudaRetention, BackwardWithoutTokensPassesTheFinalStateGradientThrough) {
  BackwardCase bc;
  bc.shape.tokens = 0;
  bc.grad_final_state = true;
  bc.grad_initial_state = true;
  expect_backward_matches_cpu(bc);
}

TEST_F(CudaRetention, NormalizedParallelBackwardMatchesCpu) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (const int64_t tokens : {1, 65, 200}) {
      for (const auto& [dk, dv] :
           std::vector<std::pair<int64_t, int64_t> >{{64, 64}, {128, 128}, {64, 128}, {128, 64}}) {
        BackwardCase bc;
        bc.shape.dtype = dtype;
        bc.shape.tokens = tokens;
        bc.shape.dk = dk;
        bc.shape.dv = dv;
        bc.shape.mode = RetentionMode::parallel;
        bc.shape.normalize = true;
        bc.shape.gamma = {0.6, 0.99, 0.9995};  // row sums of |score| on both sides of the clamp at 1
        bc.shape.seed = static_cast<uint64_t>(tokens + dk + dv) + (dtype == DType::f16 ? 7 : 0);
        expect_backward_matches_cpu(bc);
      }
    }
  }
}

TEST_F(CudaRetention, NormalizedParallelBackwardReadsMisalignedViewsAndManyHeads) {
  for (const Layout layout : {Layout::packed, Layout::misaligned}) {
    BackwardCase bc;
    bc.shape.layout = layout;
    bc.shape.batch = 1;
    bc.shape.heads = 24;  // the default decays of the last heads round to 1 in float32
    bc.shape.tokens = 150;
    bc.shape.mode = RetentionMode::parallel;
    bc.shape.normalize = true;
    expect_backward_matches_cpu(bc);
  }
}

TEST_F(CudaRetention, NormalizedParallelBackwardWithAWideValueDimAndCustomScale) {
  BackwardCase bc;
  bc.shape.batch = 1;
  bc.shape.heads = 2;
  bc.shape.tokens = 190;
  bc.shape.dk = 128;
  bc.shape.dv = 256;
  bc.shape.scale = 3.0;  // every row sum above the clamp
  bc.shape.gamma = {0.9, 0.999};
  bc.shape.mode = RetentionMode::parallel;
  bc.shape.normalize = true;
  expect_backward_matches_cpu(bc);
}

TEST_F(CudaRetention, EveryForcedValueBlockSegmentCountAndDecodeChoiceGivesTheSameResults) {
  for (const char* config : {"block=32", "segments=3", "block=32,segments=7", "decode=0", "segments=1", "joint=0",
                             "joint=0,segments=3", "joint=0,block=32,segments=7", "wgmma=0,segments=3"}) {
    SCOPED_TRACE(config);
    const ScopedRetentionConfig forced(config);
    Case c;
    c.batch = 1;
    c.heads = 2;
    c.tokens = 517;
    c.dk = 128;
    c.dv = 128;
    c.initial_state = true;
    c.final_state = true;
    expect_forward_matches_cpu(c);
    Case decode = c;
    decode.tokens = 3;
    expect_forward_matches_cpu(decode);
    BackwardCase bc;
    bc.shape = c;
    bc.shape.tokens = 300;
    bc.grad_final_state = true;
    bc.grad_initial_state = true;
    expect_backward_matches_cpu(bc);
  }
}

// The forced-segments case: B2 H2 T611 (10 chunks: five segments of two, the last chunk of 35 tokens), per-head gamma,
// both states.
Case segments_case(int64_t dk, int64_t dv) {
  Case c;
  c.batch = 2;
  c.heads = 2;
  c.tokens = 611;
  c.dk = dk;
  c.dv = dv;
  c.gamma = {0.97, 0.999};
  c.initial_state = true;
  c.final_state = true;
  return c;
}

// Forced segments run the state-only launch (the state warps alone) for every head dim pair and value block, with
// the sequence's end inside a segment's last chunk.
TEST_F(CudaRetention, ForcedSegmentsMatchCpuForEachHeadDimPairAndValueBlock) {
  for (const char* config : {"segments=5", "block=32,segments=3", "joint=0,segments=5", "joint=0,block=32,segments=3",
                             "segments=2,splits=2", "joint=0,segments=3,splits=4"}) {
    SCOPED_TRACE(config);
    const ScopedRetentionConfig forced(config);
    for (const auto& [dk, dv] : std::vector<std::pair<int64_t, int64_t> >{{64, 64}, {64, 128}, {128, 64}}) {
      expect_forward_and_backward_match_cpu(segments_case(dk, dv));
    }
  }
}

// The joint backward (the jobs that share an instance in one launch, each with its own part of the workspace) under
// the segment rule, which counts the CTAs of the jobs together: few heads of a long sequence (segments) and a sequence
// shorter than two segments of 4 chunks (none), with Dk == Dv (three jobs in one launch) and Dk != Dv (dQ and dK
// together, dV alone).
TEST_F(CudaRetention, JointBackwardMatchesCpuWithAndWithoutSegments) {
  const ScopedRetentionConfig forced("joint=1");
  for (const auto& [heads, tokens, dk, dv] : std::vector<std::array<int64_t, 4> >{
           {2, 1500, 64, 64}, {2, 1500, 64, 128}, {2, 1500, 128, 128}, {4, 200, 128, 64}}) {
    SCOPED_TRACE(::testing::Message() << "H " << heads << " T " << tokens << " Dk " << dk << " Dv " << dv);
    BackwardCase bc;
    bc.shape.batch = 1;
    bc.shape.heads = heads;
    bc.shape.tokens = tokens;
    bc.shape.dk = dk;
    bc.shape.dv = dv;
    bc.with_states();
    expect_backward_matches_cpu(bc);
  }
}

// A forward under ATTNKIT_RETENTION_CONFIG=`config` is refused as an invalid argument whose message holds `allowed`.
void expect_forced_config_refused(const char* config, const std::string& allowed) {
  const ScopedRetentionConfig forced(config);
  const std::vector<int64_t> pad{0, 0, 0, 0};
  TestTensor q = input({1, 70, 1, 64}, DType::bf16, pad, 1);
  TestTensor out = output({1, 70, 1, 64}, DType::bf16, pad);
  RetentionForward p;
  p.q = q.device;
  p.k = q.device;
  p.v = q.device;
  p.out = out.device;
  try {
    retention_forward(p, on_cuda());
    ADD_FAILURE() << config << ": expected Status::invalid_argument";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(allowed), std::string::npos) << e.what();
  }
}

TEST_F(CudaRetention, AnUnknownForcedConfigIsRefusedNamingTheAllowedItems) {
  expect_forced_config_refused("tiles=3", "block=32|64, segments=N");
}

// ---- the Hopper wgmma chunk kernel (the default on 9.0; retention_wgmma_chunk_kernel.cuh) ----------------------

constexpr const char* kWgmmaFamily = "wgmma_chunk64";
// The instance whose CTAs own 128 value columns (Dk 128, Dv a multiple of 128, no forced block=).
constexpr const char* kWgmmaWide = "wgmma_chunk64_dk128_dv128";
// Every wgmma test forces decode=0 too, so that sequences of at most 16 tokens run the chunk kernel as well.
constexpr const char* kForcedWgmma = "wgmma=1,decode=0";
constexpr const char* kForcedWgmmaSegments = "wgmma=1,decode=0,segments=5";

TEST_F(CudaRetention, WgmmaChunkForwardMatchesCpuForOddLengthsAndBothDtypes) {
  if (const std::string why = wgmma_chunk_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const ScopedRetentionConfig forced(kForcedWgmma);
  // 192: three whole chunks, an odd count (at Dk 64 the first of the two output warpgroups takes the last one).
  for (const int64_t tokens : {1, 63, 64, 65, 192, 200, 1000}) {
    for (const DType dtype : {DType::bf16, DType::f16}) {
      Case c;
      c.tokens = tokens;
      c.dtype = dtype;
      c.seed = static_cast<uint64_t>(tokens);
      expect_forward_matches_cpu(c, kWgmmaFamily);
    }
  }
}

TEST_F(CudaRetention, WgmmaChunkForwardMatchesCpuForEachHeadDimAndValueDim) {
  if (const std::string why = wgmma_chunk_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const ScopedRetentionConfig forced(kForcedWgmma);
  for (const auto& [dk, dv] :
       std::vector<std::pair<int64_t, int64_t> >{{64, 64}, {128, 128}, {128, 64}, {64, 128}, {64, 256}, {128, 192}}) {
    for (const DType dtype : {DType::bf16, DType::f16}) {
      Case c;
      c.dk = dk;
      c.dv = dv;
      c.dtype = dtype;
      c.tokens = 130;
      c.final_state = true;
      expect_forward_matches_cpu(c, kWgmmaFamily);
    }
  }
  // Dv no multiple of 64 (value blocks of 32): the mma.sync kernel runs, with the same results.
  Case c;
  c.dk = 128;
  c.dv = 96;
  c.tokens = 130;
  c.final_state = true;
  expect_forward_matches_cpu(c, kWgmmaFamily, false);
}

TEST_F(CudaRetention, WgmmaChunkForwardCarriesInitialStateAndWritesFinalState) {
  if (const std::string why = wgmma_chunk_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const ScopedRetentionConfig forced(kForcedWgmma);
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (const int64_t tokens : {0, 1, 65, 300}) {
      for (const int64_t dk : {64, 128}) {
        Case c;
        c.dtype = dtype;
        c.tokens = tokens;
        c.dk = dk;
        c.dv = 128;
        c.initial_state = true;
        c.final_state = true;
        expect_forward_matches_cpu(c, kWgmmaFamily);
      }
    }
  }
}

TEST_F(CudaRetention, WgmmaChunkForwardUsesPerHeadGammaIncludingAFastDecayAndCustomScale) {
  if (const std::string why = wgmma_chunk_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const ScopedRetentionConfig forced(kForcedWgmma);
  for (const int64_t dk : {64, 128}) {
    Case c;
    c.heads = 4;
    c.tokens = 257;
    c.dk = dk;
    c.gamma = {0.5, 0.9, 0.99, 0.999};
    c.scale = 0.3;
    c.initial_state = true;
    c.final_state = true;
    expect_forward_matches_cpu(c, kWgmmaFamily);
    Case fast = c;  // a fast decay whose last chunk is 3 tokens long
    fast.gamma = {0.05, 0.5, 0.7, 0.8};
    fast.tokens = 131;
    fast.scale.reset();
    expect_forward_matches_cpu(fast, kWgmmaFamily);
  }
  Case many;  // more heads than the params' per-head decays: the default gamma computed on the device
  many.batch = 1;
  many.heads = 600;
  many.tokens = 70;
  many.final_state = true;
  expect_forward_matches_cpu(many, kWgmmaFamily);
}

TEST_F(CudaRetention, WgmmaChunkForwardReadsPackedPaddedAndMisalignedViews) {
  if (const std::string why = wgmma_chunk_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const ScopedRetentionConfig forced(kForcedWgmma);
  // Dk 128 (value block 64, two CTAs a multiprocessor) and Dk 64 (two output warpgroups, five stages), the latter also
  // over more chunks than its ring has stages.
  for (const Layout layout : {Layout::packed, Layout::padded, Layout::misaligned}) {
    for (const DType dtype : {DType::bf16, DType::f16}) {
      for (const auto& [dk, tokens] : std::vector<std::pair<int64_t, int64_t> >{{128, 100}, {64, 100}, {64, 450}}) {
        Case c;
        c.layout = layout;
        c.dtype = dtype;
        c.dk = dk;
        c.tokens = tokens;
        c.initial_state = true;
        c.final_state = true;
        expect_forward_matches_cpu(c, kWgmmaFamily);
      }
    }
  }
}

// Segments: the state-only launch (producer and state warpgroup alone), then each segment from the states before it;
// forced counts, and the rule's for few heads of a long sequence.
TEST_F(CudaRetention, WgmmaChunkForwardMatchesCpuWithSegments) {
  if (const std::string why = wgmma_chunk_unavailable(); !why.empty()) GTEST_SKIP() << why;
  // Segments of the state-only launch cut in parts (segments=2: two of 3 and 2 chunks; segments=3: four of one chunk),
  // and the wide instance (Dk = Dv = 128).
  for (const char* config :
       {kForcedWgmmaSegments, "wgmma=1,decode=0,segments=2,splits=2", "wgmma=1,decode=0,segments=3,splits=4"}) {
    SCOPED_TRACE(config);
    const ScopedRetentionConfig forced(config);
    for (const auto& [dk, dv] : std::vector<std::pair<int64_t, int64_t> >{{64, 64}, {64, 128}, {128, 64}, {128, 128}}) {
      expect_forward_matches_cpu(segments_case(dk, dv), kWgmmaFamily);
    }
  }
  const ScopedRetentionConfig forced(kForcedWgmma);
  for (const int64_t tokens : {700, 3001}) {
    Case c;
    c.batch = 1;
    c.heads = 1;
    c.tokens = tokens;
    c.dk = 128;
    c.dv = 128;
    c.gamma = {0.999};
    c.initial_state = true;
    c.final_state = true;
    expect_forward_matches_cpu(c, kWgmmaFamily);
  }
}

// The value block 128 instance (Dk 128, Dv 128 and 256: one and two CTAs per head): odd lengths (last chunks of 1, 3,
// 35 and 63 tokens), both dtypes, initial and final states, per-head gamma with a fast decay and a custom scale.
TEST_F(CudaRetention, WgmmaWideChunkForwardMatchesCpuForOddLengthsStatesAndDecays) {
  if (const std::string why = wgmma_chunk_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const ScopedRetentionConfig forced(kForcedWgmma);
  for (const int64_t dv : {128, 256}) {
    for (const DType dtype : {DType::bf16, DType::f16}) {
      for (const int64_t tokens : {1, 63, 65, 131, 611}) {
        Case c;
        c.batch = 2;
        c.heads = 2;
        c.dk = 128;
        c.dv = dv;
        c.dtype = dtype;
        c.tokens = tokens;
        c.gamma = {0.05, 0.999};
        c.scale = 0.3;
        c.initial_state = tokens != 63;
        c.final_state = true;
        c.seed = static_cast<uint64_t>(tokens + dv);
        expect_forward_matches_cpu(c, kWgmmaWide);
      }
    }
  }
}

// The value block 128 instance on packed and misaligned views (the element-wise copies) and with segments (the
// state-only launch with both state warpgroups, then the outputs from the states before each segment).
TEST_F(CudaRetention, WgmmaWideChunkForwardReadsMisalignedViewsAndRunsSegments) {
  if (const std::string why = wgmma_chunk_unavailable(); !why.empty()) GTEST_SKIP() << why;
  {
    const ScopedRetentionConfig forced(kForcedWgmma);
    for (const Layout layout : {Layout::packed, Layout::misaligned}) {
      Case c;
      c.layout = layout;
      c.dk = 128;
      c.dv = 256;
      c.tokens = 100;
      c.initial_state = true;
      c.final_state = true;
      expect_forward_matches_cpu(c, kWgmmaWide);
    }
  }
  const ScopedRetentionConfig forced(kForcedWgmmaSegments);
  for (const int64_t dv : {128, 256}) expect_forward_matches_cpu(segments_case(128, dv), kWgmmaWide);
}

// block=64 keeps the value block 64 instance at Dk 128 and Dv 128 (the cases the wide instance takes otherwise).
TEST_F(CudaRetention, WgmmaChunkForwardKeepsValueBlock64WhenForced) {
  if (const std::string why = wgmma_chunk_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const ScopedRetentionConfig forced("wgmma=1,decode=0,block=64");
  for (const int64_t tokens : {65, 300}) {
    Case c;
    c.dk = 128;
    c.dv = 128;
    c.tokens = tokens;
    c.initial_state = true;
    c.final_state = true;
    expect_forward_matches_cpu(c, "wgmma_chunk64_dk128_dv64");
  }
}

// The backward's three jobs (time-reversed and operand-swapped forwards) on the wgmma kernel, joint and in turn: odd
// lengths, both dtypes, each head-dim pair (dQ and dK carry Dk value columns: CTAs of 128 of them at Dk 128), state
// gradients both ways with per-head gamma and scale, segments, misaligned views.
TEST_F(CudaRetention, WgmmaChunkBackwardMatchesCpu) {
  if (const std::string why = wgmma_chunk_unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const char* config : {kForcedWgmma, "wgmma=1,decode=0,joint=0"}) {
    SCOPED_TRACE(config);
    const ScopedRetentionConfig forced(config);
    expect_odd_length_backwards_match_cpu(31, 2);
    for (const auto& [dk, dv] : std::vector<std::pair<int64_t, int64_t> >{{64, 64}, {128, 128}, {128, 64}, {64, 128}}) {
      BackwardCase bc = decayed_case_with_initial_state(130);
      bc.shape.dk = dk;
      bc.shape.dv = dv;
      bc.grad_final_state = true;
      bc.grad_initial_state = true;
      expect_backward_matches_cpu(bc, 2);
    }
  }
  const ScopedRetentionConfig forced(kForcedWgmma);
  expect_backward_matches_cpu(segmented_backward_case(128, 128), 2);
  expect_padded_and_misaligned_backwards_match_cpu(2);
}

// The backward on the mma.sync kernel (wgmma=0; the rule's on devices other than 9.0).
TEST_F(CudaRetention, BackwardOnTheMmaSyncKernelMatchesCpu) {
  const ScopedRetentionConfig forced(kMmaSyncKernel);
  for (const int64_t tokens : {1, 65, 200}) {
    BackwardCase bc;
    bc.shape.tokens = tokens;
    bc.shape.seed = static_cast<uint64_t>(tokens) + 41;
    expect_backward_matches_cpu(bc, 0);
  }
  for (const auto& [dk, dv] : std::vector<std::pair<int64_t, int64_t> >{{128, 128}, {128, 64}}) {
    BackwardCase bc;
    bc.shape.dk = dk;
    bc.shape.dv = dv;
    bc.shape.tokens = 130;
    bc.with_states();
    expect_backward_matches_cpu(bc, 0);
  }
}

// The selection on a 9.0 device: the wgmma kernel by default (CTAs of 128 value columns at Dk = Dv = 128, 64 when
// block=64 is forced); wgmma=0 keeps the mma.sync one.
TEST_F(CudaRetention, WgmmaChunkKernelIsTheDefaultAndWgmma0KeepsTheMmaSyncKernel) {
  if (const std::string why = wgmma_chunk_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const std::vector<int64_t> pad{0, 0, 0, 0};
  TestTensor q = input({2, 300, 4, 128}, DType::bf16, pad, 1);
  TestTensor out = output({2, 300, 4, 128}, DType::bf16, pad);
  RetentionForward p;
  p.q = q.device;
  p.k = q.device;
  p.v = q.device;
  p.out = out.device;
  auto kernel_name = [&] { return detail::retention_forward_plan(p, on_cuda())->config().name; };
  for (const char* config : {"", "wgmma=1"}) {
    // Dk 128, Dv 128: CTAs of 128 value columns, unless block=64 is forced.
    const ScopedRetentionConfig forced(config);
    EXPECT_NE(kernel_name().find(kWgmmaWide), std::string::npos) << config << ": " << kernel_name();
  }
  for (const char* config : {"block=64", "wgmma=1,block=64"}) {
    const ScopedRetentionConfig forced(config);
    EXPECT_NE(kernel_name().find(std::string(kWgmmaFamily) + "_dk128_dv64"), std::string::npos)
        << config << ": " << kernel_name();
  }
  for (const char* config : {"wgmma=0", "wgmma=0,block=64"}) {
    const ScopedRetentionConfig forced(config);
    EXPECT_EQ(kernel_name().find("wgmma"), std::string::npos) << config << ": " << kernel_name();
    EXPECT_NE(kernel_name().find("chunk64"), std::string::npos) << config << ": " << kernel_name();
  }
  // Two CTAs per multiprocessor at Dk 128 with value block 64, one at Dk 64 and at value block 128 (the kernel's launch
  // bound, registers and shared memory are sized for it), as the registry records.
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (const auto& [dk, value_block] : std::vector<std::pair<int, int> >{{64, 64}, {128, 64}, {128, 128}}) {
      const cuda::retention::ChunkKernel* kernel = cuda::retention::find_wgmma_chunk_kernel(dtype, dk, value_block);
      ASSERT_NE(kernel, nullptr);
      expect_cuda(
          cudaFuncSetAttribute(kernel->function, cudaFuncAttributeMaxDynamicSharedMemorySize, kernel->shared_bytes),
          "cudaFuncSetAttribute");
      int blocks = 0;
      expect_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel->function, kernel->threads,
                                                                static_cast<size_t>(kernel->shared_bytes)),
                  "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
      EXPECT_EQ(blocks, dk == 128 && value_block == 64 ? 2 : 1)
          << dtype_name(dtype) << " Dk " << dk << " block " << value_block;
      EXPECT_EQ(kernel->resident, blocks) << dtype_name(dtype) << " Dk " << dk << " block " << value_block;
    }
  }
}

// The predicate alone (no device needed): only a 9.0 device, only the mma.sync chunk kernel's jobs with a compiled
// wgmma instance (value block 64), never the decode kernel; value block 128 at Dk 128 when the wide Dv is a multiple
// of 128.
TEST(CudaRetentionSelection, WgmmaChunkKernelReplacesOnlyTheChunkKernelOnComputeCapability90) {
  using cuda::retention::find_chunk_kernel;
  using cuda::retention::find_decode_kernel;
  using cuda::retention::find_wgmma_chunk_kernel;
  using cuda::retention::wgmma_chunk_kernel_for;
  for (const DType dtype : {DType::bf16, DType::f16}) {
    for (const int dk : {64, 128}) {
      const cuda::retention::ChunkKernel* kernel = find_chunk_kernel(dtype, dk, 64);
      ASSERT_NE(kernel, nullptr);
      EXPECT_EQ(wgmma_chunk_kernel_for(kernel, 0, 80), nullptr);
      EXPECT_EQ(wgmma_chunk_kernel_for(kernel, 128, 89), nullptr);
      EXPECT_EQ(wgmma_chunk_kernel_for(kernel, 0, 100), nullptr);
      const cuda::retention::ChunkKernel* wgmma = wgmma_chunk_kernel_for(kernel, 0, 90);
      EXPECT_EQ(wgmma, find_wgmma_chunk_kernel(dtype, dk, 64));  // null in builds without sm_90a
      if (wgmma != nullptr) {
        EXPECT_STREQ(wgmma->family, "wgmma_chunk64");
        EXPECT_EQ(wgmma->dtype, dtype);
        EXPECT_EQ(wgmma->head_dim, dk);
        EXPECT_EQ(wgmma->value_block, 64);
      }
      // Dv 192 is no multiple of 128, and Dk 64 has no value block 128 instance: value block 64.
      EXPECT_EQ(wgmma_chunk_kernel_for(kernel, 192, 90), wgmma);
      if (dk == 64) {
        EXPECT_EQ(wgmma_chunk_kernel_for(kernel, 256, 90), wgmma);
      }
      if (dk == 128) {
        for (const int64_t dv : {128, 256}) {
          const cuda::retention::ChunkKernel* wide = wgmma_chunk_kernel_for(kernel, dv, 90);
          EXPECT_EQ(wide, find_wgmma_chunk_kernel(dtype, dk, 128)) << "Dv " << dv;
          if (wide != nullptr) {
            EXPECT_STREQ(wide->family, "wgmma_chunk64");
            EXPECT_EQ(wide->head_dim, 128);
            EXPECT_EQ(wide->value_block, 128);
          }
        }
        EXPECT_EQ(wgmma_chunk_kernel_for(kernel, 256, 80), nullptr);
      }
      kernel = find_chunk_kernel(dtype, dk, 32);
      EXPECT_EQ(wgmma_chunk_kernel_for(kernel, 0, 90), nullptr) << "no value block 32 instance";
      EXPECT_EQ(wgmma_chunk_kernel_for(kernel, 128, 90), nullptr)
          << "a forced value block 32 keeps the mma.sync kernel";
      kernel = find_decode_kernel(dtype, dk);
      EXPECT_EQ(wgmma_chunk_kernel_for(kernel, 0, 90), nullptr) << "decode jobs keep their kernel";
      EXPECT_EQ(wgmma_chunk_kernel_for(kernel, 128, 90), nullptr) << "decode jobs keep their kernel";
    }
  }
}

TEST_F(CudaRetention, AMalformedWgmmaItemIsRefusedNamingTheAllowedItems) {
  expect_forced_config_refused("wgmma=2", "wgmma=0|1");
}

// ---- what the CUDA backend refuses, and how it says so ---------------------------------------------

std::string unsupported_message(const Case& c) {
  const std::vector<int64_t> pad{0, 0, 0, 0};
  TestTensor q = input({c.batch, c.tokens, c.heads, c.dk}, c.dtype, pad, 1);
  TestTensor k = input({c.batch, c.tokens, c.heads, c.dk}, c.dtype, pad, 2);
  TestTensor v = input({c.batch, c.tokens, c.heads, c.dv}, c.dtype, pad, 3);
  TestTensor out = output({c.batch, c.tokens, c.heads, c.dv}, c.dtype, pad);
  RetentionForward p;
  p.q = q.device;
  p.k = k.device;
  p.v = v.device;
  p.out = out.device;
  p.mode = c.mode;
  try {
    retention_forward(p, on_cuda());
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::unsupported) << e.what();
    out.download();
    EXPECT_TRUE(test::any_nan(out.host)) << "nothing is written when the call is refused";
    return e.what();
  }
  ADD_FAILURE() << "expected Status::unsupported";
  return "";
}

TEST_F(CudaRetention, Float32InputsAreRefusedNamingTheAllowedDtypes) {
  Case c;
  c.dtype = DType::f32;
  const std::string message = unsupported_message(c);
  EXPECT_NE(message.find("float16 or bfloat16"), std::string::npos) << message;
}

// The parallel form over an explicit decay matrix [H|1, Tq, Tk] (RetentionForward::decay), Tq != Tk.
// Which entries of a decay matrix are zero: none (random in [0, 1)); those above the diagonal (key > query, RetNet's
// causal decay: the kernels skip the 64x64 tiles above it); or whole 64x64 tiles, 16-query strips and 16-key
// strips in a fixed pattern (the kernels skip a warp's 16 rows or 16 keys when all are zero, and whole tiles).
enum class DecayPattern { dense, causal, zero_tiles };

struct DecayCase {
  int64_t tq = 65, tk = 130, dk = 64, dv = 64;
  int64_t batch = 2, heads = 3;
  DType dtype = DType::bf16;
  DType decay_dtype = DType::f32;
  bool shared = false;
  bool normalize = false;
  Layout layout = Layout::padded;
  DecayPattern pattern = DecayPattern::dense;
  // Unused entries after each row of the matrix: 0 keeps rows 16-byte aligned where Tk allows; 3 with Tk = 130
  // makes the row stride no multiple of 4 elements (the kernels' element-wise staging).
  int64_t row_padding = 0;
};

std::string describe(const DecayCase& c) {
  const char* patterns[] = {"dense", "causal", "zero tiles"};
  std::ostringstream text;
  text << "B" << c.batch << " H" << c.heads << " Tq" << c.tq << " Tk" << c.tk << " Dk" << c.dk << " Dv" << c.dv << " "
       << dtype_name(c.dtype) << " decay " << dtype_name(c.decay_dtype) << (c.shared ? " shared " : " per-head ")
       << patterns[static_cast<int>(c.pattern)] << " row stride " << c.tk + c.row_padding
       << (c.normalize ? " normalize" : "");
  return text.str();
}

// Whether entry (query i, key j) of a DecayPattern::zero_tiles matrix is zero: a third of the 64x64 tiles, and in
// the others alternately a 16-query strip or a 16-key strip.
bool in_zero_tile_pattern(int64_t i, int64_t j) {
  const int64_t tile_i = i / 64, tile_j = j / 64;
  if ((tile_i + 2 * tile_j) % 3 == 0) return true;
  if ((tile_i + tile_j) % 2 == 0) return (i % 64) / 16 == 1;
  return (j % 64) / 16 == 2;
}

// The case's decay matrix [H|1, Tq, Tk] (a padded middle dimension and c.row_padding after each row, poisoned)
// with entries uniform in [0, 1), and zeros where c.pattern puts them.
TestTensor random_decay(const DecayCase& c, int64_t heads, uint64_t seed) {
  const int64_t matrices = c.shared ? 1 : heads;
  TestTensor decay = TestTensor::make(c.decay_dtype, {matrices, c.tq, c.tk}, {0, 1, c.row_padding});
  test::poison_nan(decay.buffer.view);
  std::mt19937_64 rng(seed);
  test::fill_random(decay.host, rng, 0.0, 1.0);
  const TensorView& view = decay.host;
  for (int64_t h = 0; h < matrices; ++h) {
    for (int64_t i = 0; i < c.tq; ++i) {
      for (int64_t j = 0; j < c.tk; ++j) {
        const bool zero = (c.pattern == DecayPattern::causal && j > i) ||
                          (c.pattern == DecayPattern::zero_tiles && in_zero_tile_pattern(i, j));
        if (zero) {
          detail::store_from_double(view.data, view.dtype, h * view.strides[0] + i * view.strides[1] + j, 0.0);
        }
      }
    }
  }
  decay.upload();
  return decay;
}

// `family`: the kernel family the call's plan must name (null: any).
void expect_decay_matrix_forward_matches_cpu(const DecayCase& c, const char* family = nullptr) {
  SCOPED_TRACE(describe(c));
  const int64_t batch = c.batch, heads = c.heads;
  const std::vector<int64_t> pad = padding_for(c.layout);
  TestTensor q = input({batch, c.tq, heads, c.dk}, c.dtype, pad, 5);
  TestTensor k = input({batch, c.tk, heads, c.dk}, c.dtype, pad, 6);
  TestTensor v = input({batch, c.tk, heads, c.dv}, c.dtype, pad, 7);
  TestTensor decay = random_decay(c, heads, 8);
  TestTensor out = output({batch, c.tq, heads, c.dv}, c.dtype, pad);

  RetentionForward p;
  p.q = q.device;
  p.k = k.device;
  p.v = v.device;
  p.out = out.device;
  p.decay = decay.device;
  p.mode = RetentionMode::parallel;
  p.normalize = c.normalize;
  p.scale = c.normalize ? 1.0 : 0.125;  // with normalize, row sums of |score| above the clamp at 1
  if (family != nullptr) {
    const std::string name = detail::retention_forward_plan(p, on_cuda())->config().name;
    EXPECT_NE(name.find(family), std::string::npos) << name;
  }
  retention_forward(p, on_cuda());
  expect_cuda(cudaDeviceSynchronize(), "retention_forward (decay matrix)");
  out.download();

  const Wide wq(q), wk(k), wv(v), wd(decay);
  test::HostTensor ref_out = wide_output(out);
  RetentionForward r = p;
  r.q = wq.view();
  r.k = wk.view();
  r.v = wv.view();
  r.decay = wd.view();
  r.out = ref_out.view;
  retention_forward(r, on_cpu());
  EXPECT_LE(test::relative_l2(out.host, ref_out.view), tolerance(c.dtype));
  EXPECT_FALSE(test::any_nan(out.host));
  EXPECT_TRUE(out.padding_untouched());
}

TEST_F(CudaRetention, DecayMatrixForwardMatchesCpu) {
  for (const auto& [tq, tk] : std::vector<std::pair<int64_t, int64_t> >{{65, 130}, {200, 77}, {1, 64}, {64, 1}}) {
    for (const bool normalize : {false, true}) {
      DecayCase c;
      c.tq = tq;
      c.tk = tk;
      c.normalize = normalize;
      expect_decay_matrix_forward_matches_cpu(c);
    }
  }
  DecayCase wide;
  wide.dk = 128;
  wide.dv = 128;
  wide.dtype = DType::f16;
  wide.decay_dtype = DType::f16;
  wide.shared = true;
  expect_decay_matrix_forward_matches_cpu(wide);
  DecayCase odd;
  odd.dk = 128;
  odd.layout = Layout::misaligned;
  odd.decay_dtype = DType::bf16;
  odd.normalize = true;
  expect_decay_matrix_forward_matches_cpu(odd);
}

// The Hopper decay-matrix kernel (retention_wgmma_matrix_kernel.cuh), the default on 9.0 where every operand allows
// 16-byte copies (here: packed or padded sequences, matrix rows of Tk entries a multiple of 16 bytes): Tq not a
// multiple of its 128-row query blocks, Tk not one of its 64-key blocks, every pattern (all-zero tiles skipped), both
// dtypes, the matrix in float32 or the inputs' dtype, shared or per head, each instance's (Dk, value block) and Dv in
// several value blocks, odd batch counts. wgmma=0 keeps the normalised-form kernel.
TEST_F(CudaRetention, WgmmaDecayMatrixForwardMatchesCpu) {
  if (const std::string why = wgmma_chunk_unavailable(); !why.empty()) GTEST_SKIP() << why;
  struct Shape {
    int64_t tq, tk, dk, dv;
  };
  const std::vector<Shape> shapes{{1, 8, 64, 64},      {129, 264, 128, 128}, {300, 200, 128, 64},
                                  {64, 1000, 64, 128}, {200, 136, 128, 256}, {257, 64, 64, 192}};
  int index = 0;
  for (const Shape& shape : shapes) {
    for (const DecayPattern pattern : {DecayPattern::dense, DecayPattern::causal, DecayPattern::zero_tiles}) {
      DecayCase c;
      c.tq = shape.tq;
      c.tk = shape.tk;
      c.dk = shape.dk;
      c.dv = shape.dv;
      c.pattern = pattern;
      c.batch = 1 + index % 3;
      c.dtype = index % 2 == 1 ? DType::f16 : DType::bf16;
      c.decay_dtype = index % 3 == 1 ? c.dtype : DType::f32;
      c.shared = index % 4 == 2;
      c.normalize = index % 5 >= 3;
      c.layout = index % 2 == 1 ? Layout::packed : Layout::padded;
      ++index;
      expect_decay_matrix_forward_matches_cpu(c, "wgmma_matrix");
    }
  }
  const ScopedRetentionConfig forced("wgmma=0");
  DecayCase c;
  c.tq = 129;
  c.tk = 264;
  expect_decay_matrix_forward_matches_cpu(c, "normalized_grouped");
}

// The Hopper decay-matrix kernel's clusters (batches sharing each tile of the matrix) and its grid, on the host.
TEST(CudaRetentionDecayMatrixGrid, ClustersTakeTwoBatchesOrOneAndTheGridRoundsTheBatchesUp) {
  using cuda::retention::matrix_cluster_size;
  using cuda::retention::matrix_forward_ctas;
  EXPECT_EQ(matrix_cluster_size(1), 1);
  EXPECT_EQ(matrix_cluster_size(2), 2);
  EXPECT_EQ(matrix_cluster_size(3), 2);  // one cluster computes the last batch twice
  EXPECT_EQ(matrix_cluster_size(4), 2);
  EXPECT_EQ(matrix_cluster_size(8), 2);
  // batches rounded up to the cluster x value slices x heads x 128-row query blocks
  EXPECT_EQ(matrix_forward_ctas(3, 16, 4096, 1, 2), 4 * 16 * 32);
  EXPECT_EQ(matrix_forward_ctas(8, 16, 4096, 1, 4), 8 * 16 * 32);
  EXPECT_EQ(matrix_forward_ctas(1, 5, 129, 2, 1), 1 * 2 * 5 * 2);
}

// fill_forward where the plan chose the Hopper decay-matrix kernel: that kernel for a call whose operands allow 16-byte
// copies (its clusters and grid), the normalised-form kernel for one whose matrix rows are not 16-byte aligned (Tk
// float32 entries, Tk odd) and its own grid. Host only: nothing is launched.
TEST(CudaRetentionDecayMatrixGrid, CallsWithoutSixteenByteMatrixRowsRunTheNormalisedFormKernel) {
  using namespace cuda::retention;
  const ChunkKernel* matrix_kernel = find_wgmma_matrix_kernel(DType::bf16, 128, 128);
  if (matrix_kernel == nullptr) GTEST_SKIP() << "this build has no Hopper decay-matrix kernel (no sm_90a target)";
  const ChunkKernel* fallback = find_normalized_kernel(DType::bf16, 128, kDecayMatrixMembers);
  ASSERT_NE(fallback, nullptr);
  alignas(64) static unsigned char storage[64];
  const auto forward = [&](int64_t tk) {
    RetentionForward p;
    p.q = make_view(storage, DType::bf16, {3, 300, 4, 128});
    p.k = make_view(storage, DType::bf16, {3, tk, 4, 128});
    p.v = make_view(storage, DType::bf16, {3, tk, 4, 128});
    p.out = make_view(storage, DType::bf16, {3, 300, 4, 128});
    p.decay = make_view(storage, DType::f32, {4, 300, tk});
    p.mode = RetentionMode::parallel;
    ForwardSelection selection;
    selection.job.kernel = matrix_kernel;
    selection.matrix_fallback = fallback;
    return fill_forward(p, selection, {});
  };
  const ChunkJob aligned = forward(260);
  EXPECT_STREQ(aligned.kernel->family, "wgmma_matrix");
  EXPECT_EQ(aligned.params.decay.cluster, 2);
  EXPECT_EQ(aligned.ctas, 4 * 1 * 4 * 3);  // 3 batches in clusters of 2, one value block, 4 heads, 3 query blocks
  const ChunkJob unaligned = forward(259);
  EXPECT_STREQ(unaligned.kernel->family, "normalized_grouped");
  EXPECT_EQ(unaligned.ctas, 3 * 4 * 5);  // 3 x 2 (batch, value slice) pairs two a CTA, 4 heads, 5 query blocks of 64
}

// The backward over a decay matrix on the GPU and on the CPU (float64); returns the GPU's three gradients
// (for comparing runs).
std::vector<std::vector<double> > expect_decay_matrix_backward_matches_cpu(const DecayCase& c) {
  SCOPED_TRACE("backward " + describe(c));
  const int64_t batch = c.batch, heads = c.heads;
  const std::vector<int64_t> pad = padding_for(c.layout);
  TestTensor q = input({batch, c.tq, heads, c.dk}, c.dtype, pad, 15);
  TestTensor k = input({batch, c.tk, heads, c.dk}, c.dtype, pad, 16);
  TestTensor v = input({batch, c.tk, heads, c.dv}, c.dtype, pad, 17);
  TestTensor dout = input({batch, c.tq, heads, c.dv}, c.dtype, pad, 18);
  TestTensor decay = random_decay(c, heads, 19);
  TestTensor dq = output({batch, c.tq, heads, c.dk}, c.dtype, pad);
  TestTensor dk = output({batch, c.tk, heads, c.dk}, c.dtype, pad);
  TestTensor dv = output({batch, c.tk, heads, c.dv}, c.dtype, pad);

  RetentionBackward p;
  set_backward_tensors(p, q.device, k.device, v.device, dout.device, dq.device, dk.device, dv.device);
  p.decay = decay.device;
  p.mode = RetentionMode::parallel;
  p.normalize = c.normalize;
  p.scale = c.normalize ? 1.0 : 0.125;  // with normalize, row sums of |score| above the clamp at 1
  retention_backward(p, on_cuda());
  expect_cuda(cudaDeviceSynchronize(), "retention_backward (decay matrix)");
  for (TestTensor* t : {&dq, &dk, &dv}) t->download();

  const WideBackward ref(q, k, v, dout, dq, dk, dv);
  const Wide wd(decay);
  RetentionBackward r = ref.call(p);
  r.decay = wd.view();
  retention_backward(r, on_cpu());
  expect_gradients_match(dq, dk, dv, ref, tolerance(c.dtype));
  std::vector<std::vector<double> > gradients;
  for (const TestTensor* t : {&dq, &dk, &dv}) gradients.push_back(test::to_doubles(t->host));
  return gradients;
}

TEST_F(CudaRetention, DecayMatrixBackwardMatchesCpuForTqAboveAndBelowTk) {
  for (const auto& [tq, tk] : std::vector<std::pair<int64_t, int64_t> >{{65, 130}, {200, 77}, {1, 64}, {64, 1}}) {
    for (const bool normalize : {false, true}) {
      DecayCase c;
      c.tq = tq;
      c.tk = tk;
      c.normalize = normalize;
      expect_decay_matrix_backward_matches_cpu(c);
    }
  }
}

TEST_F(CudaRetention, DecayMatrixBackwardTakesASharedOrPerHeadMatrixInEitherDtype) {
  for (const bool shared : {false, true}) {
    for (const bool matrix_in_input_dtype : {false, true}) {
      for (const DType dtype : {DType::bf16, DType::f16}) {
        DecayCase c;
        c.tq = 130;
        c.tk = 100;
        c.dk = 128;
        c.dv = 128;
        c.dtype = dtype;
        c.decay_dtype = matrix_in_input_dtype ? dtype : DType::f32;
        c.shared = shared;
        c.normalize = shared;
        expect_decay_matrix_backward_matches_cpu(c);
      }
    }
  }
}

TEST_F(CudaRetention, DecayMatrixBackwardReadsMisalignedViewsAndEachHeadDimPair) {
  for (const auto& [dk, dv] : std::vector<std::pair<int64_t, int64_t> >{{64, 128}, {128, 64}, {64, 256}}) {
    for (const bool normalize : {false, true}) {
      DecayCase c;
      c.tq = 97;
      c.tk = 70;
      c.dk = dk;
      c.dv = dv;
      c.layout = Layout::misaligned;
      c.decay_dtype = DType::bf16;
      c.normalize = normalize;
      expect_decay_matrix_backward_matches_cpu(c);
    }
  }
}

TEST_F(CudaRetention, DecayMatrixBackwardGivesTheSameBitsOnEveryRun) {
  DecayCase c;
  c.tq = 300;
  c.tk = 250;
  c.normalize = true;
  const auto first = expect_decay_matrix_backward_matches_cpu(c);
  const auto second = expect_decay_matrix_backward_matches_cpu(c);
  EXPECT_EQ(first, second) << "the backward sums in a fixed order (no atomics)";
}

// Causal matrices (zero above the diagonal: whole tiles skipped, the diagonal tiles' upper halves are zeros inside
// computed tiles) and dense ones with zero tiles and zero 16-row and 16-key strips, against the CPU: odd Tq != Tk,
// both matrix dtypes, shared and per-head, each head dim pair, normalised or not, several batches.
std::vector<DecayCase> zero_skipping_cases() {
  std::vector<DecayCase> cases;
  const std::vector<std::pair<int64_t, int64_t> > head_dims{{64, 64}, {128, 128}, {64, 128}};
  const std::vector<std::pair<int64_t, int64_t> > lengths{{77, 130}, {130, 77}, {200, 200}};
  int index = 0;
  for (const DecayPattern pattern : {DecayPattern::causal, DecayPattern::zero_tiles}) {
    for (const auto& [tq, tk] : lengths) {
      for (const auto& [dk, dv] : head_dims) {
        DecayCase c;
        c.pattern = pattern;
        c.tq = tq;
        c.tk = tk;
        c.dk = dk;
        c.dv = dv;
        c.batch = 1 + index % 3;
        c.heads = 2 + index % 2;
        c.dtype = index % 2 == 0 ? DType::bf16 : DType::f16;
        c.decay_dtype = index % 3 == 0 ? c.dtype : DType::f32;
        c.shared = index % 2 == 1;
        c.normalize = index % 4 < 2;
        cases.push_back(c);
        ++index;
      }
    }
  }
  return cases;
}

TEST_F(CudaRetention, DecayMatrixForwardSkipsZeroTilesOfCausalAndDenseMatricesWithTheCpuResult) {
  for (const DecayCase& c : zero_skipping_cases()) expect_decay_matrix_forward_matches_cpu(c);
}

TEST_F(CudaRetention, DecayMatrixBackwardSkipsZeroTilesOfCausalAndDenseMatricesWithTheCpuResult) {
  for (const DecayCase& c : zero_skipping_cases()) expect_decay_matrix_backward_matches_cpu(c);
}

// The matrix form computes kDecayMatrixMembers (batch, value slice) pairs per CTA from one staged tile, forward and
// backward (dQ and dK group the batches; dV and the forward (batch, value slice) pairs): an odd batch count with odd
// lengths leaves the last group short (3 pairs: Dv = 64, and the backward's dQ and dK), or groups pairs of different
// batches (Dv = 192: slices 0-2 of three batches, 9 pairs); Dk = Dv = 128 with a float32 matrix is the backward's
// largest grouped launch (two members' tiles and one stage of the matrix's tile, 226 KiB). Outputs poisoned, against
// the CPU.
std::vector<DecayCase> batch_grouping_cases() {
  std::vector<DecayCase> cases;
  for (const auto& [dk, dv] : std::vector<std::pair<int64_t, int64_t> >{{64, 64}, {64, 192}, {128, 128}}) {
    for (const DecayPattern pattern : {DecayPattern::causal, DecayPattern::dense}) {
      DecayCase c;
      c.batch = 3;
      c.heads = 2;
      c.tq = 131;
      c.tk = 131;
      c.dk = dk;
      c.dv = dv;
      c.pattern = pattern;
      c.shared = pattern == DecayPattern::dense;
      c.normalize = pattern == DecayPattern::causal;
      cases.push_back(c);
    }
  }
  return cases;
}

TEST_F(CudaRetention, DecayMatrixForwardGroupsBatchesOfAnOddBatchCountWithTheCpuResult) {
  for (const DecayCase& c : batch_grouping_cases()) expect_decay_matrix_forward_matches_cpu(c);
}

TEST_F(CudaRetention, DecayMatrixBackwardOfAnOddBatchCountMatchesCpu) {
  for (const DecayCase& c : batch_grouping_cases()) expect_decay_matrix_backward_matches_cpu(c);
}

// Row strides the kernels stage with 16-byte copies (Tk = 77 in rows of 80: the last chunk of a row is partly past
// Tk) and element by element (rows of 133 float32 or 16-bit entries: no multiple of 4 elements, so rows are not
// 16-byte aligned), in both matrix dtypes, causal and dense.
std::vector<DecayCase> strided_matrix_cases() {
  std::vector<DecayCase> cases;
  int index = 0;
  for (const auto& [tk, padding] : std::vector<std::pair<int64_t, int64_t> >{{77, 3}, {130, 3}}) {
    for (const bool f32 : {true, false}) {
      for (const DecayPattern pattern : {DecayPattern::dense, DecayPattern::causal}) {
        DecayCase c;
        c.tq = 130;
        c.tk = tk;
        c.row_padding = padding;
        c.decay_dtype = f32 ? DType::f32 : c.dtype;
        c.pattern = pattern;
        c.batch = 3;
        c.dk = index % 2 == 0 ? 64 : 128;
        c.dv = 128;
        c.normalize = index % 3 == 0;
        cases.push_back(c);
        ++index;
      }
    }
  }
  return cases;
}

TEST_F(CudaRetention, DecayMatrixForwardReadsRowStridesThatAreNoMultipleOfFourElements) {
  for (const DecayCase& c : strided_matrix_cases()) expect_decay_matrix_forward_matches_cpu(c);
}

TEST_F(CudaRetention, DecayMatrixBackwardReadsRowStridesThatAreNoMultipleOfFourElements) {
  for (const DecayCase& c : strided_matrix_cases()) expect_decay_matrix_backward_matches_cpu(c);
}

// A matrix of zeros: every tile is skipped, and every output and gradient is still written, as exact zeros.
TEST_F(CudaRetention, DecayMatrixOfZerosWritesZeroOutputsAndGradients) {
  for (const bool normalize : {false, true}) {
    DecayCase c;
    c.tq = 77;
    c.tk = 130;
    c.batch = 2;
    c.normalize = normalize;
    SCOPED_TRACE(describe(c));
    const std::vector<int64_t> pad = padding_for(c.layout);
    TestTensor q = input({c.batch, c.tq, c.heads, c.dk}, c.dtype, pad, 31);
    TestTensor k = input({c.batch, c.tk, c.heads, c.dk}, c.dtype, pad, 32);
    TestTensor v = input({c.batch, c.tk, c.heads, c.dv}, c.dtype, pad, 33);
    TestTensor dout = input({c.batch, c.tq, c.heads, c.dv}, c.dtype, pad, 34);
    TestTensor decay = TestTensor::make(DType::f32, {c.heads, c.tq, c.tk}, {0, 0, 0});
    test::poison_nan(decay.buffer.view);
    for (int64_t i = 0; i < c.heads * c.tq * c.tk; ++i) detail::store_from_double(decay.host.data, DType::f32, i, 0.0);
    decay.upload();
    TestTensor out = output({c.batch, c.tq, c.heads, c.dv}, c.dtype, pad);
    TestTensor dq = output({c.batch, c.tq, c.heads, c.dk}, c.dtype, pad);
    TestTensor dk = output({c.batch, c.tk, c.heads, c.dk}, c.dtype, pad);
    TestTensor dv = output({c.batch, c.tk, c.heads, c.dv}, c.dtype, pad);

    RetentionForward forward;
    forward.q = q.device;
    forward.k = k.device;
    forward.v = v.device;
    forward.out = out.device;
    forward.decay = decay.device;
    forward.mode = RetentionMode::parallel;
    forward.normalize = normalize;
    retention_forward(forward, on_cuda());
    RetentionBackward backward;
    set_backward_tensors(backward, q.device, k.device, v.device, dout.device, dq.device, dk.device, dv.device);
    backward.decay = decay.device;
    backward.mode = RetentionMode::parallel;
    backward.normalize = normalize;
    retention_backward(backward, on_cuda());
    expect_cuda(cudaDeviceSynchronize(), "retention (a decay matrix of zeros)");
    for (TestTensor* t : {&out, &dq, &dk, &dv}) {
      t->download();
      for (const double value : test::to_doubles(t->host)) {
        ASSERT_EQ(value, 0.0);
      }
      EXPECT_TRUE(t->padding_untouched());
    }
  }
}

// Dv = 320 runs the parallel forward (any multiple of 64) but not its backward (dO and V tiles in shared memory).
TEST_F(CudaRetention, ParallelBackwardBeyondItsValueDimIsRefusedNamingTheAllowedOnes) {
  const std::vector<int64_t> pad{0, 0, 0, 0};
  TestTensor q = input({1, 70, 2, 64}, DType::bf16, pad, 1);
  TestTensor v = input({1, 70, 2, 320}, DType::bf16, pad, 2);
  TestTensor dq = output({1, 70, 2, 64}, DType::bf16, pad);
  TestTensor dk = output({1, 70, 2, 64}, DType::bf16, pad);
  TestTensor dv = output({1, 70, 2, 320}, DType::bf16, pad);
  RetentionBackward p;
  set_backward_tensors(p, q.device, q.device, v.device, v.device, dq.device, dk.device, dv.device);
  p.mode = RetentionMode::parallel;
  p.normalize = true;
  try {
    retention_backward(p, on_cuda());
    ADD_FAILURE() << "expected Status::unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::unsupported);
    EXPECT_NE(std::string(e.what()).find("a multiple of 64 up to 256"), std::string::npos) << e.what();
  }
  dq.download();
  EXPECT_TRUE(test::any_nan(dq.host)) << "nothing is written when the call is refused";
}

TEST_F(CudaRetention, DecayMatrixBackwardWithAnUnsupportedHeadDimIsRefusedNamingTheAllowedOnes) {
  const std::vector<int64_t> pad{0, 0, 0, 0};
  TestTensor q = input({1, 70, 2, 32}, DType::bf16, pad, 1);
  TestTensor v = input({1, 70, 2, 64}, DType::bf16, pad, 2);
  TestTensor decay = input({1, 70, 70}, DType::f32, {0, 0, 0}, 3);
  TestTensor dq = output({1, 70, 2, 32}, DType::bf16, pad);
  TestTensor dk = output({1, 70, 2, 32}, DType::bf16, pad);
  TestTensor dv = output({1, 70, 2, 64}, DType::bf16, pad);
  RetentionBackward p;
  set_backward_tensors(p, q.device, q.device, v.device, v.device, dq.device, dk.device, dv.device);
  p.mode = RetentionMode::parallel;
  p.decay = decay.device;
  try {
    retention_backward(p, on_cuda());
    ADD_FAILURE() << "expected Status::unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::unsupported);
    EXPECT_NE(std::string(e.what()).find("64, 128"), std::string::npos) << e.what();
  }
  dq.download();
  EXPECT_TRUE(test::any_nan(dq.host)) << "nothing is written when the call is refused";
}

TEST_F(CudaRetention, UnsupportedHeadDimIsRefusedNamingTheAllowedOnes) {
  Case c;
  c.dk = 32;
  const std::string message = unsupported_message(c);
  EXPECT_NE(message.find("64, 128"), std::string::npos) << message;
}

#endif

}  // namespace
}  // namespace attnkit
