#include "capi/c_api_convert.hpp"

#include <optional>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "core/zero_size.hpp"

namespace attnkit::capi {
namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(Status::invalid_argument, message); }

// value must lie in [0, last]; `choices` lists them for the message.
void check_enum(int32_t value, int32_t last, const std::string& field, const char* choices) {
  if (value < 0 || value > last) {
    invalid(field + ": " + std::to_string(value) + "; allowed: " + choices);
  }
}

const char* dtype_choices(AllowedDtypes allowed) {
  switch (allowed) {
    case AllowedDtypes::floating: return "0 (ATTNKIT_FLOAT32), 1 (FLOAT16), 2 (BFLOAT16), 3 (FLOAT64)";
    case AllowedDtypes::float32: return "0 (ATTNKIT_FLOAT32)";
    case AllowedDtypes::state: return "0 (ATTNKIT_FLOAT32), or 3 (FLOAT64) with float64 inputs";
    case AllowedDtypes::mask: return "4 (ATTNKIT_BOOL)";
    case AllowedDtypes::any: break;
  }
  return "0 (ATTNKIT_FLOAT32), 1 (FLOAT16), 2 (BFLOAT16), 3 (FLOAT64), 4 (BOOL)";
}

std::optional<double> to_scale(int32_t has_scale, double scale) {
  return has_scale ? std::optional<double>(scale) : std::nullopt;
}

// attnkit.h's enum mirrors attnkit::ElementMaskPath value for value.
static_assert(ATTNKIT_ELEMENT_PATH_AUTOMATIC == static_cast<int>(ElementMaskPath::automatic) &&
                  ATTNKIT_ELEMENT_PATH_TILES == static_cast<int>(ElementMaskPath::tiles) &&
                  ATTNKIT_ELEMENT_PATH_SCATTERED == static_cast<int>(ElementMaskPath::scattered),
              "attnkit_element_mask_path and attnkit::ElementMaskPath differ");

AttentionMask to_mask(const attnkit_attention_mask& c) {
  check_enum(c.kind, ATTNKIT_MASK_ELEMENT, "mask.kind",
             "0 (ATTNKIT_MASK_NONE), 1 (CAUSAL), 2 (NEIGHBORHOOD), 3 (BLOCK), 4 (ELEMENT)");
  check_enum(c.causal_alignment, ATTNKIT_CAUSAL_BOTTOM_RIGHT, "mask.causal_alignment",
             "0 (ATTNKIT_CAUSAL_TOP_LEFT), 1 (ATTNKIT_CAUSAL_BOTTOM_RIGHT)");
  check_enum(c.element_path, ATTNKIT_ELEMENT_PATH_SCATTERED, "mask.element_path",
             "0 (ATTNKIT_ELEMENT_PATH_AUTOMATIC), 1 (TILES), 2 (SCATTERED)");
  AttentionMask mask;
  mask.kind = static_cast<MaskKind>(c.kind);
  mask.element_path = static_cast<ElementMaskPath>(c.element_path);
  mask.causal_alignment = static_cast<CausalAlignment>(c.causal_alignment);
  mask.dims = c.dims;
  for (int d = 0; d < ATTNKIT_MAX_TOKEN_DIMS; ++d) {
    mask.neighborhood[d] = NeighborhoodDim{c.neighborhood[d].kernel_size, c.neighborhood[d].dilation,
                                           c.neighborhood[d].stride, c.neighborhood[d].causal != 0};
  }
  mask.block_mask = to_view(c.block_mask, "mask.block_mask", AllowedDtypes::mask);
  mask.block_q = c.block_q;
  mask.block_k = c.block_k;
  mask.element_mask = to_view(c.element_mask, "mask.element_mask", AllowedDtypes::mask);
  mask.rpb = to_view(c.rpb, "mask.rpb", AllowedDtypes::floating);
  return mask;
}

std::vector<double> to_gamma(const double* gamma, int64_t count) {
  if (count < 0) {
    invalid("gamma_count: " + std::to_string(count) + "; allowed: 0 (default decay) or the head count");
  }
  if (gamma == nullptr && count > 0) {
    invalid("gamma: NULL with gamma_count " + std::to_string(count) +
            "; allowed: a pointer to gamma_count values, or NULL with gamma_count 0 for the default decay");
  }
  if (gamma == nullptr) {
    return {};
  }
  return std::vector<double>(gamma, gamma + count);
}

RetentionMode to_mode(int32_t mode) {
  check_enum(mode, ATTNKIT_RETENTION_RECURRENT, "mode", "0 (ATTNKIT_RETENTION_PARALLEL), 1 (CHUNKWISE), 2 (RECURRENT)");
  return static_cast<RetentionMode>(mode);
}

}  // namespace

void require_args(const void* pointer, const char* struct_name) {
  if (pointer == nullptr) {
    invalid(std::string("args: NULL; allowed: a pointer to an ") + struct_name + " set up with " + struct_name +
            "_init");
  }
}

void check_tensor_fields(const attnkit_tensor& tensor, const char* name, AllowedDtypes allowed) {
  const std::string field(name);
  check_enum(tensor.dtype, ATTNKIT_BOOL, field + ".dtype", dtype_choices(allowed));
  check_enum(tensor.device_type, ATTNKIT_DEVICE_CUDA, field + ".device_type",
             "0 (ATTNKIT_DEVICE_CPU), 1 (ATTNKIT_DEVICE_CUDA)");
  check_enum(tensor.rank, ATTNKIT_MAX_RANK, field + ".rank", "0 to 8 (ATTNKIT_MAX_RANK)");
}

TensorView to_view(const attnkit_tensor& tensor, const char* name, AllowedDtypes allowed) {
  // The fields as they are (the enums have int32 underlying types); checked below unless the tensor is absent.
  TensorView view;
  view.data = tensor.data;
  view.dtype = static_cast<DType>(tensor.dtype);
  view.device = Device{static_cast<DeviceType>(tensor.device_type), tensor.device_index};
  view.rank = tensor.rank;
  for (int i = 0; i < ATTNKIT_MAX_RANK; ++i) {
    view.extents[i] = i < tensor.rank ? tensor.extents[i] : 0;
    view.strides[i] = i < tensor.rank ? tensor.strides[i] : 0;
  }
  // NULL data is an absent tensor, unless the tensor has no elements and so needs no memory (zero_size.hpp).
  if (tensor.data == nullptr && !detail::has_no_elements(view)) {
    return TensorView{};
  }
  check_tensor_fields(tensor, name, allowed);
  return view;
}

attnkit_tensor to_c_tensor(const TensorView& view) {
  attnkit_tensor tensor{};
  tensor.data = view.data;
  tensor.dtype = static_cast<int32_t>(view.dtype);
  tensor.device_type = static_cast<int32_t>(view.device.type);
  tensor.device_index = view.device.index;
  tensor.rank = view.rank;
  for (int i = 0; i < view.rank; ++i) {
    tensor.extents[i] = view.extents[i];
    tensor.strides[i] = view.strides[i];
  }
  return tensor;
}

RunOptions to_run_options(const attnkit_run_options* options) {
  RunOptions run;
  if (options == nullptr) {
    return run;
  }
  check_enum(options->backend, ATTNKIT_BACKEND_CUDA, "options.backend",
             "0 (ATTNKIT_BACKEND_AUTO), 1 (ATTNKIT_BACKEND_CPU), 2 (ATTNKIT_BACKEND_CUDA)");
  run.backend = static_cast<Backend>(options->backend);
  run.num_threads = options->num_threads;
  run.stream = options->stream;
  if (options->workspace_bytes < 0) {
    throw Error(Status::invalid_argument, "options.workspace_bytes: " + std::to_string(options->workspace_bytes) +
                                              "; allowed: >= 0 (0 with workspace NULL: the library allocates)");
  }
  run.workspace = options->workspace;
  run.workspace_bytes = options->workspace_bytes;
  return run;
}

AttentionForward to_attention_forward(const attnkit_attention_forward_args& args) {
  AttentionForward p;
  p.q = to_view(args.q, "q", AllowedDtypes::floating);
  p.k = to_view(args.k, "k", AllowedDtypes::floating);
  p.v = to_view(args.v, "v", AllowedDtypes::floating);
  p.out = to_view(args.out, "out", AllowedDtypes::floating);
  p.lse = to_view(args.lse, "lse", AllowedDtypes::float32);
  p.scale = to_scale(args.has_scale, args.scale);
  p.mask = to_mask(args.mask);
  return p;
}

// attnkit.h states these bounds by value for C callers.
static_assert(kMaxBackwardKvSplits == 128 && kDefaultSplitWorkspaceBytes == int64_t{64} << 20,
              "update the kv_splits / split_workspace_limit comments of attnkit.h");

AttentionBackward to_attention_backward(const attnkit_attention_backward_args& args) {
  AttentionBackward p;
  p.q = to_view(args.q, "q", AllowedDtypes::floating);
  p.k = to_view(args.k, "k", AllowedDtypes::floating);
  p.v = to_view(args.v, "v", AllowedDtypes::floating);
  p.out = to_view(args.out, "out", AllowedDtypes::floating);
  p.lse = to_view(args.lse, "lse", AllowedDtypes::float32);
  p.grad_out = to_view(args.grad_out, "grad_out", AllowedDtypes::floating);
  p.grad_q = to_view(args.grad_q, "grad_q", AllowedDtypes::floating);
  p.grad_k = to_view(args.grad_k, "grad_k", AllowedDtypes::floating);
  p.grad_v = to_view(args.grad_v, "grad_v", AllowedDtypes::floating);
  p.scale = to_scale(args.has_scale, args.scale);
  p.mask = to_mask(args.mask);
  p.deterministic = args.deterministic != 0;
  p.kv_splits = args.kv_splits;
  p.split_workspace_limit = args.split_workspace_limit;
  p.grad_rpb = to_view(args.grad_rpb, "grad_rpb", AllowedDtypes::floating);
  return p;
}

RetentionForward to_retention_forward(const attnkit_retention_forward_args& args) {
  RetentionForward p;
  p.q = to_view(args.q, "q", AllowedDtypes::floating);
  p.k = to_view(args.k, "k", AllowedDtypes::floating);
  p.v = to_view(args.v, "v", AllowedDtypes::floating);
  p.out = to_view(args.out, "out", AllowedDtypes::floating);
  p.initial_state = to_view(args.initial_state, "initial_state", AllowedDtypes::state);
  p.final_state = to_view(args.final_state, "final_state", AllowedDtypes::state);
  p.gamma = to_gamma(args.gamma, args.gamma_count);
  p.mode = to_mode(args.mode);
  p.chunk_size = args.chunk_size;
  p.scale = to_scale(args.has_scale, args.scale);
  p.normalize = args.normalize != 0;
  p.decay = to_view(args.decay, "decay", AllowedDtypes::floating);
  return p;
}

RetentionBackward to_retention_backward(const attnkit_retention_backward_args& args) {
  RetentionBackward p;
  p.q = to_view(args.q, "q", AllowedDtypes::floating);
  p.k = to_view(args.k, "k", AllowedDtypes::floating);
  p.v = to_view(args.v, "v", AllowedDtypes::floating);
  p.grad_out = to_view(args.grad_out, "grad_out", AllowedDtypes::floating);
  p.initial_state = to_view(args.initial_state, "initial_state", AllowedDtypes::state);
  p.grad_final_state = to_view(args.grad_final_state, "grad_final_state", AllowedDtypes::state);
  p.grad_q = to_view(args.grad_q, "grad_q", AllowedDtypes::floating);
  p.grad_k = to_view(args.grad_k, "grad_k", AllowedDtypes::floating);
  p.grad_v = to_view(args.grad_v, "grad_v", AllowedDtypes::floating);
  p.grad_initial_state = to_view(args.grad_initial_state, "grad_initial_state", AllowedDtypes::state);
  p.gamma = to_gamma(args.gamma, args.gamma_count);
  p.mode = to_mode(args.mode);
  p.chunk_size = args.chunk_size;
  p.scale = to_scale(args.has_scale, args.scale);
  p.normalize = args.normalize != 0;
  p.decay = to_view(args.decay, "decay", AllowedDtypes::floating);
  return p;
}

GemmProblem to_gemm(const attnkit_gemm_args& args) {
  GemmProblem p;
  p.a = to_view(args.a, "a", AllowedDtypes::floating);
  p.b = to_view(args.b, "b", AllowedDtypes::floating);
  p.c = to_view(args.c, "c", AllowedDtypes::floating);
  p.transpose_a = args.transpose_a != 0;
  p.transpose_b = args.transpose_b != 0;
  p.alpha = args.alpha;
  p.beta = args.beta;
  p.allow_tf32 = args.allow_tf32 != 0;
  return p;
}

}  // namespace attnkit::capi
