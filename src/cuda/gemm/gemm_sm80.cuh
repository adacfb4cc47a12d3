// SM80 GEMM instances (any SM80+ device, sm_90a included): CUTLASS 2.x GemmUniversal — a multistage
// cp.async mainloop feeding mma.sync tensor cores, a threadblock tile split among a grid of warps, a
// linear-combination epilogue alpha * acc + beta * C (C read only when beta != 0), batched through
// grid z with batch strides (0 broadcasts). Operands are the canonical form of gemm_shape.hpp: C
// row-major, A and B K- or MN-major by template; accesses are 16 bytes wide, so addresses, leading
// dimensions, batch strides and contiguous extents must be 16-byte multiples (else the SIMT fallback).
// Types: f16 / bf16 in and out with fp32 accumulation; fp32 through TF32 tensor cores (float operands
// with OpMultiplyAdd: the warp-level mma rounds each to TF32 — to nearest on sm_90 — about 2.6e-4
// relative L2 error on uniform inputs) or 3xTF32 (OpMultiplyAddFastF32: each operand split into a TF32
// big part and a TF32 remainder, three mma per product, fp32-level error).
//
// A plan makes the runner once: can_implement and initialize (which sets the kernel's dynamic shared
// memory attribute once per thread and device, CUTLASS's GemmUniversalBase rule); a run copies the
// initialised operator, updates its pointers, alpha and beta, and launches.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/gemm/gemm_kernel.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"

namespace attnkit::cuda::gemm::sm80 {

// Storage / math of an instance: the element in memory, the math operator, C's type, the mma's K.
template <class Element_, class MathOperator_, class Output_, int InstructionK>
struct Math {
  using Element = Element_;
  using MathOperator = MathOperator_;
  using Output = Output_;
  static constexpr int kInstructionK = InstructionK;
};
using F16 = Math<cutlass::half_t, cutlass::arch::OpMultiplyAdd, cutlass::half_t, 16>;
using BF16 = Math<cutlass::bfloat16_t, cutlass::arch::OpMultiplyAdd, cutlass::bfloat16_t, 16>;
using TF32 = Math<float, cutlass::arch::OpMultiplyAdd, float, 8>;
using Fast32 = Math<float, cutlass::arch::OpMultiplyAddFastF32, float, 8>;

template <class M, bool AKMajor, bool BKMajor, int TileM, int TileN, int TileK, int WarpsM, int WarpsN, int Stages>
struct Sm80Gemm {
  using Element = typename M::Element;
  using Output = typename M::Output;
  static constexpr bool kAKMajor = AKMajor;
  static constexpr bool kBKMajor = BKMajor;
  static constexpr int kTileM = TileM;
  static constexpr int kTileN = TileN;
  using LayoutA = std::conditional_t<AKMajor, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
  using LayoutB = std::conditional_t<BKMajor, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using LayoutC = cutlass::layout::RowMajor;
  static constexpr int kAlignment = 16 / static_cast<int>(sizeof(Element));
  static constexpr int kOutputAlignment = 16 / static_cast<int>(sizeof(Output));
  using Operator = cutlass::gemm::device::GemmUniversal<
      Element, LayoutA, Element, LayoutB, Output, LayoutC, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<TileM, TileN, TileK>, cutlass::gemm::GemmShape<TileM / WarpsM, TileN / WarpsN, TileK>,
      cutlass::gemm::GemmShape<16, 8, M::kInstructionK>,
      cutlass::epilogue::thread::LinearCombination<Output, kOutputAlignment, float, float>,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, Stages, kAlignment, kAlignment,
      typename M::MathOperator>;
};

template <class Gemm>
typename Gemm::Operator::Arguments arguments_of(const GemmShape& s, float alpha, float beta) {
  using Arguments = typename Gemm::Operator::Arguments;
  const int64_t lda = Gemm::kAKMajor ? s.a_row : s.a_col;
  const int64_t ldb = Gemm::kBKMajor ? s.b_col : s.b_row;
  return Arguments(cutlass::gemm::GemmUniversalMode::kBatched,
                   cutlass::gemm::GemmCoord(static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k)),
                   static_cast<int>(s.batch), {alpha, beta}, s.a, s.b, s.c, s.c, s.a_batch, s.b_batch, s.c_batch,
                   s.c_batch, typename Gemm::LayoutA::Stride(lda), typename Gemm::LayoutB::Stride(ldb),
                   typename Gemm::LayoutC::Stride(s.c_row), typename Gemm::LayoutC::Stride(s.c_row));
}

template <class Gemm>
std::string refusal(const GemmShape& s, const GemmDevice& device) {
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  if (s.m > kMaxInt || s.n > kMaxInt || s.k > kMaxInt) return "an extent beyond 2^31 - 1 (its problem shape is 32-bit)";
  if (s.batch > 65535) return "a batch beyond 65535 (the grid's z extent)";
  if (!gemm_aligned(s, 16)) {
    return "16-byte accesses need aligned addresses, leading dimensions, batch strides and contiguous extents";
  }
  if (static_cast<int>(sizeof(typename Gemm::Operator::GemmKernel::SharedStorage)) > device.max_shared_bytes_optin) {
    return "its shared memory exceeds the device's";
  }
  if (Gemm::Operator::can_implement(arguments_of<Gemm>(s, 1.0f, 0.0f)) != cutlass::Status::kSuccess) {
    return "CUTLASS can_implement refused the problem";
  }
  return "";
}

template <class Gemm>
class Sm80Runner final : public GemmRunner {
 public:
  explicit Sm80Runner(const GemmShape& shape) {
    const auto args = arguments_of<Gemm>(shape, 1.0f, 0.0f);
    workspace_bytes_ = static_cast<int64_t>(Gemm::Operator::get_workspace_size(args));
    if (workspace_bytes_ != 0) {
      throw Error(Status::internal, "sm80 gemm: a batched instance asked for workspace; allowed: none");
    }
    const cutlass::Status status = operator_.initialize(args, nullptr, nullptr);
    if (status != cutlass::Status::kSuccess) {
      cudaGetLastError();
      throw Error(Status::cuda_error, std::string("sm80 gemm: initialize failed: ") + cutlassGetStatusString(status));
    }
  }

  int64_t workspace_bytes() const override { return workspace_bytes_; }

  void run(const GemmShape& shape, float alpha, float beta, void*, cudaStream_t stream) const override {
    typename Gemm::Operator op = operator_;
    op.update(arguments_of<Gemm>(shape, alpha, beta));
    const cutlass::Status status = op.run(stream);
    check_launch("sm80 gemm");
    if (status != cutlass::Status::kSuccess) {
      throw Error(Status::cuda_error, std::string("sm80 gemm: launch failed: ") + cutlassGetStatusString(status));
    }
  }

 private:
  typename Gemm::Operator operator_;
  int64_t workspace_bytes_ = 0;
};

template <class Gemm>
std::unique_ptr<GemmRunner> make_runner(const GemmShape& shape, const GemmDevice&) {
  return std::make_unique<Sm80Runner<Gemm>>(shape);
}

template <class Gemm>
const GemmKernel& kernel_entry(const char* name, DType dtype, GemmMath math) {
  static const GemmKernel kernel = [&] {
    GemmKernel k;
    k.name = name;
    k.tier = GemmTier::sm80;
    k.dtype = dtype;
    k.math = math;
    k.a_k_major = Gemm::kAKMajor ? 1 : 0;
    k.b_k_major = Gemm::kBKMajor ? 1 : 0;
    k.architecture = 80;
    k.tile_m = Gemm::kTileM;
    k.tile_n = Gemm::kTileN;
    k.refusal = &refusal<Gemm>;
    k.make_runner = &make_runner<Gemm>;
    return k;
  }();
  return kernel;
}

}  // namespace attnkit::cuda::gemm::sm80
