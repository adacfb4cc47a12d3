// The portable fused-attention forward on the GPU (src/cuda/fmha), checked against the CPU oracle
// through the public API: the same inputs (fp16/bf16 values, widened to fp32 for the oracle, same
// strides) run once with Backend::cuda on device copies and once with Backend::cpu on host copies.
// Every case: fresh random inputs, outputs poisoned with NaN and checked fully written (and nothing
// written outside the view), odd extents, relative L2 error within DESIGN §5 (fp16 <= 5e-3,
// bf16 <= 1.5e-2), LSE equal (-inf for rows without keys). Cases whose head dim is not compiled in
// this build's kernel set are skipped with a message. Without CUDA (or a GPU) every test skips.
//
// CudaFmhaTiming.* (disabled by default; run with --gtest_also_run_disabled_tests) prints TF/s of a
// few representative shapes, counting only attended (query, key) pairs: 4 * pairs * D per head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "core/float_convert.hpp"
#include "core/neighborhood_window.hpp"
#include "test_support.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "cuda/fmha/fmha_configs.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(CudaFmhaForward, SkipsWithoutCuda) {
  GTEST_SKIP() << "no CUDA device: this build has no CUDA backend (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

// --- device memory and tensors -----------------------------------------------------------------

void expect_cuda(cudaError_t status, const char* what) {
  ASSERT_EQ(status, cudaSuccess) << what << ": " << cudaGetErrorString(status);
}

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) {
    if (cudaMalloc(&data_, std::max<std::size_t>(bytes, 16)) != cudaSuccess) data_ = nullptr;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_) { other.data_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
};

// A logical view into a padded, 16-byte aligned buffer, on the host and on the device. Padding keeps
// every stride a multiple of 8 elements when the padded extents are; the view starts at the buffer start.
struct TestTensor {
  test::HostTensor buffer;  // the whole padded buffer (contiguous)
  TensorView host;          // the logical view into buffer
  DeviceBuffer device_memory;
  TensorView device;
  std::size_t bytes = 0;

  static TestTensor make(DType dtype, const std::vector<int64_t>& extents, const std::vector<int64_t>& padding) {
    TestTensor t;
    std::vector<int64_t> padded = extents;
    for (std::size_t d = 0; d < extents.size(); ++d) padded[d] += padding[d];
    t.buffer = test::HostTensor::contiguous(dtype, padded);
    t.host = t.buffer.view;
    for (std::size_t d = 0; d < extents.size(); ++d) t.host.extents[d] = extents[d];
    t.bytes = t.buffer.storage.size();
    t.device_memory = DeviceBuffer(t.bytes);
    t.device = t.host;
    t.device.data = t.device_memory.data();
    t.device.device = Device{DeviceType::cuda, 0};
    return t;
  }
  void upload() const {
    expect_cuda(cudaMemcpy(device.data, buffer.view.data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  void download() {
    expect_cuda(cudaMemcpy(buffer.view.data, device.data, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }
  // Every element of the buffer outside the view (padding) is still NaN.
  bool padding_untouched() const {
    std::vector<char> in_view(static_cast<std::size_t>(buffer.view.numel()), 0);
    test::for_each_offset(host, [&](int64_t off) { in_view[static_cast<std::size_t>(off)] = 1; });
    for (std::size_t i = 0; i < in_view.size(); ++i) {
      if (!in_view[i] &&
          !std::isnan(detail::load_as_double(buffer.view.data, buffer.view.dtype, static_cast<int64_t>(i)))) {
        return false;
      }
    }
    return true;
  }
};

// An fp32 copy of a host tensor's whole buffer with the same strides (the oracle's input).
test::HostTensor widen_to_f32(const TestTensor& t, TensorView& view) {
  const TensorView& whole = t.buffer.view;
  std::vector<int64_t> extents(whole.extents.begin(), whole.extents.begin() + whole.rank);
  test::HostTensor wide = test::HostTensor::contiguous(DType::f32, extents);
  auto* out = static_cast<float*>(wide.view.data);
  for (int64_t i = 0; i < whole.numel(); ++i)
    out[i] = static_cast<float>(detail::load_as_double(whole.data, whole.dtype, i));
  view = t.host;
  view.dtype = DType::f32;
  view.data = wide.view.data;
  return wide;
}

bool cuda_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

// --- one case: problem description, run on both backends, compare ---------------------------

enum class Layout { contiguous, padded_heads, noncollapsible_tokens };

struct Case {
  DType dtype = DType::f16;
  int64_t batch = 2;
  std::vector<int64_t> tokens_q{77};
  std::vector<int64_t> tokens_kv{131};
  int64_t heads_q = 4;
  int64_t heads_kv = 2;
  int64_t head_dim = 64;
  int64_t head_dim_v = 64;
  bool with_lse = true;
  std::optional<double> scale;
  Layout layout = Layout::contiguous;
  AttentionMask mask{};
  // Block / element masks: generated by the harness.
  int64_t mask_batch = 1;
  int64_t mask_heads = 1;
  double mask_density = 0.5;
  int64_t empty_rows_every = 0;  // element masks: every n-th query row attends nothing
  bool use_stream = false;
};

double tolerance(DType dtype) { return dtype == DType::f16 ? 5e-3 : 1.5e-2; }

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

std::vector<int64_t> concat(int64_t b, const std::vector<int64_t>& tokens, std::vector<int64_t> tail) {
  std::vector<int64_t> e{b};
  e.insert(e.end(), tokens.begin(), tokens.end());
  e.insert(e.end(), tail.begin(), tail.end());
  return e;
}

std::vector<int64_t> padding_for(Layout layout, std::size_t rank, std::size_t token_dims, bool has_head_dim) {
  std::vector<int64_t> pad(rank, 0);
  if (layout == Layout::padded_heads && has_head_dim) pad[rank - 1] = 8;
  if (layout == Layout::noncollapsible_tokens && token_dims >= 2) pad[1 + token_dims - 1] = 1;
  return pad;
}

bool compiled_for(const Case& c) { return cuda::fmha::fmha_compiled_width(c.dtype, c.head_dim, c.head_dim_v) != 0; }

struct CaseResult {
  double out_error = 0;
  double lse_error = 0;
};

CaseResult run_case(const Case& c, uint64_t seed) {
  CaseResult result;
  std::mt19937_64 rng(seed);
  const std::size_t tq = c.tokens_q.size();
  const std::size_t tk = c.tokens_kv.size();
  TestTensor q = TestTensor::make(c.dtype, concat(c.batch, c.tokens_q, {c.heads_q, c.head_dim}),
                                  padding_for(c.layout, tq + 3, tq, true));
  TestTensor k = TestTensor::make(c.dtype, concat(c.batch, c.tokens_kv, {c.heads_kv, c.head_dim}),
                                  padding_for(c.layout, tk + 3, tk, true));
  TestTensor v = TestTensor::make(c.dtype, concat(c.batch, c.tokens_kv, {c.heads_kv, c.head_dim_v}),
                                  padding_for(c.layout, tk + 3, tk, true));
  TestTensor out = TestTensor::make(c.dtype, concat(c.batch, c.tokens_q, {c.heads_q, c.head_dim_v}),
                                    padding_for(c.layout, tq + 3, tq, true));
  std::optional<TestTensor> lse;
  if (c.with_lse) {
    lse = TestTensor::make(DType::f32, concat(c.batch, c.tokens_q, {c.heads_q}),
                           padding_for(c.layout, tq + 2, tq, false));
  }
  test::fill_random(q.buffer.view, rng, -2.0, 2.0);
  test::fill_random(k.buffer.view, rng, -2.0, 2.0);
  test::fill_random(v.buffer.view, rng, -1.0, 1.0);
  test::poison_nan(out.buffer.view);
  if (lse) test::poison_nan(lse->buffer.view);
  q.upload();
  k.upload();
  v.upload();
  out.upload();
  if (lse) lse->upload();

  // Masks that live in memory.
  AttentionMask mask = c.mask;
  std::optional<TestTensor> mask_tensor;
  const int64_t seq_q = product(c.tokens_q);
  const int64_t seq_k = product(c.tokens_kv);
  if (mask.kind == MaskKind::block) {
    const int64_t rows = (seq_q + mask.block_q - 1) / mask.block_q;
    const int64_t cols = (seq_k + mask.block_k - 1) / mask.block_k;
    mask_tensor = TestTensor::make(DType::boolean, {c.mask_batch, c.mask_heads, rows, cols}, {0, 0, 0, 0});
    test::fill_random_bool(mask_tensor->host, rng, c.mask_density);
  } else if (mask.kind == MaskKind::element) {
    mask_tensor = TestTensor::make(DType::boolean, {c.mask_batch, c.mask_heads, seq_q, seq_k}, {0, 0, 0, 0});
    test::fill_random_bool(mask_tensor->host, rng, c.mask_density);
    if (c.empty_rows_every > 0) {
      auto* m = static_cast<bool*>(mask_tensor->host.data);
      for (int64_t bh = 0; bh < c.mask_batch * c.mask_heads; ++bh) {
        for (int64_t r = 0; r < seq_q; r += c.empty_rows_every) std::fill_n(m + (bh * seq_q + r) * seq_k, seq_k, false);
      }
    }
  }
  if (mask_tensor) mask_tensor->upload();

  // GPU run.
  AttentionForward gpu;
  gpu.q = q.device;
  gpu.k = k.device;
  gpu.v = v.device;
  gpu.out = out.device;
  if (lse) gpu.lse = lse->device;
  gpu.scale = c.scale;
  gpu.mask = mask;
  if (mask.kind == MaskKind::block) gpu.mask.block_mask = mask_tensor->device;
  if (mask.kind == MaskKind::element) gpu.mask.element_mask = mask_tensor->device;
  RunOptions options;
  options.backend = Backend::cuda;
  cudaStream_t stream = nullptr;
  if (c.use_stream) {
    expect_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    options.stream = stream;
  }
  attention_forward(gpu, options);
  expect_cuda(c.use_stream ? cudaStreamSynchronize(stream) : cudaDeviceSynchronize(), "synchronize");
  if (stream != nullptr) cudaStreamDestroy(stream);
  out.download();
  if (lse) lse->download();

  // CPU oracle on fp32 copies of the same values.
  AttentionForward cpu;
  const test::HostTensor q32 = widen_to_f32(q, cpu.q);
  const test::HostTensor k32 = widen_to_f32(k, cpu.k);
  const test::HostTensor v32 = widen_to_f32(v, cpu.v);
  TestTensor out_ref = TestTensor::make(DType::f32, concat(c.batch, c.tokens_q, {c.heads_q, c.head_dim_v}),
                                        padding_for(c.layout, tq + 3, tq, true));
  cpu.out = out_ref.host;
  std::optional<TestTensor> lse_ref;
  if (lse) {
    lse_ref = TestTensor::make(DType::f32, concat(c.batch, c.tokens_q, {c.heads_q}),
                               padding_for(c.layout, tq + 2, tq, false));
    cpu.lse = lse_ref->host;
  }
  cpu.scale = c.scale;
  cpu.mask = mask;
  if (mask.kind == MaskKind::block) cpu.mask.block_mask = mask_tensor->host;
  if (mask.kind == MaskKind::element) cpu.mask.element_mask = mask_tensor->host;
  attention_forward(cpu, RunOptions{Backend::cpu, nullptr, 0});

  EXPECT_FALSE(test::any_nan(out.host)) << "out not fully written (NaN poison left) or NaN produced";
  EXPECT_TRUE(out.padding_untouched()) << "out: elements outside the view were written";
  result.out_error = test::relative_l2(out.host, out_ref.host);
  EXPECT_LE(result.out_error, tolerance(c.dtype)) << "out relative L2 error vs the CPU oracle";
  if (lse) {
    EXPECT_FALSE(test::any_nan(lse->host)) << "lse not fully written";
    EXPECT_TRUE(lse->padding_untouched()) << "lse: elements outside the view were written";
    result.lse_error = test::max_abs_difference(lse->host, lse_ref->host);
    EXPECT_LE(result.lse_error, 2e-3) << "lse max abs difference vs the CPU oracle (-inf rows must match exactly)";
  }
  std::printf("    [%s] out rel-L2 %.3e, lse max-abs %.3e\n", std::string(dtype_name(c.dtype)).c_str(),
              result.out_error, result.lse_error);
  return result;
}

class CudaFmhaForward : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount found none";
  }
  // Runs the case for fp16 and bf16 (those compiled), each with fresh inputs.
  void run_both_dtypes(Case c, uint64_t seed) {
    bool any = false;
    for (DType dtype : {DType::f16, DType::bf16}) {
      c.dtype = dtype;
      if (!compiled_for(c)) continue;
      any = true;
      SCOPED_TRACE(std::string(dtype_name(dtype)));
      run_case(c, seed++);
    }
    if (!any) {
      GTEST_SKIP() << "not compiled in this kernel set: head dims " << c.head_dim << "/" << c.head_dim_v
                   << "; compiled: " << cuda::fmha::fmha_compiled_summary();
    }
  }
};

NeighborhoodDim nd(int64_t kernel, int64_t dilation = 1, int64_t stride = 1, bool causal = false) {
  return NeighborhoodDim{kernel, dilation, stride, causal};
}

AttentionMask neighborhood(std::initializer_list<NeighborhoodDim> dims) {
  AttentionMask m;
  m.kind = MaskKind::neighborhood;
  m.dims = static_cast<int32_t>(dims.size());
  int d = 0;
  for (const auto& x : dims) m.neighborhood[d++] = x;
  return m;
}

// --- dense -------------------------------------------------------------------------------------

TEST_F(CudaFmhaForward, DenseMatchesOracleAtOddExtents) {
  Case c;
  run_both_dtypes(c, 100);
}

TEST_F(CudaFmhaForward, DenseHeadDim128MatchesOracle) {
  Case c;
  c.head_dim = c.head_dim_v = 128;
  c.tokens_q = {200};
  c.tokens_kv = {129};
  run_both_dtypes(c, 110);
}

TEST_F(CudaFmhaForward, HeadDimBetweenCompiledWidthsIsZeroPadded) {
  Case c;
  c.head_dim = c.head_dim_v = 40;  // served by the 64-wide kernel
  run_both_dtypes(c, 120);
}

TEST_F(CudaFmhaForward, ValueHeadDimMayDifferFromQueryHeadDim) {
  Case c;
  c.head_dim = 128;
  c.head_dim_v = 64;
  run_both_dtypes(c, 130);
  c.head_dim = 48;
  c.head_dim_v = 96;
  run_both_dtypes(c, 135);
}

TEST_F(CudaFmhaForward, HeadDim32KernelsMatchOracle) {
  Case c;
  c.head_dim = c.head_dim_v = 32;
  run_both_dtypes(c, 142);
  c.mask = causal_mask(CausalAlignment::bottom_right);
  run_both_dtypes(c, 143);
  c.tokens_q = c.tokens_kv = {12, 17};
  c.mask = neighborhood({nd(5, 2), nd(7, 1, 3, true)});
  run_both_dtypes(c, 144);
}

TEST_F(CudaFmhaForward, HeadDim256KernelsMatchOracle) {
  Case c;
  c.head_dim = c.head_dim_v = 256;
  run_both_dtypes(c, 145);
  c.head_dim = 160;  // served by the 256-wide kernel
  c.mask = causal_mask();
  run_both_dtypes(c, 146);
  c.head_dim = 256;
  c.head_dim_v = 64;
  c.tokens_q = {150};
  c.tokens_kv = {201};
  c.mask = element_sparse_mask(TensorView{});
  c.mask_density = 0.3;
  run_both_dtypes(c, 147);
  c.head_dim_v = 256;
  c.tokens_q = c.tokens_kv = {6, 9, 10};
  c.mask = neighborhood({nd(3, 1, 1, true), nd(5, 1, 2, false), nd(3, 3, 1, false)});
  run_both_dtypes(c, 148);
}

TEST_F(CudaFmhaForward, SingleTokenSequences) {
  Case c;
  c.tokens_q = {1};
  c.tokens_kv = {1};
  c.batch = 3;
  run_both_dtypes(c, 140);
}

TEST_F(CudaFmhaForward, GroupedQueryAndMultiQueryHeads) {
  Case c;
  c.heads_q = 6;
  c.heads_kv = 2;
  run_both_dtypes(c, 150);
  c.heads_kv = 1;
  run_both_dtypes(c, 155);
}

TEST_F(CudaFmhaForward, StridedViewsWithPaddedHeads) {
  Case c;
  c.layout = Layout::padded_heads;
  run_both_dtypes(c, 160);
}

TEST_F(CudaFmhaForward, WithoutLseOnlyOutIsWritten) {
  Case c;
  c.with_lse = false;
  run_both_dtypes(c, 170);
}

TEST_F(CudaFmhaForward, CustomScale) {
  Case c;
  c.scale = 0.37;
  run_both_dtypes(c, 180);
}

TEST_F(CudaFmhaForward, RunsOnTheCallersStream) {
  Case c;
  c.use_stream = true;
  run_both_dtypes(c, 190);
}

TEST_F(CudaFmhaForward, MultiDimTokensDenseCrossAttention) {
  Case c;
  c.tokens_q = {7, 11};
  c.tokens_kv = {90};
  run_both_dtypes(c, 200);
}

// --- causal ------------------------------------------------------------------------------------

TEST_F(CudaFmhaForward, CausalTopLeftWithDifferentLengths) {
  Case c;
  c.mask = causal_mask(CausalAlignment::top_left);
  c.tokens_q = {100};
  c.tokens_kv = {157};
  run_both_dtypes(c, 300);
  c.tokens_q = {157};
  c.tokens_kv = {100};
  run_both_dtypes(c, 305);
}

TEST_F(CudaFmhaForward, CausalBottomRightRowsWithoutKeysGiveZeroAndMinusInfLse) {
  Case c;
  c.mask = causal_mask(CausalAlignment::bottom_right);
  c.tokens_q = {150};
  c.tokens_kv = {60};  // queries 0..89 see no key
  run_both_dtypes(c, 310);
  c.tokens_q = {70};
  c.tokens_kv = {200};
  run_both_dtypes(c, 315);
}

TEST_F(CudaFmhaForward, CausalOverMultiDimTokensWithNonCollapsibleStrides) {
  Case c;
  c.mask = causal_mask();
  c.tokens_q = {9, 13};
  c.tokens_kv = {9, 13};
  c.layout = Layout::noncollapsible_tokens;
  run_both_dtypes(c, 320);
}

// --- neighborhood ------------------------------------------------------------------------------

TEST_F(CudaFmhaForward, Neighborhood1DWithDilationStrideAndCausal) {
  Case c;
  c.tokens_q = c.tokens_kv = {300};
  c.mask = neighborhood({nd(31, 3, 2, true)});
  run_both_dtypes(c, 400);
  c.mask = neighborhood({nd(17, 2, 5, false)});
  run_both_dtypes(c, 405);
}

TEST_F(CudaFmhaForward, Neighborhood2DMixedPerDimensionSettings) {
  Case c;
  c.tokens_q = c.tokens_kv = {13, 19};
  c.mask = neighborhood({nd(5, 2, 1, false), nd(7, 1, 2, true)});
  run_both_dtypes(c, 410);
}

TEST_F(CudaFmhaForward, Neighborhood2DLargeWindowOnStridedViews) {
  Case c;
  c.tokens_q = c.tokens_kv = {33, 29};
  c.heads_q = 2;
  c.heads_kv = 1;
  c.layout = Layout::noncollapsible_tokens;
  c.mask = neighborhood({nd(15), nd(13, 2)});
  run_both_dtypes(c, 420);
}

TEST_F(CudaFmhaForward, Neighborhood3DMixedPerDimensionSettings) {
  Case c;
  c.tokens_q = c.tokens_kv = {6, 9, 10};
  c.mask = neighborhood({nd(3, 1, 1, true), nd(5, 1, 2, false), nd(3, 3, 1, false)});
  run_both_dtypes(c, 430);
}

TEST_F(CudaFmhaForward, NeighborhoodWindowEqualToExtentIsDense) {
  Case c;
  c.tokens_q = c.tokens_kv = {11, 12};
  c.mask = neighborhood({nd(11), nd(12)});
  run_both_dtypes(c, 440);
}

// --- block and element masks -------------------------------------------------------------------

TEST_F(CudaFmhaForward, BlockMaskWithTileAlignedBlocks) {
  Case c;
  c.tokens_q = {300};
  c.tokens_kv = {333};
  c.mask = block_sparse_mask(TensorView{}, 128, 64);
  c.mask_batch = 1;
  c.mask_heads = 1;
  run_both_dtypes(c, 500);
}

TEST_F(CudaFmhaForward, BlockMaskWithUnalignedBlocksPerHead) {
  Case c;
  c.tokens_q = {300};
  c.tokens_kv = {333};
  c.mask = block_sparse_mask(TensorView{}, 48, 80);
  c.mask_batch = 2;
  c.mask_heads = 4;
  c.mask_density = 0.4;
  run_both_dtypes(c, 510);
}

TEST_F(CudaFmhaForward, ElementMaskWithEmptyRows) {
  Case c;
  c.tokens_q = {150};
  c.tokens_kv = {201};
  c.mask = element_sparse_mask(TensorView{});
  c.mask_batch = 2;
  c.mask_heads = 1;
  c.mask_density = 0.3;
  c.empty_rows_every = 7;
  run_both_dtypes(c, 520);
}

TEST_F(CudaFmhaForward, ElementMaskSparseAndDense) {
  Case c;
  c.tokens_q = {260};
  c.tokens_kv = {190};
  c.mask = element_sparse_mask(TensorView{});
  c.mask_heads = 4;
  c.mask_density = 0.02;
  run_both_dtypes(c, 530);
  c.mask_density = 1.0;  // all true: every tile full except the sequence end
  run_both_dtypes(c, 535);
}

// --- what the CUDA kernels refuse --------------------------------------------------------------

Status status_of_run(const Case& c, std::string* message) {
  TestTensor q = TestTensor::make(c.dtype, concat(c.batch, c.tokens_q, {c.heads_q, c.head_dim}), {0, 0, 0, 0});
  TestTensor k = TestTensor::make(c.dtype, concat(c.batch, c.tokens_kv, {c.heads_kv, c.head_dim}), {0, 0, 0, 0});
  TestTensor v = TestTensor::make(c.dtype, concat(c.batch, c.tokens_kv, {c.heads_kv, c.head_dim_v}),
                                  {0, 0, 0, c.layout == Layout::padded_heads ? 4 : 0});
  TestTensor out = TestTensor::make(c.dtype, concat(c.batch, c.tokens_q, {c.heads_q, c.head_dim_v}), {0, 0, 0, 0});
  AttentionForward p;
  p.q = q.device;
  p.k = k.device;
  p.v = v.device;
  p.out = out.device;
  try {
    attention_forward(p, RunOptions{Backend::cuda, nullptr, 0});
  } catch (const Error& e) {
    *message = e.what();
    return e.status();
  }
  return Status::ok;
}

TEST_F(CudaFmhaForward, RefusesFloat32NamingTheSupportedDtypes) {
  Case c;
  c.dtype = DType::f32;
  std::string message;
  EXPECT_EQ(status_of_run(c, &message), Status::unsupported);
  EXPECT_NE(message.find("q.dtype: float32"), std::string::npos) << message;
  EXPECT_NE(message.find("allowed: float16, bfloat16"), std::string::npos) << message;
}

TEST_F(CudaFmhaForward, RefusesHeadDimNotMultipleOf8) {
  Case c;
  c.head_dim = c.head_dim_v = 12;
  std::string message;
  EXPECT_EQ(status_of_run(c, &message), Status::unsupported);
  EXPECT_NE(message.find("12"), std::string::npos) << message;
  EXPECT_NE(message.find("multiple of 8"), std::string::npos) << message;
}

TEST_F(CudaFmhaForward, RefusesStridesThatAreNotMultiplesOf8) {
  Case c;
  c.layout = Layout::padded_heads;  // v's rows padded by 4 elements: strides 68, not a multiple of 8
  std::string message;
  EXPECT_EQ(status_of_run(c, &message), Status::unsupported);
  EXPECT_NE(message.find("v.strides"), std::string::npos) << message;
}

// --- timing (disabled by default) --------------------------------------------------------------

struct TimingShape {
  std::string name;
  DType dtype;
  int64_t batch;
  std::vector<int64_t> tokens;
  int64_t heads;
  int64_t head_dim;
  AttentionMask mask;
  double block_density = 0;  // block masks
};

// Attended (query, key) pairs of one (batch, head).
double attended_pairs(const TimingShape& s, const std::vector<char>& blocks) {
  const double seq = static_cast<double>(product(s.tokens));
  switch (s.mask.kind) {
    case MaskKind::none: return seq * seq;
    case MaskKind::causal: return seq * (seq + 1) / 2;
    case MaskKind::neighborhood: {
      double pairs = 1;
      for (std::size_t d = 0; d < s.tokens.size(); ++d) {
        const auto& n = s.mask.neighborhood[d];
        double sum = 0;
        for (int64_t x = 0; x < s.tokens[d]; ++x) {
          const auto w =
              detail::neighborhood_window_of_coordinate(x, s.tokens[d], n.kernel_size, n.dilation, n.stride, n.causal);
          sum += static_cast<double>(w.indices.end - w.indices.begin);
        }
        pairs *= sum;
      }
      return pairs;
    }
    case MaskKind::block: {
      double count = 0;
      for (char b : blocks) count += b ? 1 : 0;
      return count * static_cast<double>(s.mask.block_q * s.mask.block_k);
    }
    default: return 0;
  }
}

void time_shape(const TimingShape& s) {
  AttentionForward p;
  TestTensor q = TestTensor::make(s.dtype, concat(s.batch, s.tokens, {s.heads, s.head_dim}),
                                  std::vector<int64_t>(s.tokens.size() + 3, 0));
  TestTensor k = TestTensor::make(s.dtype, concat(s.batch, s.tokens, {s.heads, s.head_dim}),
                                  std::vector<int64_t>(s.tokens.size() + 3, 0));
  TestTensor v = TestTensor::make(s.dtype, concat(s.batch, s.tokens, {s.heads, s.head_dim}),
                                  std::vector<int64_t>(s.tokens.size() + 3, 0));
  TestTensor out = TestTensor::make(s.dtype, concat(s.batch, s.tokens, {s.heads, s.head_dim}),
                                    std::vector<int64_t>(s.tokens.size() + 3, 0));
  TestTensor lse =
      TestTensor::make(DType::f32, concat(s.batch, s.tokens, {s.heads}), std::vector<int64_t>(s.tokens.size() + 2, 0));
  std::mt19937_64 rng(7);
  for (TestTensor* t : {&q, &k, &v}) {
    test::fill_random(t->buffer.view, rng, -2.0, 2.0);
    t->upload();
  }
  p.q = q.device;
  p.k = k.device;
  p.v = v.device;
  p.out = out.device;
  p.lse = lse.device;
  p.mask = s.mask;
  std::optional<TestTensor> blocks;
  std::vector<char> block_values;
  if (s.mask.kind == MaskKind::block) {
    const int64_t seq = product(s.tokens);
    const int64_t rows = (seq + s.mask.block_q - 1) / s.mask.block_q;
    const int64_t cols = (seq + s.mask.block_k - 1) / s.mask.block_k;
    blocks = TestTensor::make(DType::boolean, {1, 1, rows, cols}, {0, 0, 0, 0});
    test::fill_random_bool(blocks->host, rng, s.block_density);
    const bool* b = static_cast<const bool*>(blocks->host.data);
    block_values.assign(b, b + rows * cols);
    blocks->upload();
    p.mask.block_mask = blocks->device;
  }
  const RunOptions options{Backend::cuda, nullptr, 0};
  for (int i = 0; i < 3; ++i) attention_forward(p, options);
  expect_cuda(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    cudaEventRecord(start);
    attention_forward(p, options);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  expect_cuda(cudaGetLastError(), "timed runs");
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  const double flops =
      4.0 * static_cast<double>(s.batch * s.heads) * attended_pairs(s, block_values) * static_cast<double>(s.head_dim);
  std::printf("TIMING %-34s %-9s median %8.3f ms  min %8.3f ms  %7.1f TF/s\n", s.name.c_str(),
              std::string(dtype_name(s.dtype)).c_str(), median, static_cast<double>(ms.front()),
              flops / (median * 1e-3) / 1e12);
}

class CudaFmhaTiming : public CudaFmhaForward {};

TEST_F(CudaFmhaTiming, DISABLED_RepresentativeShapes) {
  std::vector<TimingShape> shapes;
  for (DType dtype : {DType::bf16, DType::f16}) {
    shapes.push_back({"dense b2 h16 s8192 d128", dtype, 2, {8192}, 16, 128, AttentionMask{}});
    shapes.push_back({"causal b2 h16 s8192 d128", dtype, 2, {8192}, 16, 128, causal_mask()});
  }
  shapes.push_back({"dense b4 h16 s4096 d64", DType::bf16, 4, {4096}, 16, 64, AttentionMask{}});
  shapes.push_back({"na1d s32768 k2047 h16 d128", DType::bf16, 1, {32768}, 16, 128, neighborhood({nd(2047)})});
  shapes.push_back(
      {"na2d 128x128 k31 b1 h16 d128", DType::bf16, 1, {128, 128}, 16, 128, neighborhood({nd(31), nd(31)})});
  shapes.push_back({"na2d 128x128 k31 b1 h16 d64", DType::bf16, 1, {128, 128}, 16, 64, neighborhood({nd(31), nd(31)})});
  shapes.push_back({"na3d 16x64x64 k7x15x15 h16 d128",
                    DType::bf16,
                    1,
                    {16, 64, 64},
                    16,
                    128,
                    neighborhood({nd(7), nd(15), nd(15)})});
  shapes.push_back({"block 50% s16384 b128 h16 d128",
                    DType::bf16,
                    1,
                    {16384},
                    16,
                    128,
                    block_sparse_mask(TensorView{}, 128, 128),
                    0.5});
  for (const auto& s : shapes) {
    if (cuda::fmha::fmha_compiled_width(s.dtype, s.head_dim, s.head_dim) == 0) continue;
    time_shape(s);
  }
}

#endif  // ATTNKIT_WITH_CUDA

}  // namespace
}  // namespace attnkit
