// Rebinding a CUDA launch to new tensors (rebind_forward_launch / rebind_backward_launch in
// src/cuda/fmha/fmha_arguments.hpp, fmha_backward_arguments.hpp): a plan makes its launch once, for the
// call it was made from, and points it at each later call's tensors. For every mask, layout and registry
// config, the launch made for problem a and rebound to problem b (same plan key: only the data pointers
// differ, at the same alignment) equals the launch made for b, field by field. Host-only (no GPU needed:
// make_*_launch only computes from shapes, never reads the tensors, so the addresses are fake), in CUDA
// builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include "core/attention_shape.hpp"
#include "cuda/fmha/fmha_arguments.hpp"
#include "cuda/fmha/fmha_backward_arguments.hpp"
#include "cuda/fmha/fmha_backward_configs.hpp"
#include "cuda/fmha/fmha_backward_params.hpp"
#include "cuda/fmha/fmha_configs.hpp"
#include "cuda/fmha/fmha_params.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(FmhaLaunchRebind, SkipsWithoutCuda) {
  GTEST_SKIP() << "this build has no CUDA backend (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

using cuda::WindowRule;
using cuda::fmha::BackwardListBuildParams;
using cuda::fmha::BackwardTileLists;
using cuda::fmha::FmhaBackwardKernel;
using cuda::fmha::FmhaBackwardLaunch;
using cuda::fmha::FmhaBackwardParams;
using cuda::fmha::FmhaKernel;
using cuda::fmha::FmhaLaunch;
using cuda::fmha::FmhaParams;
using cuda::fmha::KvTileOrder;
using cuda::fmha::PositionalBias;
using cuda::fmha::TileListBuildParams;
using cuda::fmha::TokenSpace;

// ---------------------------------------------------------------------------------------------------------
// Field-by-field equality. The launch structs have padding (bools, int32s before int64s), whose bytes
// the make functions leave unspecified, so a memcmp of whole structs could fail on equal launches. Members
// without padding are compared as bytes; structs with padding have their fields listed below, and
// LaunchRebindLayout checks that the lists name every field (a new field fails it until it is listed here).

// clang-format off
#define ATTNKIT_TOKEN_SPACE_FIELDS(X) X(extent) X(box_log2) X(box_shift) X(flat_extent) X(decompose)
#define ATTNKIT_WINDOW_RULE_FIELDS(X) X(kind) X(window) X(stride) X(causal) X(prefix_offset)
#define ATTNKIT_FMHA_PARAMS_FIELDS(X)                                                                         \
  X(q) X(k) X(v) X(o) X(lse) X(q_space) X(kv_space) X(dims) X(dilation) X(rule) X(q_tiles) X(total_q_tiles) \
  X(batch) X(heads_q) X(heads_per_kv) X(heads_per_cta) X(head_dim) X(head_dim_v) X(scale_log2) X(list) X(rpb)
#define ATTNKIT_POSITIONAL_BIAS_FIELDS(X) X(data) X(type) X(head_stride) X(stride) X(kernel_size) X(max_offset)
#define ATTNKIT_TILE_LIST_BUILD_FIELDS(X)                                                                       \
  X(kind) X(mask) X(mask_stride) X(block_q) X(block_k) X(seq_q) X(seq_k) X(q_tiles) X(kv_tiles) X(mask_batch) \
  X(mask_heads) X(blocks_align_with_tiles) X(classes) X(entries) X(counts) X(bits)
#define ATTNKIT_FMHA_LAUNCH_FIELDS(X) X(params) X(tile_list) X(multiprocessors)
#define ATTNKIT_BACKWARD_TILE_LISTS_FIELDS(X)                                                            \
  X(q_entries) X(q_counts) X(kv_entries) X(kv_counts) X(q_tiles) X(kv_tiles) X(mask_batch) X(mask_heads) \
  X(kind) X(mask) X(key_bits) X(key_words) X(mask_stride) X(block_q) X(block_k)
#define ATTNKIT_KV_TILE_ORDER_FIELDS(X) X(positions) X(groups) X(first_head) X(position) X(descending)
#define ATTNKIT_FMHA_BACKWARD_PARAMS_FIELDS(X)                                                                      \
  X(q) X(k) X(v) X(o) X(d_o) X(lse) X(d_q) X(d_k) X(d_v) X(q_space) X(kv_space) X(dims) X(dilation) X(rule)       \
  X(q_tile_origins) X(q_tiles) X(kv_tiles) X(total_q_tiles) X(total_kv_tiles) X(batch) X(heads_q) X(heads_kv) X(heads_per_kv) X(heads_per_cta) \
  X(head_dim) X(head_dim_v) X(scale) X(scale_log2) X(lse_log2) X(delta) X(use_lists) X(list) X(accumulate_dq)   \
  X(ordered_dq) X(dq_turns) X(dq_turn_table) X(visitor_bounds) X(dq_accum) X(zero_fill) X(zero_fill_chunks)     \
  X(dq_done)                                                                                                    \
  X(rpb) X(grad_rpb) X(rpb_partial) X(rpb_entries) X(kv_splits) X(partial_width) X(dk_partial) X(dv_partial) X(kv_order)
#define ATTNKIT_BACKWARD_LIST_BUILD_FIELDS(X)                                                                   \
  X(kind) X(mask) X(mask_stride) X(block_q) X(block_k) X(seq_q) X(seq_k) X(q_tiles) X(kv_tiles) X(mask_batch) \
  X(mask_heads) X(classes) X(q_entries) X(q_counts) X(kv_entries) X(kv_counts) X(turn_table) X(key_bits)
#define ATTNKIT_FMHA_BACKWARD_LAUNCH_FIELDS(X) X(params) X(lists) X(deterministic)
// clang-format on

void expect_same(const TokenSpace& a, const TokenSpace& b, const std::string& path);
void expect_same(const WindowRule& a, const WindowRule& b, const std::string& path);
void expect_same(const PositionalBias& a, const PositionalBias& b, const std::string& path);
void expect_same(const FmhaParams& a, const FmhaParams& b, const std::string& path);
void expect_same(const TileListBuildParams& a, const TileListBuildParams& b, const std::string& path);
void expect_same(const FmhaLaunch& a, const FmhaLaunch& b, const std::string& path);
void expect_same(const BackwardTileLists& a, const BackwardTileLists& b, const std::string& path);
void expect_same(const KvTileOrder& a, const KvTileOrder& b, const std::string& path);
void expect_same(const FmhaBackwardParams& a, const FmhaBackwardParams& b, const std::string& path);
void expect_same(const BackwardListBuildParams& a, const BackwardListBuildParams& b, const std::string& path);
void expect_same(const FmhaBackwardLaunch& a, const FmhaBackwardLaunch& b, const std::string& path);

// A member without padding (scalar, pointer, enum, or a struct of those such as TensorAddress).
template <class T>
void expect_same(const T& a, const T& b, const std::string& path) {
  static_assert(std::has_unique_object_representations_v<T> || std::is_floating_point_v<T>,
                "a member with padding bytes: give its type an expect_same overload listing its fields");
  EXPECT_TRUE(std::memcmp(&a, &b, sizeof(T)) == 0) << path << " differs";
}

template <class T, size_t N>
void expect_same(const T (&a)[N], const T (&b)[N], const std::string& path) {
  if constexpr (std::has_unique_object_representations_v<T>) {
    EXPECT_TRUE(std::memcmp(a, b, sizeof(a)) == 0) << path << " differs";
  } else {
    for (size_t i = 0; i < N; ++i) expect_same(a[i], b[i], path + "[" + std::to_string(i) + "]");
  }
}

#define ATTNKIT_EXPECT_SAME_FIELD(field) expect_same(a.field, b.field, path + "." #field);

void expect_same(const TokenSpace& a, const TokenSpace& b, const std::string& path) {
  ATTNKIT_TOKEN_SPACE_FIELDS(ATTNKIT_EXPECT_SAME_FIELD)
}
void expect_same(const WindowRule& a, const WindowRule& b, const std::string& path) {
  ATTNKIT_WINDOW_RULE_FIELDS(ATTNKIT_EXPECT_SAME_FIELD)
}
void expect_same(const PositionalBias& a, const PositionalBias& b, const std::string& path) {
  ATTNKIT_POSITIONAL_BIAS_FIELDS(ATTNKIT_EXPECT_SAME_FIELD)
}
void expect_same(const FmhaParams& a, const FmhaParams& b, const std::string& path) {
  ATTNKIT_FMHA_PARAMS_FIELDS(ATTNKIT_EXPECT_SAME_FIELD)
}
void expect_same(const TileListBuildParams& a, const TileListBuildParams& b, const std::string& path) {
  ATTNKIT_TILE_LIST_BUILD_FIELDS(ATTNKIT_EXPECT_SAME_FIELD)
}
void expect_same(const FmhaLaunch& a, const FmhaLaunch& b, const std::string& path) {
  ATTNKIT_FMHA_LAUNCH_FIELDS(ATTNKIT_EXPECT_SAME_FIELD)
}
void expect_same(const BackwardTileLists& a, const BackwardTileLists& b, const std::string& path) {
  ATTNKIT_BACKWARD_TILE_LISTS_FIELDS(ATTNKIT_EXPECT_SAME_FIELD)
}
void expect_same(const KvTileOrder& a, const KvTileOrder& b, const std::string& path) {
  ATTNKIT_KV_TILE_ORDER_FIELDS(ATTNKIT_EXPECT_SAME_FIELD)
}
void expect_same(const FmhaBackwardParams& a, const FmhaBackwardParams& b, const std::string& path) {
  ATTNKIT_FMHA_BACKWARD_PARAMS_FIELDS(ATTNKIT_EXPECT_SAME_FIELD)
}
void expect_same(const BackwardListBuildParams& a, const BackwardListBuildParams& b, const std::string& path) {
  ATTNKIT_BACKWARD_LIST_BUILD_FIELDS(ATTNKIT_EXPECT_SAME_FIELD)
}
void expect_same(const FmhaBackwardLaunch& a, const FmhaBackwardLaunch& b, const std::string& path) {
  ATTNKIT_FMHA_BACKWARD_LAUNCH_FIELDS(ATTNKIT_EXPECT_SAME_FIELD)
}

#undef ATTNKIT_EXPECT_SAME_FIELD

// Where a member lies in its struct.
struct FieldSpan {
  const char* name;
  size_t offset;
  size_t size;
  size_t align;
};

size_t round_up(size_t value, size_t align) { return (value + align - 1) / align * align; }

// "" when `fields`, in declaration order, leave no byte of a struct of `size` and `align` unaccounted for
// but padding; else the first gap, which is where an unlisted member lies.
std::string first_gap(size_t size, size_t align, std::initializer_list<FieldSpan> fields) {
  size_t end = 0;
  const char* previous = "the start";
  for (const FieldSpan& field : fields) {
    if (field.offset != round_up(end, field.align)) {
      return std::string("a member between ") + previous + " and " + field.name + " is not compared";
    }
    end = field.offset + field.size;
    previous = field.name;
  }
  if (round_up(end, align) != size) return std::string("a member after ") + previous + " is not compared";
  return "";
}

#define ATTNKIT_FIELD_SPAN(field) \
  FieldSpan{#field, offsetof(Type, field), sizeof(Type::field), alignof(decltype(Type::field))},

template <class T>
void expect_fields_listed(const std::string& gap, const char* type) {
  static_assert(std::is_standard_layout_v<T>, "offsetof needs a standard-layout type");
  EXPECT_EQ(gap, "") << type << ": add the member to this test's field list (and to the rebind if it is a pointer)";
}

TEST(LaunchRebindLayout, TheComparisonsNameEveryFieldOfTheLaunchStructs) {
  {
    using Type = TokenSpace;
    expect_fields_listed<Type>(first_gap(sizeof(Type), alignof(Type), {ATTNKIT_TOKEN_SPACE_FIELDS(ATTNKIT_FIELD_SPAN)}),
                               "TokenSpace");
  }
  {
    using Type = WindowRule;
    expect_fields_listed<Type>(first_gap(sizeof(Type), alignof(Type), {ATTNKIT_WINDOW_RULE_FIELDS(ATTNKIT_FIELD_SPAN)}),
                               "WindowRule");
  }
  {
    using Type = PositionalBias;
    expect_fields_listed<Type>(
        first_gap(sizeof(Type), alignof(Type), {ATTNKIT_POSITIONAL_BIAS_FIELDS(ATTNKIT_FIELD_SPAN)}), "PositionalBias");
  }
  {
    using Type = FmhaParams;
    expect_fields_listed<Type>(first_gap(sizeof(Type), alignof(Type), {ATTNKIT_FMHA_PARAMS_FIELDS(ATTNKIT_FIELD_SPAN)}),
                               "FmhaParams");
  }
  {
    using Type = TileListBuildParams;
    expect_fields_listed<Type>(
        first_gap(sizeof(Type), alignof(Type), {ATTNKIT_TILE_LIST_BUILD_FIELDS(ATTNKIT_FIELD_SPAN)}),
        "TileListBuildParams");
  }
  {
    using Type = FmhaLaunch;
    expect_fields_listed<Type>(first_gap(sizeof(Type), alignof(Type), {ATTNKIT_FMHA_LAUNCH_FIELDS(ATTNKIT_FIELD_SPAN)}),
                               "FmhaLaunch");
  }
  {
    using Type = BackwardTileLists;
    expect_fields_listed<Type>(
        first_gap(sizeof(Type), alignof(Type), {ATTNKIT_BACKWARD_TILE_LISTS_FIELDS(ATTNKIT_FIELD_SPAN)}),
        "BackwardTileLists");
  }
  {
    using Type = KvTileOrder;
    expect_fields_listed<Type>(
        first_gap(sizeof(Type), alignof(Type), {ATTNKIT_KV_TILE_ORDER_FIELDS(ATTNKIT_FIELD_SPAN)}), "KvTileOrder");
  }
  {
    using Type = FmhaBackwardParams;
    expect_fields_listed<Type>(
        first_gap(sizeof(Type), alignof(Type), {ATTNKIT_FMHA_BACKWARD_PARAMS_FIELDS(ATTNKIT_FIELD_SPAN)}),
        "FmhaBackwardParams");
  }
  {
    using Type = BackwardListBuildParams;
    expect_fields_listed<Type>(
        first_gap(sizeof(Type), alignof(Type), {ATTNKIT_BACKWARD_LIST_BUILD_FIELDS(ATTNKIT_FIELD_SPAN)}),
        "BackwardListBuildParams");
  }
  {
    using Type = FmhaBackwardLaunch;
    expect_fields_listed<Type>(
        first_gap(sizeof(Type), alignof(Type), {ATTNKIT_FMHA_BACKWARD_LAUNCH_FIELDS(ATTNKIT_FIELD_SPAN)}),
        "FmhaBackwardLaunch");
  }
}

#undef ATTNKIT_FIELD_SPAN

// ---------------------------------------------------------------------------------------------------------
// Problems at fake addresses: 256-byte aligned, never dereferenced.

const Device kGpu{DeviceType::cuda, 0};

struct LaunchCase {
  const char* name;
  DType dtype = DType::f16;
  int64_t batch = 2;
  std::vector<int64_t> tokens{};
  std::vector<int64_t> tokens_kv{};  // empty: same as tokens
  int64_t heads_q = 4;
  int64_t heads_kv = 2;
  int64_t head_dim = 64;
  int64_t head_dim_v = 64;
  AttentionMask mask{};
  std::vector<int64_t> mask_extents{};  // block and element masks
  // packed: q, k and v are views of one [B, *tokens, 3, H, D] tensor (equal heads and head dims);
  // padded: every view's token and head strides are those of a larger buffer (token strides that do
  // not collapse into one sequence stride).
  enum class Layout { contiguous, packed, padded } layout = Layout::contiguous;
};

void PrintTo(const LaunchCase& c, std::ostream* os) { *os << c.name; }

std::vector<int64_t> layout_extents(int64_t batch, const std::vector<int64_t>& tokens, int64_t heads, int64_t width) {
  std::vector<int64_t> extents{batch};
  extents.insert(extents.end(), tokens.begin(), tokens.end());
  extents.push_back(heads);
  if (width > 0) extents.push_back(width);
  return extents;
}

// Row-major strides of extents + padding (the last dimension stays contiguous).
TensorView strided_view(std::uintptr_t address, DType dtype, const std::vector<int64_t>& extents,
                        const std::vector<int64_t>& padding) {
  TensorView view;
  view.data = reinterpret_cast<void*>(address);
  view.dtype = dtype;
  view.device = kGpu;
  view.rank = static_cast<int32_t>(extents.size());
  int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.extents[static_cast<size_t>(d)] = extents[static_cast<size_t>(d)];
    view.strides[static_cast<size_t>(d)] = stride;
    stride *= extents[static_cast<size_t>(d)] + padding[static_cast<size_t>(d)];
  }
  return view;
}

// Padding of a [B, *tokens, H(, X)] view in the given layout: none, or 3 tokens on the last token dimension
// and 8 elements on the rows (strides stay multiples of 8 elements, as the kernels need).
std::vector<int64_t> padding_of(const LaunchCase& c, size_t rank, bool has_width) {
  std::vector<int64_t> padding(rank, 0);
  if (c.layout != LaunchCase::Layout::padded) return padding;
  const size_t heads = has_width ? rank - 2 : rank - 1;
  padding[heads - 1] = 3;
  if (has_width) padding[rank - 1] = 8;
  return padding;
}

// Tensor i of a problem lies at base + i * 16 MiB.
std::uintptr_t slot(std::uintptr_t base, int i) {
  return base + static_cast<std::uintptr_t>(i) * (std::uintptr_t{1} << 24);
}

// The backward problem of `c` at `base` (its forward takes q, k, v, out, lse, the scale and the mask).
AttentionBackward make_problem(const LaunchCase& c, std::uintptr_t base) {
  const std::vector<int64_t> tokens_kv = c.tokens_kv.empty() ? c.tokens : c.tokens_kv;
  const auto q_shape = layout_extents(c.batch, c.tokens, c.heads_q, c.head_dim);
  const auto k_shape = layout_extents(c.batch, tokens_kv, c.heads_kv, c.head_dim);
  const auto v_shape = layout_extents(c.batch, tokens_kv, c.heads_kv, c.head_dim_v);
  const auto o_shape = layout_extents(c.batch, c.tokens, c.heads_q, c.head_dim_v);
  const auto lse_shape = layout_extents(c.batch, c.tokens, c.heads_q, 0);
  auto view = [&](int i, DType dtype, const std::vector<int64_t>& extents, bool has_width) {
    return strided_view(slot(base, i), dtype, extents, padding_of(c, extents.size(), has_width));
  };
  AttentionBackward p;
  if (c.layout == LaunchCase::Layout::packed) {
    // [B, *tokens, 3, H, D] seen as three [B, *tokens, H, D] views.
    const size_t rank = q_shape.size();
    const int64_t row = c.heads_q * c.head_dim;
    const int64_t bytes = static_cast<int64_t>(dtype_size(c.dtype));
    TensorView packed = strided_view(slot(base, 0), c.dtype, q_shape, std::vector<int64_t>(rank, 0));
    int64_t stride = 3 * row;
    for (size_t d = rank - 2; d-- > 0;) {
      packed.strides[d] = stride;
      stride *= q_shape[d];
    }
    p.q = packed;
    p.k = packed;
    p.k.data = reinterpret_cast<void*>(slot(base, 0) + static_cast<std::uintptr_t>(row * bytes));
    p.v = packed;
    p.v.data = reinterpret_cast<void*>(slot(base, 0) + static_cast<std::uintptr_t>(2 * row * bytes));
  } else {
    p.q = view(0, c.dtype, q_shape, true);
    p.k = view(1, c.dtype, k_shape, true);
    p.v = view(2, c.dtype, v_shape, true);
  }
  p.out = view(3, c.dtype, o_shape, true);
  p.lse = view(4, DType::f32, lse_shape, false);
  p.grad_out = view(5, c.dtype, o_shape, true);
  p.grad_q = view(6, c.dtype, q_shape, true);
  p.grad_k = view(7, c.dtype, k_shape, true);
  p.grad_v = view(8, c.dtype, v_shape, true);
  p.mask = c.mask;
  if (c.mask.kind == MaskKind::block || c.mask.kind == MaskKind::element) {
    // A mask view of a larger buffer: rows padded by 5 columns.
    std::vector<int64_t> padding(c.mask_extents.size(), 0);
    padding.back() = 5;
    TensorView& mask = c.mask.kind == MaskKind::block ? p.mask.block_mask : p.mask.element_mask;
    mask = strided_view(slot(base, 9), DType::boolean, c.mask_extents, padding);
  }
  return p;
}

AttentionForward forward_of(const AttentionBackward& b, bool with_lse) {
  AttentionForward f;
  f.q = b.q;
  f.k = b.k;
  f.v = b.v;
  f.out = b.out;
  if (with_lse) f.lse = b.lse;
  f.scale = b.scale;
  f.mask = b.mask;
  return f;
}

constexpr std::uintptr_t kBaseA = 0x100000000;
constexpr std::uintptr_t kBaseB = 0x7f0000000;  // another 256-byte aligned base: same alignment everywhere

std::vector<LaunchCase> launch_cases() {
  std::vector<LaunchCase> cases;
  {
    LaunchCase c{"Dense"};
    c.tokens = {300};
    c.tokens_kv = {257};
    cases.push_back(c);
  }
  {
    LaunchCase c{"DenseBf16NarrowHeads"};
    c.dtype = DType::bf16;
    c.tokens = {129};
    c.head_dim = 40;
    c.head_dim_v = 56;
    c.heads_kv = 1;
    cases.push_back(c);
  }
  {
    LaunchCase c{"CausalBottomRight"};
    c.tokens = {100};
    c.tokens_kv = {260};
    c.mask = causal_mask(CausalAlignment::bottom_right);
    cases.push_back(c);
  }
  {
    LaunchCase c{"Neighborhood1dDilatedStridedCausal"};
    c.tokens = {200};
    c.mask = neighborhood_mask({7}, {3}, {2}, {true});
    cases.push_back(c);
  }
  {
    LaunchCase c{"Neighborhood2dDilatedStrided"};
    c.tokens = {20, 36};
    c.mask = neighborhood_mask({5, 7}, {2, 1}, {1, 3}, {false, true});
    cases.push_back(c);
  }
  {
    LaunchCase c{"Neighborhood3dDilatedStrided"};
    c.batch = 1;
    c.tokens = {6, 10, 12};
    c.head_dim = c.head_dim_v = 128;
    c.mask = neighborhood_mask({3, 5, 5}, {1, 2, 1}, {1, 1, 2});
    cases.push_back(c);
  }
  {
    LaunchCase c{"BlockMask"};
    c.tokens = {200};
    c.tokens_kv = {333};
    c.mask = block_sparse_mask(TensorView{}, 64, 32);
    c.mask_extents = {1, 4, 4, 11};
    cases.push_back(c);
  }
  {
    LaunchCase c{"ElementMask"};
    c.tokens = {150};
    c.tokens_kv = {170};
    c.mask = element_sparse_mask(TensorView{});
    c.mask_extents = {2, 1, 150, 170};
    cases.push_back(c);
  }
  {
    LaunchCase c{"PackedQkvCausal"};
    c.tokens = {96};
    c.heads_kv = c.heads_q;
    c.mask = causal_mask();
    c.layout = LaunchCase::Layout::packed;
    cases.push_back(c);
  }
  {
    LaunchCase c{"PaddedTokens2dDense"};
    c.tokens = {9, 13};
    c.layout = LaunchCase::Layout::padded;
    cases.push_back(c);
  }
  {
    LaunchCase c{"PaddedTokens2dNeighborhood"};
    c.tokens = {9, 13};
    c.mask = neighborhood_mask({3, 5}, {2, 1});
    c.layout = LaunchCase::Layout::padded;
    cases.push_back(c);
  }
  {
    LaunchCase c{"PaddedElementMask2d"};
    c.tokens = {9, 13};
    c.mask = element_sparse_mask(TensorView{});
    c.mask_extents = {1, 4, 117, 117};
    c.layout = LaunchCase::Layout::padded;
    cases.push_back(c);
  }
  return cases;
}

class FmhaLaunchRebind : public ::testing::TestWithParam<LaunchCase> {};

TEST_P(FmhaLaunchRebind, AForwardLaunchReboundToAnotherProblemEqualsTheLaunchMadeForIt) {
  const LaunchCase& c = GetParam();
  const cuda::fmha::FmhaPolicyKind policy = cuda::fmha::fmha_policy_for(c.mask.kind);
  int checked = 0;
  for (const bool with_lse : {true, false}) {
    const AttentionForward a = forward_of(make_problem(c, kBaseA), with_lse);
    const AttentionForward b = forward_of(make_problem(c, kBaseB), with_lse);
    const detail::AttentionShape shape = detail::describe_attention(b.q, b.k, b.v, b.scale);
    ASSERT_NO_THROW(cuda::fmha::check_forward_supported(b, shape)) << "test precondition";
    for (const FmhaKernel& kernel : cuda::fmha::fmha_forward_kernels()) {
      if (kernel.config.dtype != c.dtype || kernel.config.policy != policy ||
          kernel.config.head_dim < std::max(shape.head_dim, shape.head_dim_v) ||
          (c.mask.kind == MaskKind::neighborhood &&
           !cuda::fmha::fmha_config_serves_neighborhood(kernel.config, shape.token_dims))) {
        continue;
      }
      SCOPED_TRACE(cuda::fmha::fmha_config_name(kernel.config) + (with_lse ? " with lse" : " without lse"));
      const FmhaLaunch made_for_b = cuda::fmha::make_forward_launch(b, shape, kernel.config);
      FmhaLaunch rebound = cuda::fmha::make_forward_launch(a, shape, kernel.config);
      ASSERT_NE(rebound.params.q.data, made_for_b.params.q.data) << "test precondition: a and b differ";
      cuda::fmha::rebind_forward_launch(rebound, b);
      expect_same(rebound, made_for_b, "launch");
      ++checked;
    }
  }
  if (checked == 0) GTEST_SKIP() << "this build compiles no forward kernel of this dtype, head dim and policy";
}

TEST_P(FmhaLaunchRebind, ABackwardLaunchReboundToAnotherProblemEqualsTheLaunchMadeForIt) {
  const LaunchCase& c = GetParam();
  const cuda::fmha::FmhaBackwardPolicy policy = cuda::fmha::fmha_backward_policy_for(c.mask.kind);
  int checked = 0;
  for (const bool deterministic : {false, true}) {
    for (const int32_t kv_splits : {0, 3}) {
      AttentionBackward a = make_problem(c, kBaseA);
      AttentionBackward b = make_problem(c, kBaseB);
      a.deterministic = b.deterministic = deterministic;
      a.kv_splits = b.kv_splits = kv_splits;
      const detail::AttentionShape shape = detail::describe_attention(b.q, b.k, b.v, b.scale);
      ASSERT_NO_THROW(cuda::fmha::check_backward_supported(b, shape)) << "test precondition";
      for (const FmhaBackwardKernel& kernel : cuda::fmha::fmha_backward_kernels()) {
        if (kernel.config.dtype != c.dtype || kernel.config.policy != policy ||
            kernel.config.head_dim < std::max(shape.head_dim, shape.head_dim_v)) {
          continue;
        }
        SCOPED_TRACE(cuda::fmha::fmha_backward_config_name(kernel.config) +
                     (deterministic ? " deterministic" : " fast") + " kv_splits " + std::to_string(kv_splits));
        const FmhaBackwardLaunch made_for_b = cuda::fmha::make_backward_launch(b, shape, kernel.config, 132);
        FmhaBackwardLaunch rebound = cuda::fmha::make_backward_launch(a, shape, kernel.config, 132);
        ASSERT_NE(rebound.params.q.data, made_for_b.params.q.data) << "test precondition: a and b differ";
        cuda::fmha::rebind_backward_launch(rebound, b);
        expect_same(rebound, made_for_b, "launch");
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "this build compiles no backward kernel of this dtype, head dim and policy";
}

// A block or element mask given as a stride-0 view over the batch or the heads (torch's expand of a shared
// mask) is the broadcast mask it is: the launch builds one set of tile lists, as for extent 1, forward and
// backward; a mask with distinct slices builds one per slice.
TEST(FmhaLaunchMaskSlices, StrideZeroBatchAndHeadDimensionsOfAMaskBuildOneSetOfTileLists) {
  for (const MaskKind kind : {MaskKind::block, MaskKind::element}) {
    LaunchCase c{"ExpandedMask"};
    c.tokens = {200};
    c.tokens_kv = {170};
    c.mask = kind == MaskKind::block ? block_sparse_mask(TensorView{}, 64, 32) : element_sparse_mask(TensorView{});
    c.mask_extents = kind == MaskKind::block ? std::vector<int64_t>{2, 4, 4, 6} : std::vector<int64_t>{2, 4, 200, 170};
    for (const bool expanded : {false, true}) {
      SCOPED_TRACE(std::string(kind == MaskKind::block ? "block" : "element") + (expanded ? ", expanded" : ""));
      AttentionBackward backward = make_problem(c, kBaseA);
      TensorView& mask = kind == MaskKind::block ? backward.mask.block_mask : backward.mask.element_mask;
      if (expanded) mask.strides[0] = mask.strides[1] = 0;
      const AttentionForward forward = forward_of(backward, true);
      const detail::AttentionShape shape =
          detail::describe_attention(backward.q, backward.k, backward.v, backward.scale);
      const int32_t slices = expanded ? 1 : 2 * 4;
      int checked = 0;
      for (const FmhaKernel& kernel : cuda::fmha::fmha_forward_kernels()) {
        if (kernel.config.dtype != c.dtype || kernel.config.policy != cuda::fmha::FmhaPolicyKind::tile_list ||
            kernel.config.head_dim < shape.head_dim) {
          continue;
        }
        const FmhaLaunch launch = cuda::fmha::make_forward_launch(forward, shape, kernel.config);
        EXPECT_EQ(launch.tile_list.mask_batch * launch.tile_list.mask_heads, slices) << "forward";
        ++checked;
      }
      for (const FmhaBackwardKernel& kernel : cuda::fmha::fmha_backward_kernels()) {
        if (kernel.config.dtype != c.dtype || kernel.config.policy != cuda::fmha::FmhaBackwardPolicy::tile_list ||
            kernel.config.head_dim < shape.head_dim) {
          continue;
        }
        const FmhaBackwardLaunch launch = cuda::fmha::make_backward_launch(backward, shape, kernel.config, 132);
        EXPECT_EQ(launch.lists.mask_batch * launch.lists.mask_heads, slices) << "backward";
        ++checked;
      }
      EXPECT_GT(checked, 0) << "no f16 head-dim-64 tile-list kernel in this build";
    }
  }
}

// The kernels of 192 query rows: a 1-D window (dilated: groups of 101 and 100 tokens) is made into tiles of 192 rows
// per dilation group in boxes of 256; a neighborhood of two dimensions is refused when its launch is made (a kernel
// named by ATTNKIT_FMHA_CONFIG or a tuner cache), naming what those kernels serve.
TEST(FmhaLaunchTiles, KernelsOf192QueryRowsServe1DWindowsAndRefuseWindowsOfMoreDimensions) {
  int checked = 0;
  for (const FmhaKernel& kernel : cuda::fmha::fmha_forward_kernels()) {
    if (kernel.config.block_m != 192 || kernel.config.dtype != DType::f16) continue;
    LaunchCase one_d{"OneDimension"};
    one_d.tokens = {201};
    one_d.mask = neighborhood_mask({65}, {2});
    const AttentionForward forward = forward_of(make_problem(one_d, kBaseA), true);
    const detail::AttentionShape shape = detail::describe_attention(forward.q, forward.k, forward.v, forward.scale);
    const FmhaLaunch launch = cuda::fmha::make_forward_launch(forward, shape, kernel.config);
    EXPECT_EQ(launch.params.q_tiles[0], 1) << "101 tokens a group: one tile of 192 rows";
    EXPECT_EQ(launch.params.total_q_tiles, 2) << "one tile in each of two dilation groups";
    EXPECT_EQ(launch.params.q_space.box_log2[0], 8);

    LaunchCase two_d{"TwoDimensions"};
    two_d.tokens = {20, 30};
    two_d.mask = neighborhood_mask({7, 7});
    const AttentionForward window = forward_of(make_problem(two_d, kBaseA), true);
    const detail::AttentionShape window_shape = detail::describe_attention(window.q, window.k, window.v, window.scale);
    try {
      (void)cuda::fmha::make_forward_launch(window, window_shape, kernel.config);
      ADD_FAILURE() << "a 2-D neighborhood on " << cuda::fmha::fmha_config_name(kernel.config) << " was not refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::unsupported);
      const std::string message = e.what();
      EXPECT_NE(message.find("192 rows serve dense, causal and 1-D neighborhood masks"), std::string::npos) << message;
      EXPECT_NE(message.find("over 2 dimensions"), std::string::npos) << message;
      EXPECT_NE(message.find("power of two"), std::string::npos) << message;
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "this build compiles no f16 kernel of 192 query rows (sm_90a kernels not built)";
}

INSTANTIATE_TEST_SUITE_P(Masks, FmhaLaunchRebind, ::testing::ValuesIn(launch_cases()),
                         [](const ::testing::TestParamInfo<LaunchCase>& info) { return info.param.name; });

#endif

}  // namespace
}  // namespace attnkit
