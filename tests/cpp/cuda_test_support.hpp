// Device-side helpers of the CUDA test suites: device buffers, padded host/device tensor pairs whose
// padding must stay NaN, fp32 copies for the CPU oracle, and whether a GPU is present. Only in builds
// with CUDA.
#pragma once
#if defined(ATTNKIT_WITH_CUDA)
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/tensor.hpp"
#include "core/attention_plan.hpp"
#include "core/float_convert.hpp"
#include "core/neighborhood_window.hpp"
#include "cuda/common/tile_range.hpp"
#include "cuda/fmha_sm90/fmha_sm90_heads_per_cta.hpp"
#include "test_support.hpp"

namespace attnkit::test {

// Sets environment variable `name` (e.g. ATTNKIT_FMHA_CONFIG, which forces a registry entry) for the
// lifetime of the object. Plans read those variables when they are made, so the cached plans are
// dropped on both ends.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
    detail::clear_attention_plans();
  }
  ~ScopedEnvironment() {
    unsetenv(name_);
    detail::clear_attention_plans();
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  const char* name_;
};

// --- device memory and tensors -----------------------------------------------------------------

inline void expect_cuda(cudaError_t status, const char* what) {
  ASSERT_EQ(status, cudaSuccess) << what << ": " << cudaGetErrorString(status);
}

// The number of tokens of a token grid (the product of its extents; 1 for no extent).
inline int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

// The extents [b, *tokens, *tail] of a sequence tensor.
inline std::vector<int64_t> concat(int64_t b, const std::vector<int64_t>& tokens, std::vector<int64_t> tail) {
  std::vector<int64_t> e{b};
  e.insert(e.end(), tokens.begin(), tokens.end());
  e.insert(e.end(), tail.begin(), tail.end());
  return e;
}

// A [B|1, H|1, rows, cols] mask view given over `heads` heads with head stride 0 (as torch's expand makes it);
// heads <= 0 leaves the view as it is.
inline TensorView expanded_over_heads(TensorView view, int64_t heads) {
  if (heads > 0) {
    view.extents[1] = heads;
    view.strides[1] = 0;
  }
  return view;
}

// Captures a stream into a graph: begins in the constructor, end() returns the graph; a capture that a
// failing call left open is ended by the destructor, so that it cannot break the tests that follow.
class StreamCapture {
 public:
  explicit StreamCapture(cudaStream_t stream) : stream_(stream) {
    began_ = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  }
  bool began() const { return began_; }
  cudaGraph_t end() {
    cudaGraph_t graph = nullptr;
    if (began_ && cudaStreamEndCapture(stream_, &graph) != cudaSuccess) graph = nullptr;
    began_ = false;
    return graph;
  }
  ~StreamCapture() {
    if (cudaGraph_t graph = end()) cudaGraphDestroy(graph);
  }
  StreamCapture(const StreamCapture&) = delete;
  StreamCapture& operator=(const StreamCapture&) = delete;

 private:
  cudaStream_t stream_;
  bool began_ = false;
};

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
inline test::HostTensor widen_to_f32(const TestTensor& t, TensorView& view) {
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

// One contiguous attention problem on the device: q, k, v and grad_out [B, *tokens, H, D] of `dtype` filled from
// `rng` in [-2, 2], out, lse [B, *tokens, H] (fp32) and the gradients allocated; forward() and backward() point a
// problem at them.
struct DeviceAttentionProblem {
  TestTensor q, k, v, grad_out, out, lse, grad_q, grad_k, grad_v;

  DeviceAttentionProblem(DType dtype, int64_t batch, const std::vector<int64_t>& tokens, int64_t heads,
                         int64_t head_dim, std::mt19937_64& rng) {
    std::vector<int64_t> extents{batch};
    extents.insert(extents.end(), tokens.begin(), tokens.end());
    std::vector<int64_t> row_extents = extents;
    row_extents.push_back(heads);
    extents.push_back(heads);
    extents.push_back(head_dim);
    const std::vector<int64_t> flat(extents.size(), 0);
    for (TestTensor* t : {&q, &k, &v, &grad_out}) {
      *t = TestTensor::make(dtype, extents, flat);
      test::fill_random(t->buffer.view, rng, -2.0, 2.0);
      t->upload();
    }
    for (TestTensor* t : {&out, &grad_q, &grad_k, &grad_v}) *t = TestTensor::make(dtype, extents, flat);
    lse = TestTensor::make(DType::f32, row_extents, std::vector<int64_t>(row_extents.size(), 0));
  }

  AttentionForward forward(const AttentionMask& mask = {}) const {
    AttentionForward f;
    std::tie(f.q, f.k, f.v, f.out, f.lse, f.mask) =
        std::tie(q.device, k.device, v.device, out.device, lse.device, mask);
    return f;
  }
  // The forward's operands with the gradients.
  AttentionBackward backward(const AttentionMask& mask = {}) const {
    const AttentionForward f = forward(mask);
    AttentionBackward b;
    std::tie(b.q, b.k, b.v, b.out, b.lse, b.mask) = std::tie(f.q, f.k, f.v, f.out, f.lse, f.mask);
    std::tie(b.grad_out, b.grad_q, b.grad_k, b.grad_v) =
        std::tie(grad_out.device, grad_q.device, grad_k.device, grad_v.device);
    return b;
  }
};

inline bool cuda_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

// One neighborhood dimension, and a neighborhood mask over the given dimensions.
inline NeighborhoodDim nd(int64_t kernel, int64_t dilation = 1, int64_t stride = 1, bool causal = false) {
  return NeighborhoodDim{kernel, dilation, stride, causal};
}

inline AttentionMask neighborhood(std::initializer_list<NeighborhoodDim> dims) {
  AttentionMask m;
  m.kind = MaskKind::neighborhood;
  m.dims = static_cast<int32_t>(dims.size());
  int d = 0;
  for (const auto& x : dims) m.neighborhood[d++] = x;
  return m;
}

// --- box walks: tiles at window origins --------------------------------------------------------

// Neighborhood masks over 2-D token grids on which some CTAs of both passes get tiles at window origins
// (the forward's KV tiles, the dK/dV kernels' Q tiles): a square grid, odd extents with dilation, stride
// and a causal dimension, the last on token views that do not collapse into one dimension.
struct WindowOriginGrid {
  std::vector<int64_t> tokens;
  AttentionMask mask;
  bool noncollapsible_tokens = false;
};

inline std::vector<WindowOriginGrid> window_origin_grids_2d() {
  return {{{56, 56}, neighborhood({nd(7), nd(7)})},
          {{57, 61}, neighborhood({nd(7, 3), nd(7, 3)})},
          {{45, 53}, neighborhood({nd(9, 1, 2), nd(5, 1, 1, true)})},
          {{45, 53}, neighborhood({nd(7, 1, 1, true), nd(7)}), true}};
}

// CTAs of one (batch, head) whose visited tiles start off their box grid in some dimension: the forward's
// KV tiles (per Q tile) or the dK/dV kernels' Q tiles (per KV tile). The CTAs form a product over
// dimensions of (dilation group, CTA tile): along dimension d, the groups of `extent` tokens under
// `dilation`, each cut into CTA tiles of 2^cta_log2[d] tokens. tiles_of(d, group, first, n) lists the tiles
// (at window origins) of the CTA whose tile starts at token `first` of its group's n; they are aligned when
// their origin is a multiple of 2^visited_log2[d].
template <typename TilesOf>
int64_t ctas_with_window_origins(int dims, const std::array<int64_t, kMaxTokenDims>& extent,
                                 const std::array<int64_t, kMaxTokenDims>& dilation,
                                 const std::array<int, kMaxTokenDims>& cta_log2,
                                 const std::array<int, kMaxTokenDims>& visited_log2, TilesOf&& tiles_of) {
  int64_t all = 1;
  int64_t aligned = 1;
  for (size_t d = 0; d < static_cast<size_t>(dims); ++d) {
    int64_t all_d = 0;
    int64_t aligned_d = 0;
    const int64_t cta_box = int64_t{1} << cta_log2[d];
    for (int64_t group = 0; group < dilation[d]; ++group) {
      const int64_t n = detail::dilation_group_size(extent[d], dilation[d], group);
      for (int64_t first = 0; first < n; first += cta_box) {
        const cuda::DimKeyTiles t = tiles_of(d, group, first, n);
        ++all_d;
        if (t.count == 0 || t.origin % (int64_t{1} << visited_log2[d]) == 0) ++aligned_d;
      }
    }
    all *= all_d;
    aligned *= aligned_d;
  }
  return all - aligned;
}

// Forces the heads per CTA of the Hopper forward and backward kernels (where they run several) while in scope.
struct ForcedHeadsPerCta {
  explicit ForcedHeadsPerCta(int heads) { cuda::fmha_sm90::set_heads_per_cta_override(heads); }
  ~ForcedHeadsPerCta() { cuda::fmha_sm90::set_heads_per_cta_override(0); }
  ForcedHeadsPerCta(const ForcedHeadsPerCta&) = delete;
  ForcedHeadsPerCta& operator=(const ForcedHeadsPerCta&) = delete;
};

}  // namespace attnkit::test
#endif
