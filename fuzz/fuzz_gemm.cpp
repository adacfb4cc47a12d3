// gemm: rank 2 or 3 (batched, with batch-1 broadcasting of A and B), row- and column-major operands with
// padding, transposes, alpha and beta (beta = 0: C is poisoned with NaN and must not be read), allow_tf32.
#include <limits>

#include "fuzz_ops.hpp"
#include "fuzz_reference.hpp"

namespace attnkit::fuzz {
namespace {

// [batch?, rows, cols] in row-major (describe's layouts) or column-major order with padding.
void describe_matrix(attnkit_tensor& t, int32_t dtype, bool batched, int64_t batch, int64_t rows, int64_t cols,
                     bool is_output, ByteSource& in) {
  std::vector<int64_t> extents;
  if (batched) extents.push_back(batch);
  extents.push_back(rows);
  extents.push_back(cols);
  describe(t, dtype, extents, is_output, in);
  if (in.chance(1, 2)) {
    const int r = t.rank - 2;
    const int64_t leading = std::max<int64_t>(rows, 1) + in.range(0, 2);
    t.strides[r] = 1;
    t.strides[r + 1] = leading;
    if (batched) t.strides[0] = leading * std::max<int64_t>(cols, 1) + in.range(0, 3);
  }
}

}  // namespace

void fuzz_gemm(ByteSource& in) {
  attnkit_gemm_args args;
  attnkit_gemm_args_init(&args);
  const int32_t dtype = pick_float_dtype(in);
  const int64_t m = small_extent(in, 9), n = small_extent(in, 9), k = small_extent(in, 9);
  const bool batched = in.chance(1, 2);
  const int64_t batch = batched ? small_extent(in, 3) : 1;
  args.transpose_a = in.chance(1, 2);
  args.transpose_b = in.chance(1, 2);
  const int64_t batch_a = batched && in.chance(1, 3) ? 1 : batch;
  const int64_t batch_b = batched && in.chance(1, 3) ? 1 : batch;
  // Stored shapes: op(A) = m x k, op(B) = k x n.
  describe_matrix(args.a, dtype, batched, batch_a, args.transpose_a ? k : m, args.transpose_a ? m : k, false, in);
  describe_matrix(args.b, dtype, batched, batch_b, args.transpose_b ? n : k, args.transpose_b ? k : n, false, in);
  describe_matrix(args.c, dtype, batched, batch, m, n, true, in);
  args.alpha = in.pick<double>({1.0, 0.5, -2.0, 0.0});
  args.beta = in.chance(1, 2) ? 0.0 : in.pick<double>({1.0, 0.5, -1.0});
  args.allow_tf32 = in.chance(1, 4);
  note("gemm: a " + describe_extents(args.a) + (args.transpose_a ? " (T)" : "") + ", b " + describe_extents(args.b) +
       (args.transpose_b ? " (T)" : "") + ", c " + describe_extents(args.c) + ", alpha " + std::to_string(args.alpha) +
       ", beta " + std::to_string(args.beta));

  TensorSet tensors;
  tensors.add("a", &args.a, Role::input);
  tensors.add("b", &args.b, Role::input);
  // beta = 0: C is write-only (poisoned, so reading it shows); otherwise it is read and written.
  tensors.add("c", &args.c, args.beta == 0.0 ? Role::output : Role::inout).huge_extent_may_be_valid = true;

  std::vector<ScalarCorruption> scalars;
  scalars.push_back([&args](ByteSource& b) {
    double& field = b.chance(1, 2) ? args.alpha : args.beta;
    field = b.pick<double>({std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity()});
    return "alpha/beta -> " + std::to_string(field);
  });
  scalars.push_back([&args](ByteSource& b) {
    int32_t& field = b.chance(1, 2) ? args.transpose_a : args.transpose_b;
    field = field ? 0 : b.pick<int32_t>({1, -1, 2});
    return "a transpose flag flipped";
  });
  scalars.push_back([&args](ByteSource& b) {
    args.allow_tf32 = b.pick<int32_t>({-1, 2, std::numeric_limits<int32_t>::max()});
    args.reserved = static_cast<int32_t>(b.u32());
    return std::string("allow_tf32 / reserved -> other non-zero values (valid)");
  });
  const int corruptions = corruption_count(in);
  Expectation expectation;
  expectation.must_refuse = apply_corruptions(in, corruptions, tensors, scalars);
  attnkit_run_options storage;
  std::vector<unsigned char> workspace;
  const attnkit_run_options* options = make_options(in, storage, workspace, corruptions > 0 && in.chance(1, 4));
  tensors.materialise(in.u32());
  const TensorSlot& c = tensors.slots()[2];
  const bool accepted = check_call("attnkit_gemm", attnkit_gemm(&args, options), tensors, expectation);
  if (accepted && corruptions == 0) compare_with_reference(args, c.before.data() + c.misalign_bytes);
}

}  // namespace attnkit::fuzz
