// Valid problems for the validation tests, each test breaks exactly one rule of one of them.
// Validation never reads tensor memory, so the views share one aligned placeholder address;
// the tests that run an op for real (nothing-written checks) bring their own buffers.
#pragma once
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "core/validate.hpp"

namespace attnkit::test {

inline void* placeholder_address() {
  alignas(64) static unsigned char storage[64];
  return storage;
}

inline TensorView view_of(DType dtype, std::initializer_list<int64_t> extents, Device device = {}) {
  return make_view(placeholder_address(), dtype, extents, device);
}

// Runs `call`, expects attnkit::Error with `status`, returns its message ("" when nothing threw).
inline std::string error_message(const std::function<void()>& call, Status status = Status::invalid_argument) {
  try {
    call();
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), status) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "expected attnkit::Error, nothing was thrown";
  return "";
}

// q [2, 6, 5, 4, 8], k [2, 6, 5, 2, 8], v [2, 6, 5, 2, 7]: 2-D tokens 6x5, Hq 4, Hkv 2, D 8, Dv 7.
inline AttentionForward valid_attention_forward(DType dtype = DType::f32) {
  AttentionForward p;
  p.q = view_of(dtype, {2, 6, 5, 4, 8});
  p.k = view_of(dtype, {2, 6, 5, 2, 8});
  p.v = view_of(dtype, {2, 6, 5, 2, 7});
  p.out = view_of(dtype, {2, 6, 5, 4, 7});
  p.lse = view_of(DType::f32, {2, 6, 5, 4});
  return p;
}

inline AttentionBackward valid_attention_backward(DType dtype = DType::f32) {
  const AttentionForward f = valid_attention_forward(dtype);
  AttentionBackward p;
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.out = f.out;
  p.lse = f.lse;
  p.grad_out = f.out;
  p.grad_q = f.q;
  p.grad_k = f.k;
  p.grad_v = f.v;
  return p;
}

// q, k [2, 9, 3, 8], v [2, 9, 3, 5]: T 9, H 3, Dk 8, Dv 5.
inline RetentionForward valid_retention_forward(DType dtype = DType::f32) {
  RetentionForward p;
  p.q = view_of(dtype, {2, 9, 3, 8});
  p.k = view_of(dtype, {2, 9, 3, 8});
  p.v = view_of(dtype, {2, 9, 3, 5});
  p.out = view_of(dtype, {2, 9, 3, 5});
  return p;
}

inline RetentionBackward valid_retention_backward(DType dtype = DType::f32) {
  const RetentionForward f = valid_retention_forward(dtype);
  RetentionBackward p;
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.grad_out = f.out;
  p.grad_q = f.q;
  p.grad_k = f.k;
  p.grad_v = f.v;
  return p;
}

// a [3, 7, 5] (m 7, k 5), b [3, 5, 6] (n 6), c [3, 7, 6].
inline GemmProblem valid_gemm(DType dtype = DType::f32) {
  GemmProblem p;
  p.a = view_of(dtype, {3, 7, 5});
  p.b = view_of(dtype, {3, 5, 6});
  p.c = view_of(dtype, {3, 7, 6});
  return p;
}

// A view with explicit extents and strides, built field by field (make_view would compute packed
// strides, which overflow for the huge extents some tests need).
inline TensorView strided_view(DType dtype, std::initializer_list<int64_t> extents,
                               std::initializer_list<int64_t> strides) {
  TensorView view;
  view.data = placeholder_address();
  view.dtype = dtype;
  view.rank = static_cast<int32_t>(extents.size());
  int i = 0;
  for (int64_t e : extents) view.extents[i++] = e;
  i = 0;
  for (int64_t s : strides) view.strides[i++] = s;
  return view;
}

// A view's strides as if it were a slice of a larger tensor; keeps the last stride 1.
inline TensorView with_strides(TensorView view, std::initializer_list<int64_t> strides) {
  int i = 0;
  for (int64_t s : strides) view.strides[i++] = s;
  return view;
}

}  // namespace attnkit::test
