// retention forward and backward: shapes (zero extents too), the three modes, chunk sizes, normalize,
// per-head decays (down to 1e-300 and up to 1 - 2^-20), initial / final states and their gradients.
#include <algorithm>
#include <limits>

#include "fuzz_ops.hpp"
#include "fuzz_reference.hpp"

namespace attnkit::fuzz {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

struct Shape {
  int32_t dtype = ATTNKIT_FLOAT32;
  int64_t batch = 1, tokens = 1, heads = 1, dk = 1, dv = 1;
  std::vector<int64_t> qk() const { return {batch, tokens, heads, dk}; }
  std::vector<int64_t> v() const { return {batch, tokens, heads, dv}; }
  std::vector<int64_t> state() const { return {batch, heads, dk, dv}; }
  int32_t state_dtype() const { return dtype == ATTNKIT_FLOAT64 ? ATTNKIT_FLOAT64 : ATTNKIT_FLOAT32; }
};

Shape choose_shape(ByteSource& in) {
  Shape s;
  s.dtype = pick_float_dtype(in);
  s.batch = small_extent(in, 2);
  s.tokens = small_extent(in, 12);
  s.heads = small_extent(in, 3);
  s.dk = small_extent(in, 8);
  s.dv = small_extent(in, 8);
  return s;
}

// The scalar fields both directions share, and their corruptions.
template <class Args>
void choose_scalars(ByteSource& in, Args& args, const Shape& s, std::vector<double>& gamma, bool states) {
  args.mode = static_cast<int32_t>(in.range(ATTNKIT_RETENTION_PARALLEL, ATTNKIT_RETENTION_RECURRENT));
  args.chunk_size = in.chance(1, 4) ? 64 : in.range(1, 8);
  args.normalize = args.mode == ATTNKIT_RETENTION_PARALLEL && !states && in.chance(1, 3);
  if (in.chance(1, 2)) {
    gamma.resize(static_cast<std::size_t>(s.heads));
    for (auto& g : gamma) g = in.pick<double>({0.5, 0.9, 0.99, 1.0 - 0x1p-20, 1e-3, 1e-300, 0.97});
    args.gamma = gamma.data();
    args.gamma_count = s.heads;
  }
  make_scale(in, args.has_scale, args.scale);
  note("retention: mode " + std::to_string(args.mode) + " chunk " + std::to_string(args.chunk_size) + " normalize " +
       std::to_string(args.normalize) + (args.gamma ? ", gamma given" : ", default gamma"));
}

template <class Args>
std::vector<ScalarCorruption> scalar_corruptions(Args& args, std::vector<double>& gamma) {
  std::vector<ScalarCorruption> list;
  list.push_back([&args](ByteSource& in) {
    args.mode = in.pick<int32_t>({-1, 3, std::numeric_limits<int32_t>::max()});
    return "mode -> " + std::to_string(args.mode);
  });
  list.push_back([&args](ByteSource& in) {
    args.normalize = in.pick<int32_t>({1, -1, 2});
    return "normalize -> " + std::to_string(args.normalize);
  });
  list.push_back([&args](ByteSource& in) {
    args.chunk_size = in.pick<int64_t>({0, -1, std::numeric_limits<int64_t>::min(), kInt64Max, int64_t{1} << 40, 1});
    return "chunk_size -> " + std::to_string(args.chunk_size);
  });
  list.push_back([&args, &gamma](ByteSource& in) {
    if (gamma.empty()) gamma.assign(static_cast<std::size_t>(std::clamp<int64_t>(args.q.extents[2], 1, 64)), 0.9);
    const double value = in.pick<double>({0.0, 1.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN(),
                                          std::numeric_limits<double>::infinity(), 1.0 + 1e-16,
                                          std::numeric_limits<double>::denorm_min()});
    gamma[static_cast<std::size_t>(in.range(0, static_cast<int64_t>(gamma.size()) - 1))] = value;
    args.gamma = gamma.data();
    args.gamma_count = static_cast<int64_t>(gamma.size());
    return "a gamma -> " + std::to_string(value);
  });
  list.push_back([&args, &gamma](ByteSource& in) {
    // A count the array really holds (other than the head count), or NULL with a count.
    const int64_t count = in.pick<int64_t>({0, 1, 2, 5, -1, kInt64Max});
    if (count >= 0 && count <= 64) {
      gamma.assign(static_cast<std::size_t>(count), 0.9);
      args.gamma = count ? gamma.data() : nullptr;
    } else {
      args.gamma = nullptr;
    }
    args.gamma_count = count;
    return "gamma_count -> " + std::to_string(count) + (args.gamma ? "" : " (gamma NULL)");
  });
  list.push_back(scale_corruption(args.has_scale, args.scale));
  list.push_back([&args](ByteSource& in) {
    args.reserved = static_cast<int32_t>(in.u32());
    return std::string("reserved -> non-zero (ignored)");
  });
  return list;
}

template <class Args, class Direct>
void run_retention(ByteSource& in, Args& args, TensorSet& tensors, std::vector<double>& gamma, Direct direct,
                   const char* op) {
  const int corruptions = corruption_count(in);
  Expectation expectation;
  expectation.must_refuse = apply_corruptions(in, corruptions, tensors, scalar_corruptions(args, gamma));
  // scale * q.k overflows float16 for a scale of 1e30.
  if (extreme_scale(args.has_scale, args.scale)) expectation.finite_results = false;
  attnkit_run_options storage;
  std::vector<unsigned char> workspace;
  const attnkit_run_options* options = make_options(in, storage, workspace, corruptions > 0 && in.chance(1, 4));
  tensors.materialise(in.u32());
  const bool accepted = check_call(op, direct(&args, options), tensors, expectation);
  if (accepted && corruptions == 0 && expectation.finite_results) compare_with_reference(args);
}

}  // namespace

void fuzz_retention_forward(ByteSource& in) {
  attnkit_retention_forward_args args;
  attnkit_retention_forward_args_init(&args);
  const Shape s = choose_shape(in);
  describe(args.q, s.dtype, s.qk(), false, in);
  describe(args.k, s.dtype, s.qk(), false, in);
  describe(args.v, s.dtype, s.v(), false, in);
  describe(args.out, s.dtype, s.v(), true, in);
  const bool initial = in.chance(1, 3);
  const bool final = in.chance(1, 3);
  if (initial) describe(args.initial_state, s.state_dtype(), s.state(), false, in);
  if (final) describe(args.final_state, s.state_dtype(), s.state(), true, in);
  std::vector<double> gamma;
  choose_scalars(in, args, s, gamma, initial || final);
  note("retention forward: q " + describe_extents(args.q) + ", v " + describe_extents(args.v) +
       (initial ? ", initial_state" : "") + (final ? ", final_state" : ""));

  TensorSet tensors;
  tensors.add("q", &args.q, Role::input);
  tensors.add("k", &args.k, Role::input);
  tensors.add("v", &args.v, Role::input);
  tensors.add("out", &args.out, Role::output);
  tensors.add("initial_state", &args.initial_state, Role::input, initial);
  tensors.add("final_state", &args.final_state, Role::output, final);
  run_retention(in, args, tensors, gamma, attnkit_retention_forward, "attnkit_retention_forward");
}

void fuzz_retention_backward(ByteSource& in) {
  attnkit_retention_backward_args args;
  attnkit_retention_backward_args_init(&args);
  const Shape s = choose_shape(in);
  describe(args.q, s.dtype, s.qk(), false, in);
  describe(args.k, s.dtype, s.qk(), false, in);
  describe(args.v, s.dtype, s.v(), false, in);
  describe(args.grad_out, s.dtype, s.v(), false, in);
  describe(args.grad_q, s.dtype, s.qk(), true, in);
  describe(args.grad_k, s.dtype, s.qk(), true, in);
  describe(args.grad_v, s.dtype, s.v(), true, in);
  const bool initial = in.chance(1, 3);
  const bool grad_final = in.chance(1, 3);
  const bool grad_initial = in.chance(1, 3);
  if (initial) describe(args.initial_state, s.state_dtype(), s.state(), false, in);
  if (grad_final) describe(args.grad_final_state, s.state_dtype(), s.state(), false, in);
  if (grad_initial) describe(args.grad_initial_state, s.state_dtype(), s.state(), true, in);
  std::vector<double> gamma;
  choose_scalars(in, args, s, gamma, initial || grad_final || grad_initial);
  note("retention backward: q " + describe_extents(args.q) + ", v " + describe_extents(args.v) +
       (initial ? ", initial_state" : "") + (grad_final ? ", grad_final_state" : "") +
       (grad_initial ? ", grad_initial_state" : ""));

  TensorSet tensors;
  tensors.add("q", &args.q, Role::input);
  tensors.add("k", &args.k, Role::input);
  tensors.add("v", &args.v, Role::input);
  tensors.add("grad_out", &args.grad_out, Role::input);
  tensors.add("initial_state", &args.initial_state, Role::input, initial);
  tensors.add("grad_final_state", &args.grad_final_state, Role::input, grad_final);
  tensors.add("grad_q", &args.grad_q, Role::output);
  tensors.add("grad_k", &args.grad_k, Role::output);
  tensors.add("grad_v", &args.grad_v, Role::output);
  tensors.add("grad_initial_state", &args.grad_initial_state, Role::output, grad_initial);
  run_retention(in, args, tensors, gamma, attnkit_retention_backward, "attnkit_retention_backward");
}

}  // namespace attnkit::fuzz
