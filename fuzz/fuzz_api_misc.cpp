// The C ABI's smaller entry points: attnkit_tensor_contiguous, the tuner settings and rank group, NULL
// argument structs and handles for every operation, and the identity functions.
#include <cstring>
#include <limits>
#include <memory>

#include "fuzz_ops.hpp"

namespace attnkit::fuzz {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

bool same_bytes(const void* a, const void* b, std::size_t size) { return std::memcmp(a, b, size) == 0; }

// Settings that matter for an equality check after a configure (cache_dir compared as text).
bool same_settings(const attnkit_tuner_settings& a, const attnkit_tuner_settings& b) {
  const auto text = [](const char* s) { return std::string(s ? s : ""); };
  return a.mode == b.mode && a.deterministic == b.deterministic && a.forward_pass == b.forward_pass &&
         a.backward_pass == b.backward_pass && a.warmup_steps_forward == b.warmup_steps_forward &&
         a.steps_forward == b.steps_forward && a.top_k == b.top_k && text(a.cache_dir) == text(b.cache_dir);
}

void restore_tuner(attnkit_tuner_settings settings) {
  settings.mode = ATTNKIT_TUNE_OFF;
  settings.cache_dir = "";
  if (attnkit_tuner_configure(&settings) != ATTNKIT_OK) violation("restoring the tuner settings failed");
}

}  // namespace

void fuzz_tensor_contiguous(ByteSource& in) {
  const int32_t rank = in.chance(1, 4)
                           ? in.pick<int32_t>({-1, 0, ATTNKIT_MAX_RANK + 1, 100, std::numeric_limits<int32_t>::min()})
                           : static_cast<int32_t>(in.range(1, ATTNKIT_MAX_RANK));
  // Exactly `rank` extents in their own allocation, so reading past them is seen.
  const std::size_t count = rank > 0 && rank <= 100 ? static_cast<std::size_t>(rank) : 0;
  std::unique_ptr<int64_t[]> extents(count ? new int64_t[count] : nullptr);
  for (std::size_t i = 0; i < count; ++i) {
    extents[i] = in.chance(1, 8) ? in.pick<int64_t>({-1, 0, kInt64Max, int64_t{1} << 32, 3037000500}) : in.range(1, 5);
  }
  const int32_t dtype = in.chance(1, 6) ? in.pick<int32_t>({-1, 5, std::numeric_limits<int32_t>::max()})
                                        : static_cast<int32_t>(in.range(ATTNKIT_FLOAT32, ATTNKIT_BOOL));
  const int32_t device_type = in.chance(1, 6) ? in.pick<int32_t>({-1, 2}) : ATTNKIT_DEVICE_CPU;
  const int32_t device_index = in.chance(1, 6) ? in.pick<int32_t>({-1, 3}) : 0;
  const bool view_null = in.chance(1, 10);
  const bool extents_null = in.chance(1, 10);
  static unsigned char dummy[16];
  void* data = in.chance(1, 4) ? nullptr : dummy;
  note("tensor_contiguous: rank " + std::to_string(rank) + " dtype " + std::to_string(dtype) + " device " +
       std::to_string(device_type) + ":" + std::to_string(device_index));

  attnkit_tensor view;
  std::memset(&view, 0xA5, sizeof(view));
  attnkit_tensor before = view;
  const attnkit_status status = attnkit_tensor_contiguous(view_null ? nullptr : &view, data, dtype, device_type,
                                                          device_index, rank, extents_null ? nullptr : extents.get());
  if (!check_status("attnkit_tensor_contiguous", status)) {
    if (!same_bytes(&view, &before, sizeof(view))) violation("attnkit_tensor_contiguous refused but wrote *view");
    return;
  }
  if (view_null) violation("attnkit_tensor_contiguous accepted view = NULL");
  if (view.rank != rank || view.dtype != dtype || view.data != data) {
    violation("attnkit_tensor_contiguous wrote another rank, dtype or data pointer than given");
  }
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (view.extents[d] != extents[static_cast<std::size_t>(d)])
      violation("attnkit_tensor_contiguous changed an extent");
    if (view.strides[d] != stride) {
      violation("attnkit_tensor_contiguous wrote stride " + std::to_string(view.strides[d]) + " in dim " +
                std::to_string(d) + "; row-major: " + std::to_string(stride));
    }
    // Row-major strides are products of the later extents; one that overflows (possible when an earlier
    // extent is 0, so the element count does not) must not be computed.
    if (d > 0 && __builtin_mul_overflow(stride, view.extents[d], &stride)) {
      violation("attnkit_tensor_contiguous accepted extents whose row-major strides overflow int64");
    }
  }
}

void fuzz_tuner_settings(ByteSource& in) {
  attnkit_tuner_settings before{};
  if (!check_status("attnkit_tuner_get_settings", attnkit_tuner_get_settings(&before))) {
    violation("attnkit_tuner_get_settings failed");
  }
  attnkit_tuner_settings settings = before;
  settings.mode = in.chance(1, 3) ? in.pick<int32_t>({-1, 3, std::numeric_limits<int32_t>::max()})
                                  : in.pick<int32_t>({ATTNKIT_TUNE_OFF, ATTNKIT_TUNE_LOAD_ONLY, ATTNKIT_TUNE_ON});
  const auto any_int = [&in] {
    return in.pick<int32_t>({0, 1, -1, 7, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()});
  };
  settings.deterministic = any_int();
  settings.forward_pass = any_int();
  settings.backward_pass = any_int();
  settings.thorough_mode_forward = any_int();
  settings.warmup_steps_forward = any_int();
  settings.warmup_steps_backward = any_int();
  settings.steps_forward = any_int();
  settings.steps_backward = any_int();
  settings.top_k = any_int();
  settings.reserved = any_int();
  settings.cache_dir = in.chance(1, 2) ? nullptr : "";  // memory only: the fuzzer writes no cache files
  note("tuner settings: mode " + std::to_string(settings.mode) + " steps " + std::to_string(settings.steps_forward) +
       " top_k " + std::to_string(settings.top_k));
  const bool accepted =
      check_status("attnkit_tuner_configure", attnkit_tuner_configure(in.chance(1, 10) ? nullptr : &settings));
  attnkit_tuner_settings after{};
  if (!check_status("attnkit_tuner_get_settings", attnkit_tuner_get_settings(&after))) {
    violation("attnkit_tuner_get_settings failed after a configure");
  }
  if (!accepted && !same_settings(after, before)) violation("a refused attnkit_tuner_configure changed the settings");
  if (accepted && after.mode != settings.mode) violation("attnkit_tuner_configure accepted but did not set the mode");
  if (check_status("attnkit_tuner_get_settings(NULL)", attnkit_tuner_get_settings(nullptr))) {
    violation("attnkit_tuner_get_settings accepted NULL");
  }

  attnkit_rank_group group{};
  group.rank = static_cast<int32_t>(in.range(-2, 3));
  group.size = static_cast<int32_t>(in.range(-2, 3));
  group.agreement = in.pick<int32_t>({ATTNKIT_AGREE_ROOT_TUNES, ATTNKIT_AGREE_SPLIT_CONFIGS, -1, 2});
  note("rank group: rank " + std::to_string(group.rank) + " of " + std::to_string(group.size) + ", agreement " +
       std::to_string(group.agreement) + ", no callbacks");
  if (check_status("attnkit_tuner_set_rank_group", attnkit_tuner_set_rank_group(&group))) {
    if (group.size > 1) violation("attnkit_tuner_set_rank_group accepted size > 1 without callbacks");
  }
  check_status("attnkit_tuner_set_rank_group(NULL)", attnkit_tuner_set_rank_group(nullptr));
  restore_tuner(before);
}

void fuzz_null_arguments(ByteSource& in) {
  attnkit_run_options options;
  attnkit_run_options_init(&options);
  const attnkit_run_options* opts = in.chance(1, 2) ? nullptr : &options;
  const auto must_refuse = [](const char* call, attnkit_status status) {
    if (check_status(call, status)) violation(std::string(call) + " accepted a NULL argument");
  };
  int64_t bytes = -7;
  attnkit_plan* plan = nullptr;
  char name[64];
  switch (in.byte() % 12) {
    case 0: must_refuse("attnkit_attention_forward(NULL)", attnkit_attention_forward(nullptr, opts)); break;
    case 1: must_refuse("attnkit_attention_backward(NULL)", attnkit_attention_backward(nullptr, opts)); break;
    case 2: must_refuse("attnkit_retention_forward(NULL)", attnkit_retention_forward(nullptr, opts)); break;
    case 3: must_refuse("attnkit_retention_backward(NULL)", attnkit_retention_backward(nullptr, opts)); break;
    case 4: must_refuse("attnkit_gemm(NULL)", attnkit_gemm(nullptr, opts)); break;
    case 5:
      must_refuse("attnkit_attention_forward_workspace_size(NULL)",
                  attnkit_attention_forward_workspace_size(nullptr, opts, &bytes));
      must_refuse("attnkit_attention_backward_workspace_size(NULL)",
                  attnkit_attention_backward_workspace_size(nullptr, opts, &bytes));
      if (bytes != -7) violation("a refused workspace query wrote *bytes");
      break;
    case 6:
      must_refuse("attnkit_attention_forward_plan(NULL)", attnkit_attention_forward_plan(nullptr, opts, 0, &plan));
      must_refuse("attnkit_attention_backward_plan(NULL)", attnkit_attention_backward_plan(nullptr, opts, 0, &plan));
      if (plan != nullptr) violation("a refused plan creation wrote *plan");
      break;
    case 7: {
      attnkit_attention_forward_args args;
      attnkit_attention_forward_args_init(&args);
      must_refuse("attnkit_attention_forward_plan(plan = NULL)",
                  attnkit_attention_forward_plan(&args, opts, 0, nullptr));
      must_refuse("attnkit_attention_forward_workspace_size(bytes = NULL)",
                  attnkit_attention_forward_workspace_size(&args, opts, nullptr));
      must_refuse("attnkit_attention_forward_config(name = NULL)",
                  attnkit_attention_forward_config(&args, opts, nullptr, 0, nullptr, 0));
      must_refuse("attnkit_attention_forward_config(NULL)",
                  attnkit_attention_forward_config(nullptr, opts, name, sizeof(name), name, sizeof(name)));
      break;
    }
    case 8:
      must_refuse("attnkit_plan_workspace_size(NULL)", attnkit_plan_workspace_size(nullptr, &bytes));
      must_refuse("attnkit_plan_run(NULL)", attnkit_plan_run(nullptr, nullptr, 0, nullptr, nullptr, 0));
      attnkit_plan_destroy(nullptr);
      break;
    case 9: {
      // A struct from the init functions alone: no tensor given, so every operation refuses it.
      attnkit_attention_forward_args forward;
      attnkit_attention_forward_args_init(&forward);
      must_refuse("attnkit_attention_forward(empty args)", attnkit_attention_forward(&forward, opts));
      attnkit_attention_backward_args backward;
      attnkit_attention_backward_args_init(&backward);
      must_refuse("attnkit_attention_backward(empty args)", attnkit_attention_backward(&backward, opts));
      attnkit_retention_forward_args retention;
      attnkit_retention_forward_args_init(&retention);
      must_refuse("attnkit_retention_forward(empty args)", attnkit_retention_forward(&retention, opts));
      attnkit_gemm_args gemm;
      attnkit_gemm_args_init(&gemm);
      must_refuse("attnkit_gemm(empty args)", attnkit_gemm(&gemm, opts));
      break;
    }
    case 10:
      attnkit_run_options_init(nullptr);
      attnkit_attention_forward_args_init(nullptr);
      attnkit_attention_backward_args_init(nullptr);
      attnkit_retention_forward_args_init(nullptr);
      attnkit_retention_backward_args_init(nullptr);
      attnkit_gemm_args_init(nullptr);
      break;
    default: {
      const auto status = static_cast<int32_t>(in.u32());
      if (attnkit_status_name(status) == nullptr) violation("attnkit_status_name returned NULL");
      if (attnkit_version() == nullptr || attnkit_last_error() == nullptr) violation("a NULL identity string");
      if (attnkit_abi_version() != ATTNKIT_ABI_VERSION) violation("attnkit_abi_version differs from the header");
    }
  }
}

}  // namespace attnkit::fuzz
