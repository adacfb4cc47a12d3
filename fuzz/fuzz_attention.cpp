// attention forward and backward: shapes (GQA, cross attention with other token ranks, head_dim_v != D,
// zero extents), every mask kind (causal alignments, neighborhood kernel sizes / dilations / strides /
// causal dims with an optional rpb, block and element masks), layouts and dtypes; then the same arguments
// through the workspace query, the config query and the plan API (create, workspace size, run, destroy).
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include "fuzz_ops.hpp"
#include "fuzz_reference.hpp"

namespace attnkit::fuzz {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

struct Shape {
  int32_t dtype = ATTNKIT_FLOAT32;
  int64_t batch = 1, heads_kv = 1, heads_q = 1, head_dim = 1, head_dim_v = 1;
  std::vector<int64_t> tokens, tokens_kv;
};

int64_t product(const std::vector<int64_t>& values) {
  int64_t p = 1;
  for (int64_t v : values) p *= v;
  return p;
}

std::vector<int64_t> token_tensor(const Shape& s, const std::vector<int64_t>& tokens, int64_t heads, int64_t dim) {
  std::vector<int64_t> extents{s.batch};
  extents.insert(extents.end(), tokens.begin(), tokens.end());
  extents.push_back(heads);
  if (dim >= 0) extents.push_back(dim);
  return extents;
}

std::vector<int64_t> choose_tokens(ByteSource& in, int dims) {
  const int64_t max = dims == 1 ? 16 : dims == 2 ? 6 : 4;
  std::vector<int64_t> tokens;
  for (int d = 0; d < dims; ++d) tokens.push_back(small_extent(in, max));
  return tokens;
}

Shape choose_shape(ByteSource& in, int32_t mask_kind) {
  Shape s;
  s.dtype = pick_float_dtype(in);
  s.batch = small_extent(in, 2);
  const int dims = static_cast<int>(in.range(1, 3));
  s.tokens = choose_tokens(in, dims);
  s.tokens_kv = mask_kind == ATTNKIT_MASK_NEIGHBORHOOD || in.chance(1, 2)
                    ? s.tokens
                    : choose_tokens(in, static_cast<int>(in.range(1, 3)));
  s.heads_kv = small_extent(in, 2);
  s.heads_q = s.heads_kv * in.range(1, 3);
  s.head_dim = in.chance(1, 8) ? in.pick<int64_t>({32, 64, 0}) : in.range(1, 16);
  s.head_dim_v = in.chance(1, 2) ? s.head_dim : small_extent(in, 16);
  return s;
}

// Fills mask.* from the input; the mask tensors' descriptors go into the struct (registered by the caller).
struct MaskTensors {
  bool block = false, element = false, rpb = false;
};

MaskTensors build_mask(ByteSource& in, attnkit_attention_mask& mask, int32_t kind, const Shape& s) {
  MaskTensors given;
  mask.kind = kind;
  mask.causal_alignment = in.pick<int32_t>({ATTNKIT_CAUSAL_TOP_LEFT, ATTNKIT_CAUSAL_BOTTOM_RIGHT});
  const int64_t sq = product(s.tokens);
  const int64_t sk = product(s.tokens_kv);
  const int64_t mask_batch = in.chance(1, 2) ? s.batch : 1;
  const int64_t mask_heads = in.chance(1, 2) ? s.heads_q : 1;
  if (kind == ATTNKIT_MASK_NEIGHBORHOOD) {
    mask.dims = static_cast<int32_t>(s.tokens.size());
    const bool rpb = in.chance(1, 3);
    std::vector<int64_t> rpb_extents{s.heads_q};
    for (std::size_t d = 0; d < s.tokens.size(); ++d) {
      const int64_t extent = s.tokens[d];
      auto& nd = mask.neighborhood[d];
      nd.kernel_size = in.range(1, std::max<int64_t>(extent, 1));
      nd.dilation = in.range(1, std::max<int64_t>(extent / nd.kernel_size, 1));
      nd.stride = rpb ? 1 : in.range(1, nd.kernel_size);
      nd.causal = rpb ? 0 : in.chance(1, 3);
      rpb_extents.push_back(2 * nd.kernel_size - 1);
      note("neighborhood[" + std::to_string(d) + "]: kernel " + std::to_string(nd.kernel_size) + " dilation " +
           std::to_string(nd.dilation) + " stride " + std::to_string(nd.stride) + " causal " +
           std::to_string(nd.causal));
    }
    if (rpb) {
      describe(mask.rpb, in.chance(1, 2) ? ATTNKIT_FLOAT32 : s.dtype, rpb_extents, false, in);
      given.rpb = true;
    }
  } else if (kind == ATTNKIT_MASK_BLOCK) {
    mask.block_q = in.range(1, 8);
    mask.block_k = in.range(1, 8);
    const std::vector<int64_t> extents{mask_batch, mask_heads, (sq + mask.block_q - 1) / mask.block_q,
                                       (sk + mask.block_k - 1) / mask.block_k};
    describe(mask.block_mask, ATTNKIT_BOOL, extents, false, in);
    given.block = true;
    note("block mask " + describe_extents(mask.block_mask) + ", blocks " + std::to_string(mask.block_q) + " x " +
         std::to_string(mask.block_k));
  } else if (kind == ATTNKIT_MASK_ELEMENT) {
    describe(mask.element_mask, ATTNKIT_BOOL, std::vector<int64_t>{mask_batch, mask_heads, sq, sk}, false, in);
    given.element = true;
  }
  return given;
}

// After the corruptions: a block mask is read only under mask kind block, an element mask only under
// kind element (the library ignores the other fields, whatever their descriptors say).
void mark_unread_masks(TensorSet& tensors, int32_t kind) {
  if (TensorSlot* block = tensors.find("mask.block_mask")) block->unread = kind != ATTNKIT_MASK_BLOCK;
  if (TensorSlot* element = tensors.find("mask.element_mask")) element->unread = kind != ATTNKIT_MASK_ELEMENT;
}

std::vector<ScalarCorruption> mask_corruptions(attnkit_attention_mask& mask) {
  std::vector<ScalarCorruption> list;
  list.push_back([&mask](ByteSource& in) {
    mask.kind = in.pick<int32_t>({-1, 5, std::numeric_limits<int32_t>::max(), ATTNKIT_MASK_NONE, ATTNKIT_MASK_CAUSAL,
                                  ATTNKIT_MASK_NEIGHBORHOOD, ATTNKIT_MASK_BLOCK, ATTNKIT_MASK_ELEMENT});
    return "mask.kind -> " + std::to_string(mask.kind);
  });
  list.push_back([&mask](ByteSource& in) {
    mask.causal_alignment = in.pick<int32_t>({-1, 2, std::numeric_limits<int32_t>::min()});
    return "mask.causal_alignment -> " + std::to_string(mask.causal_alignment);
  });
  list.push_back([&mask](ByteSource& in) {
    mask.dims = in.pick<int32_t>({-1, 0, 4, static_cast<int32_t>(static_cast<uint32_t>(mask.dims) + 1),
                                  static_cast<int32_t>(static_cast<uint32_t>(mask.dims) - 1),
                                  std::numeric_limits<int32_t>::max()});
    return "mask.dims -> " + std::to_string(mask.dims);
  });
  list.push_back([&mask](ByteSource& in) {
    auto& nd = mask.neighborhood[in.range(0, ATTNKIT_MAX_TOKEN_DIMS - 1)];
    const int64_t value = in.pick<int64_t>({0, -1, 2, 3, 17, kInt64Max, int64_t{1} << 32, 3037000500});
    switch (in.byte() % 4) {
      case 0: nd.kernel_size = value; return "kernel_size -> " + std::to_string(value);
      case 1: nd.dilation = value; return "dilation -> " + std::to_string(value);
      case 2: nd.stride = value; return "stride -> " + std::to_string(value);
      default: nd.causal = static_cast<int32_t>(value); return "causal -> " + std::to_string(nd.causal);
    }
  });
  list.push_back([&mask](ByteSource& in) {
    int64_t& field = in.chance(1, 2) ? mask.block_q : mask.block_k;
    field = in.pick<int64_t>({0, -1, kInt64Max, int64_t{1} << 40, 1, 9});
    return "block size -> " + std::to_string(field);
  });
  list.push_back([&mask](ByteSource& in) {
    mask.element_path = in.pick<int32_t>(
        {-1, 3, std::numeric_limits<int32_t>::min(), ATTNKIT_ELEMENT_PATH_TILES, ATTNKIT_ELEMENT_PATH_SCATTERED});
    return "mask.element_path -> " + std::to_string(mask.element_path);
  });
  list.push_back([&mask](ByteSource& in) {
    mask.neighborhood[0].reserved = static_cast<int32_t>(in.u32());
    return std::string("reserved field -> non-zero (ignored)");
  });
  return list;
}

// The config query with output buffers of the chosen capacities (exact heap sizes, so an overflow is seen).
template <class Args, class Query>
void fuzz_config_query(ByteSource& in, Query query, const Args& args, const attnkit_run_options* options,
                       const TensorSet& tensors, bool accepted, const char* op) {
  const int64_t name_capacity = in.pick<int64_t>({256, 64, 1, 0, -1, 8});
  const int64_t source_capacity = in.pick<int64_t>({256, 16, 1, 0, -1, 8});
  const bool name_null = in.chance(1, 6);
  const auto buffer = [](int64_t capacity) {
    auto memory = std::make_unique<char[]>(static_cast<std::size_t>(std::max<int64_t>(capacity, 1)));
    std::memset(memory.get(), '#', static_cast<std::size_t>(std::max<int64_t>(capacity, 1)));
    return memory;
  };
  auto name = buffer(name_capacity);
  auto source = buffer(source_capacity);
  const std::string call = std::string(op) + "_config";
  const attnkit_status status =
      query(&args, options, name_null ? nullptr : name.get(), name_capacity, source.get(), source_capacity);
  const bool ok = check_status(call, status);
  check_nothing_written(call, tensors);
  if (ok && !accepted) violation(call + " accepted arguments the operation refused");
  const auto untouched = [](const char* text, int64_t capacity) {
    for (int64_t i = 0; i < std::max<int64_t>(capacity, 1); ++i) {
      if (text[i] != '#') return false;
    }
    return true;
  };
  if (!ok) {
    if (!untouched(name.get(), name_capacity) || !untouched(source.get(), source_capacity)) {
      violation(call + " refused but wrote into name or source");
    }
    return;
  }
  const auto terminated = [](const char* text, int64_t capacity) {
    return capacity > 0 && std::memchr(text, '\0', static_cast<std::size_t>(capacity)) != nullptr;
  };
  if ((!name_null && !terminated(name.get(), name_capacity)) || !terminated(source.get(), source_capacity)) {
    violation(call + " succeeded but left name or source without a NUL within its capacity");
  }
  const std::string source_text = source.get();
  if (source_text != "default" && source_text != "cache" && source_text != "tuned") {
    violation(call + " reported source '" + source_text + "'; expected default, cache or tuned");
  }
}

attnkit_status make_plan(const attnkit_attention_forward_args* args, const attnkit_run_options* options, int32_t flags,
                         attnkit_plan** plan) {
  return attnkit_attention_forward_plan(args, options, flags, plan);
}
attnkit_status make_plan(const attnkit_attention_backward_args* args, const attnkit_run_options* options, int32_t flags,
                         attnkit_plan** plan) {
  return attnkit_attention_backward_plan(args, options, flags, plan);
}

// Output bytes of every written tensor, to compare a plan's run with the direct call.
std::vector<std::vector<unsigned char>> output_bytes(const TensorSet& tensors) {
  std::vector<std::vector<unsigned char>> bytes;
  for (const auto& slot : tensors.slots()) {
    if (slot.memory && slot.written_to()) bytes.emplace_back(slot.memory.get(), slot.memory.get() + slot.memory_bytes);
  }
  return bytes;
}

// The plan API on the same arguments. The plan is accepted exactly when the direct call was (flags aside);
// a run on the same tensors gives the direct call's bits; a run with pointers that break the plan's
// presence or alignment, or a wrong count, is refused without writing.
template <class Args>
void fuzz_plan(ByteSource& in, const Args& args, const attnkit_run_options* options, TensorSet& tensors, bool accepted,
               const Expectation& expectation, const char* op) {
  const int32_t flags = in.chance(1, 8) ? in.pick<int32_t>({2, -1, 3}) : in.pick<int32_t>({0, ATTNKIT_PLAN_NO_TUNING});
  const bool flags_valid = flags == 0 || flags == ATTNKIT_PLAN_NO_TUNING;
  auto* const sentinel = reinterpret_cast<attnkit_plan*>(uintptr_t{0x5a5a5a50});
  attnkit_plan* plan = sentinel;
  const std::string call = std::string(op) + "_plan";
  const bool made = check_status(call, make_plan(&args, options, flags, &plan));
  check_nothing_written(call, tensors);
  if (!made) {
    if (plan != sentinel) violation(call + " refused but wrote *plan");
    if (accepted && flags_valid) violation(call + " refused arguments the operation accepted");
    return;
  }
  if (!accepted) violation(call + " accepted arguments the operation refused");
  if (!flags_valid) violation(call + " accepted flags " + std::to_string(flags));
  std::unique_ptr<attnkit_plan, void (*)(attnkit_plan*)> owner(plan, attnkit_plan_destroy);

  int64_t bytes = -7;
  const bool bytes_null = in.chance(1, 8);
  if (check_status("attnkit_plan_workspace_size", attnkit_plan_workspace_size(plan, bytes_null ? nullptr : &bytes))) {
    if (bytes_null) violation("attnkit_plan_workspace_size accepted bytes = NULL");
    if (bytes < 0) violation("attnkit_plan_workspace_size gave " + std::to_string(bytes));
  }

  const auto direct = output_bytes(tensors);
  tensors.repoison();
  std::vector<void*> data;
  for (const auto& slot : tensors.slots()) data.push_back(slot.field->data);
  auto count = static_cast<int32_t>(data.size());
  void* const* data_pointer = data.data();
  std::unique_ptr<unsigned char[]> shifted;
  bool run_valid = true;
  bool either = false;  // a run that may be accepted or refused
  if (in.chance(1, 4)) {
    run_valid = false;
    const auto i = static_cast<std::size_t>(in.range(0, static_cast<int64_t>(data.size()) - 1));
    switch (in.byte() % 4) {
      case 0:
        count = in.pick<int32_t>({count - 1, count + 1, 0, -1});
        note("plan run: count " + std::to_string(count));
        break;
      case 1:
        data_pointer = nullptr;
        note("plan run: data NULL");
        break;
      case 2: {
        // Present -> NULL, or absent -> a real buffer. NULL for a tensor with no elements may be accepted.
        void* const before = data[i];
        data[i] = before ? nullptr : tensors.slots()[0].field->data;
        note("plan run: data[" + std::to_string(i) + "] presence flipped");
        int64_t span = 0;
        const TensorSlot& slot = tensors.slots()[i];
        if (data[i] == before) run_valid = true;
        if (before && span_bytes(*slot.field, &span) && span == 0) either = true;
        break;
      }
      default: {
        if (data[i] == nullptr) {
          run_valid = true;
          break;
        }
        // The same bytes at another address mod 16.
        const TensorSlot& slot = tensors.slots()[i];
        shifted = std::make_unique<unsigned char[]>(slot.memory_bytes + 32);
        const auto base = (reinterpret_cast<uintptr_t>(shifted.get()) + 15) & ~uintptr_t{15};
        const auto mod = (reinterpret_cast<uintptr_t>(data[i]) + 1 + in.range(0, 13)) % 16;
        auto* moved = reinterpret_cast<unsigned char*>(base + mod);
        std::memcpy(moved, slot.data(), slot.memory_bytes - static_cast<std::size_t>(slot.misalign_bytes));
        data[i] = moved;
        note("plan run: data[" + std::to_string(i) + "] at address mod 16 = " + std::to_string(mod));
      }
    }
  }
  const std::string run = std::string(op) + " plan run";
  const attnkit_status status = attnkit_plan_run(plan, data_pointer, count, nullptr, nullptr, 0);
  if (either) {
    check_call(run, status, tensors, expectation);
  } else if (run_valid) {
    const bool ran = check_call(run, status, tensors, expectation);
    if (!ran) violation(run + " refused a run on the plan's own tensors");
    if (expectation.finite_results && tensors.inputs_finite() && output_bytes(tensors) != direct) {
      violation(run + " wrote other bits than the direct call on the same arguments");
    }
  } else {
    if (check_status(run, status)) violation(run + " accepted pointers or a count that break the plan");
    check_nothing_written(run, tensors);
  }
}

// Runs the direct call, then the queries and the plan on the same arguments.
// `prepare` runs after the memory is laid out (the backward computes its out and lse there).
template <class Args, class Direct, class Workspace, class Config, class Prepare>
void run_attention(ByteSource& in, Args& args, TensorSet& tensors, const attnkit_run_options* options,
                   Expectation expectation, int corruptions, Direct direct, Workspace workspace, Config config,
                   Prepare prepare, const char* op) {
  tensors.materialise(in.u32());
  prepare(expectation);
  const bool accepted = check_call(op, direct(&args, options), tensors, expectation);
  if (accepted && corruptions == 0 && expectation.finite_results && !extreme_scale(args.has_scale, args.scale)) {
    compare_with_reference(args);
  }
  tensors.snapshot();

  int64_t bytes = -7;
  const std::string call = std::string(op) + "_workspace_size";
  const bool sized = check_status(call, workspace(&args, options, &bytes));
  check_nothing_written(call, tensors);
  if (sized != accepted) violation(call + (sized ? " accepted" : " refused") + " what the operation did not");
  if (!sized && bytes != -7) violation(call + " refused but wrote *bytes");
  if (sized && bytes < 0) violation(call + " gave " + std::to_string(bytes));

  if (in.chance(1, 4)) fuzz_config_query(in, config, args, options, tensors, accepted, op);
  fuzz_plan(in, args, options, tensors, accepted, expectation, op);
}

}  // namespace

void fuzz_attention_forward(ByteSource& in) {
  attnkit_attention_forward_args args;
  attnkit_attention_forward_args_init(&args);
  const auto kind = static_cast<int32_t>(in.range(ATTNKIT_MASK_NONE, ATTNKIT_MASK_ELEMENT));
  const Shape s = choose_shape(in, kind);
  describe(args.q, s.dtype, token_tensor(s, s.tokens, s.heads_q, s.head_dim), false, in);
  describe(args.k, s.dtype, token_tensor(s, s.tokens_kv, s.heads_kv, s.head_dim), false, in);
  describe(args.v, s.dtype, token_tensor(s, s.tokens_kv, s.heads_kv, s.head_dim_v), false, in);
  describe(args.out, s.dtype, token_tensor(s, s.tokens, s.heads_q, s.head_dim_v), true, in);
  const bool lse = in.chance(2, 3);
  if (lse) describe(args.lse, ATTNKIT_FLOAT32, token_tensor(s, s.tokens, s.heads_q, -1), true, in);
  const MaskTensors mask = build_mask(in, args.mask, kind, s);
  make_scale(in, args.has_scale, args.scale);
  note("attention forward: q " + describe_extents(args.q) + ", k " + describe_extents(args.k) + ", v " +
       describe_extents(args.v) + ", mask kind " + std::to_string(kind) + (lse ? ", lse" : ""));

  TensorSet tensors;
  tensors.add("q", &args.q, Role::input);
  tensors.add("k", &args.k, Role::input);
  tensors.add("v", &args.v, Role::input);
  tensors.add("out", &args.out, Role::output);
  tensors.add("lse", &args.lse, Role::output, lse).lse_like = true;
  tensors.add("mask.block_mask", &args.mask.block_mask, Role::input, mask.block);
  tensors.add("mask.element_mask", &args.mask.element_mask, Role::input, mask.element);
  tensors.add("mask.rpb", &args.mask.rpb, Role::input, mask.rpb);

  const int corruptions = corruption_count(in);
  std::vector<ScalarCorruption> scalars = mask_corruptions(args.mask);
  scalars.push_back(scale_corruption(args.has_scale, args.scale));
  scalars.push_back([&args](ByteSource& b) {
    args.reserved = static_cast<int32_t>(b.u32());
    return std::string("reserved -> non-zero (ignored)");
  });
  Expectation expectation;
  expectation.must_refuse = apply_corruptions(in, corruptions, tensors, scalars);
  mark_unread_masks(tensors, args.mask.kind);
  attnkit_run_options storage;
  std::vector<unsigned char> workspace;
  const attnkit_run_options* options = make_options(in, storage, workspace, corruptions > 0 && in.chance(1, 4));
  run_attention(
      in, args, tensors, options, expectation, corruptions, attnkit_attention_forward,
      attnkit_attention_forward_workspace_size, attnkit_attention_forward_config, [](Expectation&) {},
      "attnkit_attention_forward");
}

void fuzz_attention_backward(ByteSource& in) {
  attnkit_attention_backward_args args;
  attnkit_attention_backward_args_init(&args);
  const auto kind = static_cast<int32_t>(in.range(ATTNKIT_MASK_NONE, ATTNKIT_MASK_ELEMENT));
  const Shape s = choose_shape(in, kind);
  const auto q_extents = token_tensor(s, s.tokens, s.heads_q, s.head_dim);
  const auto k_extents = token_tensor(s, s.tokens_kv, s.heads_kv, s.head_dim);
  const auto v_extents = token_tensor(s, s.tokens_kv, s.heads_kv, s.head_dim_v);
  const auto out_extents = token_tensor(s, s.tokens, s.heads_q, s.head_dim_v);
  describe(args.q, s.dtype, q_extents, false, in);
  describe(args.k, s.dtype, k_extents, false, in);
  describe(args.v, s.dtype, v_extents, false, in);
  describe(args.out, s.dtype, out_extents, false, in);
  describe(args.lse, ATTNKIT_FLOAT32, token_tensor(s, s.tokens, s.heads_q, -1), false, in);
  describe(args.grad_out, s.dtype, out_extents, false, in);
  describe(args.grad_q, s.dtype, q_extents, true, in);
  describe(args.grad_k, s.dtype, k_extents, true, in);
  describe(args.grad_v, s.dtype, v_extents, true, in);
  const MaskTensors mask = build_mask(in, args.mask, kind, s);
  const bool grad_rpb = mask.rpb && in.chance(2, 3);
  if (grad_rpb) {
    describe(args.grad_rpb, args.mask.rpb.dtype,
             std::vector<int64_t>(args.mask.rpb.extents, args.mask.rpb.extents + args.mask.rpb.rank), true, in);
  }
  make_scale(in, args.has_scale, args.scale);
  args.deterministic = in.chance(1, 2);
  args.kv_splits = static_cast<int32_t>(in.range(0, 3));
  args.split_workspace_limit = in.pick<int64_t>({-1, 0, 1 << 20});
  note("attention backward: q " + describe_extents(args.q) + ", k " + describe_extents(args.k) + ", v " +
       describe_extents(args.v) + ", mask kind " + std::to_string(kind) + (grad_rpb ? ", grad_rpb" : ""));

  TensorSet tensors;
  tensors.add("q", &args.q, Role::input);
  tensors.add("k", &args.k, Role::input);
  tensors.add("v", &args.v, Role::input);
  tensors.add("out", &args.out, Role::input);
  tensors.add("lse", &args.lse, Role::input);
  tensors.add("grad_out", &args.grad_out, Role::input);
  tensors.add("grad_q", &args.grad_q, Role::output);
  tensors.add("grad_k", &args.grad_k, Role::output);
  tensors.add("grad_v", &args.grad_v, Role::output);
  tensors.add("mask.block_mask", &args.mask.block_mask, Role::input, mask.block);
  tensors.add("mask.element_mask", &args.mask.element_mask, Role::input, mask.element);
  tensors.add("mask.rpb", &args.mask.rpb, Role::input, mask.rpb);
  tensors.add("grad_rpb", &args.grad_rpb, Role::output, grad_rpb);

  const int corruptions = corruption_count(in);
  std::vector<ScalarCorruption> scalars = mask_corruptions(args.mask);
  scalars.push_back(scale_corruption(args.has_scale, args.scale));
  scalars.push_back([&args](ByteSource& b) {
    args.kv_splits = b.pick<int32_t>({-1, 129, 128, std::numeric_limits<int32_t>::max(), 100});
    return "kv_splits -> " + std::to_string(args.kv_splits);
  });
  scalars.push_back([&args](ByteSource& b) {
    args.split_workspace_limit = b.pick<int64_t>({-2, std::numeric_limits<int64_t>::min(), kInt64Max});
    return "split_workspace_limit -> " + std::to_string(args.split_workspace_limit);
  });
  scalars.push_back([&args](ByteSource& b) {
    args.deterministic = b.pick<int32_t>({-1, 2, std::numeric_limits<int32_t>::min()});
    args.reserved = static_cast<int32_t>(b.u32());
    return "deterministic/reserved -> other non-zero values";
  });
  Expectation expectation;
  expectation.must_refuse = apply_corruptions(in, corruptions, tensors, scalars);
  mark_unread_masks(tensors, args.mask.kind);
  attnkit_run_options storage;
  std::vector<unsigned char> workspace;
  const attnkit_run_options* options = make_options(in, storage, workspace, corruptions > 0 && in.chance(1, 4));
  // A softmax of extreme scale overflows exp(scale * q.k - lse) in float32 arithmetic: no finiteness promise.
  if (extreme_scale(args.has_scale, args.scale)) expectation.finite_results = false;
  // out and lse as the forward computes them (the backward's inputs are consistent only then); when the
  // forward refuses these arguments they stay random and the gradients may overflow.
  const auto forward_outputs = [&](Expectation& e) {
    attnkit_attention_forward_args forward;
    attnkit_attention_forward_args_init(&forward);
    forward.q = args.q;
    forward.k = args.k;
    forward.v = args.v;
    forward.out = args.out;
    forward.lse = args.lse;
    forward.has_scale = args.has_scale;
    forward.scale = args.scale;
    forward.mask = args.mask;
    if (attnkit_attention_forward(&forward, nullptr) != ATTNKIT_OK) e.finite_results = false;
    tensors.snapshot();
  };
  run_attention(in, args, tensors, options, expectation, corruptions, attnkit_attention_backward,
                attnkit_attention_backward_workspace_size, attnkit_attention_backward_config, forward_outputs,
                "attnkit_attention_backward");
}

}  // namespace attnkit::fuzz
