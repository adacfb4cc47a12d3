// The C ABI as a foreign caller sees it: libattnkit.so is loaded with dlopen and every function is
// looked up with dlsym, exactly as Python's ctypes does. Ops run through the C ABI must give the
// same bits as the C++ API on the same inputs; failures return a status and leave a message in
// attnkit_last_error(), which a successful call clears; only the API is exported.
#include <cxxabi.h>
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/attnkit.h"
#include "attnkit/attnkit.hpp"
#include "capi/c_api_convert.hpp"
#include "test_support.hpp"

namespace attnkit::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Function pointers into the dlopen'ed library, typed from the header's declarations.
struct CApi {
  void* handle = nullptr;
#define ATTNKIT_C_FUNCTION(name) decltype(&::name) name = nullptr;
  ATTNKIT_C_FUNCTION(attnkit_abi_version)
  ATTNKIT_C_FUNCTION(attnkit_version)
  ATTNKIT_C_FUNCTION(attnkit_cuda_compiled)
  ATTNKIT_C_FUNCTION(attnkit_cuda_device_count)
  ATTNKIT_C_FUNCTION(attnkit_last_error)
  ATTNKIT_C_FUNCTION(attnkit_status_name)
  ATTNKIT_C_FUNCTION(attnkit_tensor_contiguous)
  ATTNKIT_C_FUNCTION(attnkit_run_options_init)
  ATTNKIT_C_FUNCTION(attnkit_attention_forward_args_init)
  ATTNKIT_C_FUNCTION(attnkit_attention_backward_args_init)
  ATTNKIT_C_FUNCTION(attnkit_retention_forward_args_init)
  ATTNKIT_C_FUNCTION(attnkit_retention_backward_args_init)
  ATTNKIT_C_FUNCTION(attnkit_gemm_args_init)
  ATTNKIT_C_FUNCTION(attnkit_attention_forward)
  ATTNKIT_C_FUNCTION(attnkit_attention_backward)
  ATTNKIT_C_FUNCTION(attnkit_retention_forward)
  ATTNKIT_C_FUNCTION(attnkit_retention_backward)
  ATTNKIT_C_FUNCTION(attnkit_gemm)
  ATTNKIT_C_FUNCTION(attnkit_attention_backward_workspace_size)
#undef ATTNKIT_C_FUNCTION
};

template <class F>
void resolve(void* handle, const char* name, F& pointer) {
  pointer = reinterpret_cast<F>(dlsym(handle, name));
  if (pointer == nullptr) {
    throw std::runtime_error(std::string("dlsym failed for ") + name);
  }
}

const CApi& c_api() {
  static const CApi api = [] {
    CApi a;
    a.handle = dlopen(ATTNKIT_SHARED_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL);
    if (a.handle == nullptr) {
      throw std::runtime_error(std::string("dlopen failed: ") + dlerror());
    }
#define ATTNKIT_RESOLVE(name) resolve(a.handle, #name, a.name);
    ATTNKIT_RESOLVE(attnkit_abi_version)
    ATTNKIT_RESOLVE(attnkit_version)
    ATTNKIT_RESOLVE(attnkit_cuda_compiled)
    ATTNKIT_RESOLVE(attnkit_cuda_device_count)
    ATTNKIT_RESOLVE(attnkit_last_error)
    ATTNKIT_RESOLVE(attnkit_status_name)
    ATTNKIT_RESOLVE(attnkit_tensor_contiguous)
    ATTNKIT_RESOLVE(attnkit_run_options_init)
    ATTNKIT_RESOLVE(attnkit_attention_forward_args_init)
    ATTNKIT_RESOLVE(attnkit_attention_backward_args_init)
    ATTNKIT_RESOLVE(attnkit_retention_forward_args_init)
    ATTNKIT_RESOLVE(attnkit_retention_backward_args_init)
    ATTNKIT_RESOLVE(attnkit_gemm_args_init)
    ATTNKIT_RESOLVE(attnkit_attention_forward)
    ATTNKIT_RESOLVE(attnkit_attention_backward)
    ATTNKIT_RESOLVE(attnkit_retention_forward)
    ATTNKIT_RESOLVE(attnkit_retention_backward)
    ATTNKIT_RESOLVE(attnkit_gemm)
    ATTNKIT_RESOLVE(attnkit_attention_backward_workspace_size)
#undef ATTNKIT_RESOLVE
    return a;
  }();
  return api;
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.storage.size() == b.storage.size() && std::memcmp(a.storage.data(), b.storage.data(), a.storage.size()) == 0;
}

HostTensor random_tensor(DType dtype, const std::vector<int64_t>& extents, std::mt19937_64& rng, int64_t pad = 0) {
  HostTensor t = pad > 0 ? HostTensor::padded(dtype, extents, pad) : HostTensor::contiguous(dtype, extents);
  fill_random(t.view, rng);
  return t;
}

// The C args of a small dilated, strided, partly causal 2-D neighborhood attention with GQA.
struct Na2dCase {
  HostTensor q, k, v;
  attnkit_attention_forward_args args;
  AttentionMask mask = neighborhood_mask({3, 5}, {2, 1}, {1, 2}, {false, true});
};

Na2dCase make_na2d_case(std::mt19937_64& rng) {
  Na2dCase c;
  c.q = random_tensor(DType::f32, {2, 7, 9, 4, 8}, rng, 1);  // strided views
  c.k = random_tensor(DType::f32, {2, 7, 9, 2, 8}, rng);
  c.v = random_tensor(DType::f32, {2, 7, 9, 2, 6}, rng);
  c_api().attnkit_attention_forward_args_init(&c.args);
  c.args.q = capi::to_c_tensor(c.q.view);
  c.args.k = capi::to_c_tensor(c.k.view);
  c.args.v = capi::to_c_tensor(c.v.view);
  c.args.mask.kind = ATTNKIT_MASK_NEIGHBORHOOD;
  c.args.mask.dims = 2;
  const int64_t kernel[2] = {3, 5}, dilation[2] = {2, 1}, stride[2] = {1, 2};
  const int32_t causal[2] = {0, 1};
  for (int d = 0; d < 2; ++d) {
    c.args.mask.neighborhood[d].kernel_size = kernel[d];
    c.args.mask.neighborhood[d].dilation = dilation[d];
    c.args.mask.neighborhood[d].stride = stride[d];
    c.args.mask.neighborhood[d].causal = causal[d];
  }
  c.args.has_scale = 1;
  c.args.scale = 0.3;
  return c;
}

// The C args of a small causal attention backward: inputs from a C++ forward, NaN-poisoned gradients.
struct BackwardCase {
  std::vector<int64_t> shape{1, 13, 2, 8};
  HostTensor q, k, v, out, lse, grad_out;
  HostTensor grads[3];
  attnkit_attention_backward_args args;
};

BackwardCase make_backward_case(std::mt19937_64& rng) {
  BackwardCase c;
  c.q = random_tensor(DType::f32, c.shape, rng);
  c.k = random_tensor(DType::f32, c.shape, rng);
  c.v = random_tensor(DType::f32, c.shape, rng);
  c.grad_out = random_tensor(DType::f32, c.shape, rng);
  c.out = poisoned_tensor(DType::f32, c.shape);
  c.lse = poisoned_tensor(DType::f32, {1, 13, 2});
  attention_forward(AttentionForward{c.q.view, c.k.view, c.v.view, c.out.view, c.lse.view, {}, causal_mask()});
  for (HostTensor& grad : c.grads) {
    grad = poisoned_tensor(DType::f32, c.shape);
  }
  c_api().attnkit_attention_backward_args_init(&c.args);
  c.args.q = capi::to_c_tensor(c.q.view);
  c.args.k = capi::to_c_tensor(c.k.view);
  c.args.v = capi::to_c_tensor(c.v.view);
  c.args.out = capi::to_c_tensor(c.out.view);
  c.args.lse = capi::to_c_tensor(c.lse.view);
  c.args.grad_out = capi::to_c_tensor(c.grad_out.view);
  c.args.grad_q = capi::to_c_tensor(c.grads[0].view);
  c.args.grad_k = capi::to_c_tensor(c.grads[1].view);
  c.args.grad_v = capi::to_c_tensor(c.grads[2].view);
  c.args.mask.kind = ATTNKIT_MASK_CAUSAL;
  return c;
}

TEST(CAbi, AbiVersionMatchesTheHeader) { EXPECT_EQ(c_api().attnkit_abi_version(), ATTNKIT_ABI_VERSION); }

TEST(CAbi, VersionMatchesTheCppApi) { EXPECT_STREQ(c_api().attnkit_version(), version_string()); }

TEST(CAbi, CudaQueriesAgreeWithBuildInfo) {
  EXPECT_EQ(c_api().attnkit_cuda_compiled() != 0, build_info().cuda_compiled);
  EXPECT_EQ(c_api().attnkit_cuda_device_count(), static_cast<int32_t>(cuda_devices().size()));
}

TEST(CAbi, Na2dForwardMatchesCppApiBitForBit) {
  std::mt19937_64 rng(20240601);
  Na2dCase c = make_na2d_case(rng);
  HostTensor out_c = poisoned_tensor(DType::f32, {2, 7, 9, 4, 6});
  HostTensor lse_c = poisoned_tensor(DType::f32, {2, 7, 9, 4});
  c.args.out = capi::to_c_tensor(out_c.view);
  c.args.lse = capi::to_c_tensor(lse_c.view);
  attnkit_run_options options;
  c_api().attnkit_run_options_init(&options);
  options.backend = ATTNKIT_BACKEND_CPU;
  ASSERT_EQ(c_api().attnkit_attention_forward(&c.args, &options), ATTNKIT_OK) << c_api().attnkit_last_error();

  HostTensor out_cpp = poisoned_tensor(DType::f32, {2, 7, 9, 4, 6});
  HostTensor lse_cpp = poisoned_tensor(DType::f32, {2, 7, 9, 4});
  AttentionForward p{c.q.view, c.k.view, c.v.view, out_cpp.view, lse_cpp.view, 0.3, c.mask};
  attention_forward(p, RunOptions{Backend::cpu});

  EXPECT_TRUE(all_finite(out_c.view));
  EXPECT_TRUE(same_bytes(out_c, out_cpp));
  EXPECT_TRUE(same_bytes(lse_c, lse_cpp));
}

TEST(CAbi, AttentionBackwardMatchesCppApiBitForBit) {
  std::mt19937_64 rng(7);
  BackwardCase c = make_backward_case(rng);
  ASSERT_EQ(c_api().attnkit_attention_backward(&c.args, nullptr), ATTNKIT_OK) << c_api().attnkit_last_error();

  HostTensor grads_cpp[3] = {poisoned_tensor(DType::f32, c.shape), poisoned_tensor(DType::f32, c.shape),
                             poisoned_tensor(DType::f32, c.shape)};
  AttentionBackward p;
  p.q = c.q.view;
  p.k = c.k.view;
  p.v = c.v.view;
  p.out = c.out.view;
  p.lse = c.lse.view;
  p.grad_out = c.grad_out.view;
  p.grad_q = grads_cpp[0].view;
  p.grad_k = grads_cpp[1].view;
  p.grad_v = grads_cpp[2].view;
  p.mask = causal_mask();
  attention_backward(p);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(all_finite(c.grads[i].view)) << i;
    EXPECT_TRUE(same_bytes(c.grads[i], grads_cpp[i])) << i;
  }
}

TEST(CAbi, CpuBackwardIgnoresKvSplitSettings) {
  std::mt19937_64 rng(29);
  BackwardCase automatic = make_backward_case(rng);
  ASSERT_EQ(c_api().attnkit_attention_backward(&automatic.args, nullptr), ATTNKIT_OK) << c_api().attnkit_last_error();

  rng.seed(29);
  BackwardCase split = make_backward_case(rng);
  split.args.kv_splits = 128;
  split.args.split_workspace_limit = 0;
  ASSERT_EQ(c_api().attnkit_attention_backward(&split.args, nullptr), ATTNKIT_OK) << c_api().attnkit_last_error();
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(all_finite(split.grads[i].view)) << i;
    EXPECT_TRUE(same_bytes(split.grads[i], automatic.grads[i])) << i;
  }
}

TEST(CAbi, OutOfRangeKvSplitSettingsNameTheirField) {
  std::mt19937_64 rng(31);
  BackwardCase c = make_backward_case(rng);
  const std::vector<std::byte> pristine_grad_k = c.grads[1].storage;

  auto bad = c.args;
  bad.kv_splits = 129;
  EXPECT_EQ(c_api().attnkit_attention_backward(&bad, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()),
              AllOf(HasSubstr("kv_splits: 129"), HasSubstr("allowed: 0 (automatic), 1 (never split) or 2 to 128")));

  bad = c.args;
  bad.kv_splits = -1;
  EXPECT_EQ(c_api().attnkit_attention_backward(&bad, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), HasSubstr("kv_splits: -1"));

  bad = c.args;
  bad.split_workspace_limit = -2;
  EXPECT_EQ(c_api().attnkit_attention_backward(&bad, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()),
              AllOf(HasSubstr("split_workspace_limit: -2"), HasSubstr("allowed: -1 (the default bound")));

  int64_t bytes = 0;
  EXPECT_EQ(c_api().attnkit_attention_backward_workspace_size(&bad, nullptr, &bytes), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), HasSubstr("split_workspace_limit: -2"));
  EXPECT_EQ(c.grads[1].storage, pristine_grad_k) << "nothing is written when validation fails";
}

TEST(CAbi, RetentionForwardMatchesCppApiBitForBit) {
  std::mt19937_64 rng(11);
  HostTensor q = random_tensor(DType::f32, {2, 10, 3, 4}, rng), k = random_tensor(DType::f32, {2, 10, 3, 4}, rng),
             v = random_tensor(DType::f32, {2, 10, 3, 5}, rng);
  const double gamma[3] = {0.5, 0.8, 0.95};
  HostTensor out_c = poisoned_tensor(DType::f32, {2, 10, 3, 5}), state_c = poisoned_tensor(DType::f32, {2, 3, 4, 5});
  attnkit_retention_forward_args args;
  c_api().attnkit_retention_forward_args_init(&args);
  args.q = capi::to_c_tensor(q.view);
  args.k = capi::to_c_tensor(k.view);
  args.v = capi::to_c_tensor(v.view);
  args.out = capi::to_c_tensor(out_c.view);
  args.final_state = capi::to_c_tensor(state_c.view);
  args.gamma = gamma;
  args.gamma_count = 3;
  args.chunk_size = 4;
  ASSERT_EQ(c_api().attnkit_retention_forward(&args, nullptr), ATTNKIT_OK) << c_api().attnkit_last_error();

  HostTensor out_cpp = poisoned_tensor(DType::f32, {2, 10, 3, 5}),
             state_cpp = poisoned_tensor(DType::f32, {2, 3, 4, 5});
  RetentionForward p;
  p.q = q.view;
  p.k = k.view;
  p.v = v.view;
  p.out = out_cpp.view;
  p.final_state = state_cpp.view;
  p.gamma = {0.5, 0.8, 0.95};
  p.mode = RetentionMode::chunkwise;
  p.chunk_size = 4;
  retention_forward(p);
  EXPECT_TRUE(all_finite(out_c.view));
  EXPECT_TRUE(same_bytes(out_c, out_cpp));
  EXPECT_TRUE(same_bytes(state_c, state_cpp));
}

TEST(CAbi, GemmMatchesCppApiBitForBit) {
  std::mt19937_64 rng(13);
  HostTensor a = random_tensor(DType::f32, {2, 9, 7}, rng), b = random_tensor(DType::f32, {6, 9}, rng);
  HostTensor c_in = random_tensor(DType::f32, {2, 7, 6}, rng);
  HostTensor c_c = HostTensor::contiguous(DType::f32, {2, 7, 6}), c_cpp = HostTensor::contiguous(DType::f32, {2, 7, 6});
  c_c.storage = c_in.storage;
  c_cpp.storage = c_in.storage;
  attnkit_gemm_args args;
  c_api().attnkit_gemm_args_init(&args);
  args.a = capi::to_c_tensor(a.view);
  args.b = capi::to_c_tensor(b.view);
  args.c = capi::to_c_tensor(c_c.view);
  args.transpose_a = 1;
  args.transpose_b = 1;
  args.alpha = 0.75;
  args.beta = -0.5;
  ASSERT_EQ(c_api().attnkit_gemm(&args, nullptr), ATTNKIT_OK) << c_api().attnkit_last_error();

  GemmProblem p{a.view, b.view, c_cpp.view, true, true, 0.75, -0.5, false};
  gemm(p);
  EXPECT_TRUE(all_finite(c_c.view));
  EXPECT_TRUE(same_bytes(c_c, c_cpp));
  EXPECT_FALSE(same_bytes(c_c, c_in));
}

TEST(CAbi, ValidationFailureReturnsStatusAndMessage) {
  std::mt19937_64 rng(3);
  Na2dCase c = make_na2d_case(rng);
  HostTensor out = poisoned_tensor(DType::f32, {2, 7, 9, 4, 6});
  const HostTensor pristine = [&] {
    HostTensor copy = HostTensor::contiguous(DType::f32, {2, 7, 9, 4, 6});
    copy.storage = out.storage;
    return copy;
  }();
  c.args.out = capi::to_c_tensor(out.view);
  c.args.mask.neighborhood[1].kernel_size = 10;  // 10 > 9 tokens
  EXPECT_EQ(c_api().attnkit_attention_forward(&c.args, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()),
              AllOf(HasSubstr("mask.neighborhood[1].kernel_size: 10"), HasSubstr("tokens[1] is 9"),
                    HasSubstr("allowed: kernel_size*dilation <= extent")));
  EXPECT_TRUE(same_bytes(out, pristine));
}

TEST(CAbi, SuccessClearsTheLastError) {
  attnkit_gemm_args bad;
  c_api().attnkit_gemm_args_init(&bad);
  ASSERT_EQ(c_api().attnkit_gemm(&bad, nullptr), ATTNKIT_INVALID_ARGUMENT);
  ASSERT_STRNE(c_api().attnkit_last_error(), "");

  std::mt19937_64 rng(5);
  HostTensor a = random_tensor(DType::f32, {3, 2}, rng), b = random_tensor(DType::f32, {2, 4}, rng);
  HostTensor c = poisoned_tensor(DType::f32, {3, 4});
  attnkit_gemm_args good;
  c_api().attnkit_gemm_args_init(&good);
  good.a = capi::to_c_tensor(a.view);
  good.b = capi::to_c_tensor(b.view);
  good.c = capi::to_c_tensor(c.view);
  ASSERT_EQ(c_api().attnkit_gemm(&good, nullptr), ATTNKIT_OK) << c_api().attnkit_last_error();
  EXPECT_STREQ(c_api().attnkit_last_error(), "");
}

TEST(CAbi, QueriesLeaveTheLastErrorAlone) {
  ASSERT_EQ(c_api().attnkit_gemm(nullptr, nullptr), ATTNKIT_INVALID_ARGUMENT);
  c_api().attnkit_cuda_device_count();
  c_api().attnkit_cuda_compiled();
  c_api().attnkit_version();
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), HasSubstr("args: NULL"));
}

TEST(CAbi, LastErrorIsPerThread) {
  ASSERT_EQ(c_api().attnkit_gemm(nullptr, nullptr), ATTNKIT_INVALID_ARGUMENT);
  std::string other_thread_sees = "unset";
  std::thread([&] { other_thread_sees = c_api().attnkit_last_error(); }).join();
  EXPECT_EQ(other_thread_sees, "");
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), HasSubstr("args: NULL"));
}

TEST(CAbi, NullArgsIsAnInvalidArgument) {
  EXPECT_EQ(c_api().attnkit_attention_forward(nullptr, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()),
              AllOf(HasSubstr("args: NULL"), HasSubstr("allowed: a pointer to an attnkit_attention_forward_args")));
  EXPECT_EQ(c_api().attnkit_retention_backward(nullptr, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), HasSubstr("attnkit_retention_backward_args"));
}

TEST(CAbi, OutOfRangeEnumsNameTheirField) {
  std::mt19937_64 rng(17);
  Na2dCase c = make_na2d_case(rng);
  HostTensor out = poisoned_tensor(DType::f32, {2, 7, 9, 4, 6});
  c.args.out = capi::to_c_tensor(out.view);

  auto bad = c.args;
  bad.k.dtype = 9;
  EXPECT_EQ(c_api().attnkit_attention_forward(&bad, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()),
              AllOf(HasSubstr("k.dtype: 9"), HasSubstr("allowed: 0 (ATTNKIT_FLOAT32)")));

  bad = c.args;
  bad.v.device_type = -1;
  EXPECT_EQ(c_api().attnkit_attention_forward(&bad, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), HasSubstr("v.device_type: -1"));

  bad = c.args;
  bad.q.rank = 9;
  EXPECT_EQ(c_api().attnkit_attention_forward(&bad, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), AllOf(HasSubstr("q.rank: 9"), HasSubstr("allowed: 0 to 8")));

  bad = c.args;
  bad.mask.kind = 5;
  EXPECT_EQ(c_api().attnkit_attention_forward(&bad, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), HasSubstr("mask.kind: 5"));

  bad = c.args;
  bad.mask.causal_alignment = 3;
  EXPECT_EQ(c_api().attnkit_attention_forward(&bad, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), HasSubstr("mask.causal_alignment: 3"));

  attnkit_run_options options;
  c_api().attnkit_run_options_init(&options);
  options.backend = 3;
  EXPECT_EQ(c_api().attnkit_attention_forward(&c.args, &options), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()),
              AllOf(HasSubstr("options.backend: 3"), HasSubstr("ATTNKIT_BACKEND_AUTO")));

  attnkit_retention_forward_args retention;
  c_api().attnkit_retention_forward_args_init(&retention);
  retention.mode = 4;
  EXPECT_EQ(c_api().attnkit_retention_forward(&retention, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()),
              AllOf(HasSubstr("mode: 4"), HasSubstr("ATTNKIT_RETENTION_PARALLEL")));
}

TEST(CAbi, GammaPointerAndCountMustAgree) {
  attnkit_retention_forward_args args;
  c_api().attnkit_retention_forward_args_init(&args);
  args.gamma_count = 3;
  EXPECT_EQ(c_api().attnkit_retention_forward(&args, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), AllOf(HasSubstr("gamma: NULL with gamma_count 3"),
                                                               HasSubstr("allowed: a pointer to gamma_count values")));
  args.gamma_count = -1;
  EXPECT_EQ(c_api().attnkit_retention_forward(&args, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), HasSubstr("gamma_count: -1"));
}

TEST(CAbi, CudaTensorsWithoutCudaAreUnsupported) {
  if (c_api().attnkit_cuda_compiled()) {
    GTEST_SKIP() << "this build has CUDA; the unsupported path exists only without it";
  }
  std::mt19937_64 rng(19);
  Na2dCase c = make_na2d_case(rng);
  HostTensor out = poisoned_tensor(DType::f32, {2, 7, 9, 4, 6});
  c.args.out = capi::to_c_tensor(out.view);
  for (attnkit_tensor* t : {&c.args.q, &c.args.k, &c.args.v, &c.args.out}) {
    t->device_type = ATTNKIT_DEVICE_CUDA;
  }
  EXPECT_EQ(c_api().attnkit_attention_forward(&c.args, nullptr), ATTNKIT_UNSUPPORTED);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), HasSubstr("built without CUDA"));
}

TEST(CAbi, BackendAndDeviceMustAgree) {
  std::mt19937_64 rng(23);
  Na2dCase c = make_na2d_case(rng);
  HostTensor out = poisoned_tensor(DType::f32, {2, 7, 9, 4, 6});
  c.args.out = capi::to_c_tensor(out.view);
  attnkit_run_options options;
  c_api().attnkit_run_options_init(&options);
  options.backend = ATTNKIT_BACKEND_CUDA;
  EXPECT_EQ(c_api().attnkit_attention_forward(&c.args, &options), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()), HasSubstr("cannot run tensors on device 'cpu'"));
}

TEST(CAbi, InitFunctionsSetDocumentedDefaults) {
  attnkit_attention_forward_args forward;
  std::memset(&forward, 0xab, sizeof(forward));
  c_api().attnkit_attention_forward_args_init(&forward);
  EXPECT_EQ(forward.q.data, nullptr);
  EXPECT_EQ(forward.lse.data, nullptr);
  EXPECT_EQ(forward.has_scale, 0);
  EXPECT_EQ(forward.mask.kind, ATTNKIT_MASK_NONE);
  for (const auto& dim : forward.mask.neighborhood) {
    EXPECT_EQ(dim.kernel_size, 1);
    EXPECT_EQ(dim.dilation, 1);
    EXPECT_EQ(dim.stride, 1);
    EXPECT_EQ(dim.causal, 0);
  }
  attnkit_attention_backward_args backward;
  std::memset(&backward, 0xab, sizeof(backward));
  c_api().attnkit_attention_backward_args_init(&backward);
  EXPECT_EQ(backward.deterministic, 0);
  EXPECT_EQ(backward.kv_splits, 0);
  EXPECT_EQ(backward.reserved, 0);
  EXPECT_EQ(backward.split_workspace_limit, -1);
  EXPECT_EQ(backward.mask.neighborhood[2].dilation, 1);

  attnkit_retention_forward_args retention;
  std::memset(&retention, 0xab, sizeof(retention));
  c_api().attnkit_retention_forward_args_init(&retention);
  EXPECT_EQ(retention.mode, ATTNKIT_RETENTION_CHUNKWISE);
  EXPECT_EQ(retention.chunk_size, 64);
  EXPECT_EQ(retention.gamma, nullptr);
  EXPECT_EQ(retention.normalize, 0);
  attnkit_retention_backward_args retention_backward;
  c_api().attnkit_retention_backward_args_init(&retention_backward);
  EXPECT_EQ(retention_backward.chunk_size, 64);

  attnkit_gemm_args gemm_args;
  std::memset(&gemm_args, 0xab, sizeof(gemm_args));
  c_api().attnkit_gemm_args_init(&gemm_args);
  EXPECT_EQ(gemm_args.alpha, 1.0);
  EXPECT_EQ(gemm_args.beta, 0.0);
  EXPECT_EQ(gemm_args.transpose_a, 0);
  EXPECT_EQ(gemm_args.allow_tf32, 0);

  attnkit_run_options options;
  std::memset(&options, 0xab, sizeof(options));
  c_api().attnkit_run_options_init(&options);
  EXPECT_EQ(options.backend, ATTNKIT_BACKEND_AUTO);
  EXPECT_EQ(options.num_threads, 0);
  EXPECT_EQ(options.stream, nullptr);
}

TEST(CAbi, TensorContiguousFillsRowMajorStrides) {
  float storage[2 * 3 * 4];
  const int64_t extents[3] = {2, 3, 4};
  attnkit_tensor t;
  ASSERT_EQ(c_api().attnkit_tensor_contiguous(&t, storage, ATTNKIT_FLOAT32, ATTNKIT_DEVICE_CPU, 0, 3, extents),
            ATTNKIT_OK);
  EXPECT_EQ(t.data, storage);
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.strides[1], 4);
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_EQ(t.extents[1], 3);
  EXPECT_EQ(c_api().attnkit_tensor_contiguous(&t, storage, ATTNKIT_FLOAT32, ATTNKIT_DEVICE_CPU, 0, 9, extents),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(c_api().attnkit_last_error()),
              AllOf(HasSubstr("view.rank: 9"), HasSubstr("allowed: 0 to 8")));
  EXPECT_EQ(c_api().attnkit_tensor_contiguous(nullptr, storage, ATTNKIT_FLOAT32, ATTNKIT_DEVICE_CPU, 0, 3, extents),
            ATTNKIT_INVALID_ARGUMENT);
}

TEST(CAbi, StatusNamesCoverEveryStatus) {
  EXPECT_STREQ(c_api().attnkit_status_name(ATTNKIT_OK), "ok");
  EXPECT_STREQ(c_api().attnkit_status_name(ATTNKIT_INVALID_ARGUMENT), "invalid_argument");
  EXPECT_STREQ(c_api().attnkit_status_name(ATTNKIT_UNSUPPORTED), "unsupported");
  EXPECT_STREQ(c_api().attnkit_status_name(ATTNKIT_CUDA_ERROR), "cuda_error");
  EXPECT_STREQ(c_api().attnkit_status_name(ATTNKIT_OUT_OF_MEMORY), "out_of_memory");
  EXPECT_STREQ(c_api().attnkit_status_name(ATTNKIT_INTERNAL), "internal");
  EXPECT_STREQ(c_api().attnkit_status_name(42), "unknown");
}

// --- exported symbols ------------------------------------------------------------------------

std::string demangle(const std::string& symbol) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> text(abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && text ? std::string(text.get()) : symbol;
}

// A defined dynamic symbol may be: a C function attnkit_*; a C++ API symbol in namespace attnkit
// (not one of its internal namespaces); or a weak/unique instantiation of the C++ standard
// library, which the toolchain exports from any library that instantiates it.
bool symbol_allowed(char type, const std::string& mangled) {
  if (mangled.rfind("attnkit_", 0) == 0) {
    return true;
  }
  const std::string name = demangle(mangled);
  for (const char* internal : {"attnkit::detail::", "attnkit::cpu::", "attnkit::cuda::", "attnkit::capi::",
                               "attnkit::tune::", "attnkit::test::"}) {
    if (name.find(internal) != std::string::npos) {
      return false;
    }
  }
  const bool weak_or_unique = type == 'W' || type == 'V' || type == 'u';
  if (name.find("attnkit::") != std::string::npos) {
    return true;
  }
  return weak_or_unique && (name.find("std::") != std::string::npos || name.find("__gnu_cxx::") != std::string::npos);
}

TEST(CAbi, ExportsOnlyTheApi) {
  const std::string command = std::string("nm -D --defined-only '") + ATTNKIT_SHARED_LIBRARY_PATH + "' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  ASSERT_NE(pipe, nullptr);
  char line[8192];
  int c_functions = 0;
  std::vector<std::string> unexpected;
  while (std::fgets(line, sizeof(line), pipe.get())) {
    char type = 0;
    char symbol[8000];
    // "<address> <type> <name>"; linker-defined absolute symbols have no address column issue here.
    if (std::sscanf(line, "%*s %c %7999s", &type, symbol) != 2) {
      unexpected.push_back(std::string("unparsed nm line: ") + line);
      continue;
    }
    if (std::string(symbol).rfind("attnkit_", 0) == 0) {
      ++c_functions;
    }
    if (!symbol_allowed(type, symbol)) {
      unexpected.push_back(std::string(1, type) + " " + demangle(symbol));
    }
  }
  EXPECT_GE(c_functions, 26) << "every attnkit_* function of attnkit.h is exported (ABI version 3: 26)";
  EXPECT_TRUE(unexpected.empty()) << "exported symbols outside the API:\n" << ::testing::PrintToString(unexpected);
}

}  // namespace
}  // namespace attnkit::test
