// Bugs the C ABI fuzzer found, one test per bug, each as a plain C ABI call (the input that found it is in
// fuzz/corpus/c_abi/ as regression-*). fuzz/README.md lists them.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/attnkit.h"

namespace {

// A float32 [B, L, H, D] tensor in an owned buffer that starts `offset_bytes` past a 16-byte boundary.
struct HostTensor {
  std::vector<unsigned char> storage;
  attnkit_tensor view{};
  HostTensor(std::vector<int64_t> extents, float fill, int offset_bytes = 0) {
    int64_t count = 1;
    for (int64_t e : extents) count *= e;
    storage.resize(static_cast<std::size_t>(count) * sizeof(float) + 32);
    const auto base = (reinterpret_cast<uintptr_t>(storage.data()) + 15) & ~uintptr_t{15};
    auto* data = reinterpret_cast<unsigned char*>(base) + offset_bytes;
    for (int64_t i = 0; i < count; ++i) std::memcpy(data + i * sizeof(float), &fill, sizeof(float));
    EXPECT_EQ(attnkit_tensor_contiguous(&view, data, ATTNKIT_FLOAT32, ATTNKIT_DEVICE_CPU, 0,
                                        static_cast<int32_t>(extents.size()), extents.data()),
              ATTNKIT_OK);
  }
  std::vector<unsigned char> bytes() const { return storage; }
};

struct ForwardCall {
  HostTensor q{{1, 5, 2, 4}, 0.25f}, k{{1, 5, 2, 4}, 0.5f}, v{{1, 5, 2, 4}, 1.0f}, out{{1, 5, 2, 4}, -7.0f};
  attnkit_attention_forward_args args{};
  ForwardCall() {
    attnkit_attention_forward_args_init(&args);
    args.q = q.view;
    args.k = k.view;
    args.v = v.view;
    args.out = out.view;
  }
};

// Found as a refused call that wrote its output: the name was copied before the source capacity was checked.
TEST(FuzzRegressions, ConfigQueryThatRefusesASmallSourceCapacityWritesNoName) {
  ForwardCall call;
  char name[256];
  char source[1];
  std::memset(name, '#', sizeof(name));
  source[0] = '#';
  EXPECT_EQ(attnkit_attention_forward_config(&call.args, nullptr, name, sizeof(name), source, sizeof(source)),
            ATTNKIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnkit_last_error()).find("source_capacity"), std::string::npos) << attnkit_last_error();
  for (char c : name) ASSERT_EQ(c, '#') << "a refused config query wrote into name";
  EXPECT_EQ(source[0], '#');
}

// Found by UBSan: a float32 positional bias at an odd address was accepted and then read with misaligned
// float loads.
TEST(FuzzRegressions, MisalignedPositionalBiasIsRefusedWithoutWriting) {
  ForwardCall call;
  HostTensor rpb({2, 5}, 0.1f, 2);  // [Hq, 2*3-1], 2 bytes past an aligned address
  call.args.mask.kind = ATTNKIT_MASK_NEIGHBORHOOD;
  call.args.mask.dims = 1;
  call.args.mask.neighborhood[0].kernel_size = 3;
  call.args.mask.rpb = rpb.view;
  const auto before = call.out.bytes();
  EXPECT_EQ(attnkit_attention_forward(&call.args, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnkit_last_error()).find("mask.rpb: data pointer"), std::string::npos)
      << attnkit_last_error();
  EXPECT_EQ(call.out.bytes(), before);
}

TEST(FuzzRegressions, MisalignedPositionalBiasGradientIsRefused) {
  HostTensor q({1, 5, 2, 4}, 0.25f), o({1, 5, 2, 4}, 0.0f), grad_out({1, 5, 2, 4}, 1.0f), lse({1, 5, 2}, 0.0f);
  HostTensor grad_q({1, 5, 2, 4}, -7.0f), grad_k({1, 5, 2, 4}, -7.0f), grad_v({1, 5, 2, 4}, -7.0f);
  HostTensor rpb({2, 5}, 0.1f), grad_rpb({2, 5}, -7.0f, 2);
  attnkit_attention_backward_args args;
  attnkit_attention_backward_args_init(&args);
  args.q = args.k = args.v = q.view;
  args.out = o.view;
  args.lse = lse.view;
  args.grad_out = grad_out.view;
  args.grad_q = grad_q.view;
  args.grad_k = grad_k.view;
  args.grad_v = grad_v.view;
  args.mask.kind = ATTNKIT_MASK_NEIGHBORHOOD;
  args.mask.dims = 1;
  args.mask.neighborhood[0].kernel_size = 3;
  args.mask.rpb = rpb.view;
  args.grad_rpb = grad_rpb.view;
  const auto before = grad_q.bytes();
  EXPECT_EQ(attnkit_attention_backward(&args, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnkit_last_error()).find("grad_rpb: data pointer"), std::string::npos)
      << attnkit_last_error();
  EXPECT_EQ(grad_q.bytes(), before);
}

// Found by the fuzzer (corpus/c_abi/regression-positional-bias-index-overflow-causal-mask): the CPU backend
// built its positional-bias index from mask.neighborhood for every mask kind, so a causal call whose unused
// kernel size is INT64_MAX overflowed int64 there (UBSan); the index now reads those fields only with rpb.
TEST(FuzzRegressions, UnusedNeighborhoodFieldsOfACausalMaskAreIgnored) {
  ForwardCall call;
  call.args.mask.kind = ATTNKIT_MASK_CAUSAL;
  call.args.mask.neighborhood[0].kernel_size = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(attnkit_attention_forward(&call.args, nullptr), ATTNKIT_OK) << attnkit_last_error();
}

// Found by the fuzzer (corpus/c_abi/regression-tensor-contiguous-stride-overflow): the element count
// [0, 2^32, 2^32] fits int64 (it is 0) but the row-major stride of dim 0 (2^64) does not; the check now
// follows make_view's order.
TEST(FuzzRegressions, TensorContiguousRefusesStridesThatOverflow) {
  const int64_t extents[] = {0, int64_t{1} << 32, int64_t{1} << 32};
  attnkit_tensor view{};
  EXPECT_EQ(attnkit_tensor_contiguous(&view, nullptr, ATTNKIT_FLOAT32, ATTNKIT_DEVICE_CPU, 0, 3, extents),
            ATTNKIT_INVALID_ARGUMENT);
}

}  // namespace
