// The C ABI fuzzer's entry: the first byte of an input picks the operation, the rest drives its generator
// (fuzz_ops.hpp). Shared generator pieces (run options, scales, corruption counts) live here too.
#include <cmath>
#include <cstdlib>
#include <limits>

#include "fuzz_ops.hpp"

namespace attnkit::fuzz {

void initialise() {
  static const bool done = [] {
    // Tuning times CPU configs (slow, and not what is fuzzed here); warnings would flood the output.
    setenv("ATTNKIT_LOG_LEVEL", "error", 0);
    attnkit_tuner_settings settings{};
    if (attnkit_tuner_get_settings(&settings) != ATTNKIT_OK) violation("initialise: attnkit_tuner_get_settings failed");
    settings.mode = ATTNKIT_TUNE_OFF;
    settings.cache_dir = "";
    if (attnkit_tuner_configure(&settings) != ATTNKIT_OK) {
      violation(std::string("initialise: attnkit_tuner_configure failed: ") + attnkit_last_error());
    }
    return true;
  }();
  (void)done;
}

void run_one_input(const uint8_t* data, std::size_t size) {
  initialise();
  clear_notes();
  ByteSource in(data, size);
  switch (in.byte() % 16) {
    case 0:
    case 1:
    case 2:
    case 3: fuzz_attention_forward(in); break;
    case 4:
    case 5:
    case 6: fuzz_attention_backward(in); break;
    case 7:
    case 8: fuzz_retention_forward(in); break;
    case 9:
    case 10: fuzz_retention_backward(in); break;
    case 11:
    case 12: fuzz_gemm(in); break;
    case 13: fuzz_tensor_contiguous(in); break;
    case 14: fuzz_tuner_settings(in); break;
    default: fuzz_null_arguments(in); break;
  }
}

int corruption_count(ByteSource& in) {
  const uint8_t b = in.byte();
  return b < 128 ? 0 : 1 + b % 3;
}

bool apply_corruptions(ByteSource& in, int count, TensorSet& tensors, const std::vector<ScalarCorruption>& scalars) {
  bool huge_used = false;
  for (int i = 0; i < count; ++i) {
    const bool tensor = scalars.empty() || in.chance(1, 2);
    const std::string what =
        tensor ? tensors.corrupt(in, huge_used)
               : scalars[static_cast<std::size_t>(in.range(0, static_cast<int64_t>(scalars.size()) - 1))](in);
    note("corruption: " + what);
  }
  return huge_used;
}

const attnkit_run_options* make_options(ByteSource& in, attnkit_run_options& storage,
                                        std::vector<unsigned char>& workspace, bool corrupt) {
  if (in.chance(1, 4)) {
    note("options: NULL");
    return nullptr;
  }
  attnkit_run_options_init(&storage);
  storage.backend = in.pick<int32_t>({ATTNKIT_BACKEND_AUTO, ATTNKIT_BACKEND_CPU});
  storage.num_threads = static_cast<int32_t>(in.range(0, 3));
  if (in.chance(1, 8)) {
    // A caller workspace (the CPU backend needs none, and must not write past it).
    workspace.assign(static_cast<std::size_t>(in.range(1, 512)), 0x5a);
    storage.workspace = workspace.data();
    storage.workspace_bytes = static_cast<int64_t>(workspace.size());
  }
  if (corrupt) {
    switch (in.byte() % 4) {
      case 0:
        storage.backend = in.pick<int32_t>({-1, ATTNKIT_BACKEND_CUDA, 3, std::numeric_limits<int32_t>::max()});
        break;
      case 1: storage.num_threads = in.pick<int32_t>({-1, std::numeric_limits<int32_t>::min(), 1000, 100000}); break;
      case 2: storage.workspace_bytes = in.pick<int64_t>({-1, std::numeric_limits<int64_t>::min()}); break;
      default:
        storage.workspace = nullptr;  // NULL with a size: the library allocates what it needs
        storage.workspace_bytes = 4096;
    }
    if (storage.backend == ATTNKIT_BACKEND_CUDA && attnkit_cuda_device_count() > 0) storage.backend = 3;
  }
  note("options: backend " + std::to_string(storage.backend) + ", threads " + std::to_string(storage.num_threads) +
       ", workspace_bytes " + std::to_string(storage.workspace_bytes));
  return &storage;
}

void make_scale(ByteSource& in, int32_t& has_scale, double& scale) {
  has_scale = in.chance(1, 2);
  scale = has_scale ? in.pick<double>({0.125, 0.5, 1.0, 2.0, 0.01, 10.0, 1e-300, 1e30}) : 0.0;
  if (has_scale) note("scale: " + std::to_string(scale));
}

bool extreme_scale(int32_t has_scale, double scale) { return has_scale && !(scale >= 1e-100 && scale <= 100.0); }

ScalarCorruption scale_corruption(int32_t& has_scale, double& scale) {
  return [&has_scale, &scale](ByteSource& in) {
    has_scale = 1;
    scale = in.pick<double>({0.0, -1.0, -0.0, std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::denorm_min(), -1e-300});
    return "scale -> " + std::to_string(scale);
  };
}

int32_t pick_float_dtype(ByteSource& in) {
  return in.pick<int32_t>(
      {ATTNKIT_FLOAT32, ATTNKIT_FLOAT32, ATTNKIT_FLOAT32, ATTNKIT_FLOAT16, ATTNKIT_BFLOAT16, ATTNKIT_FLOAT64});
}

int64_t small_extent(ByteSource& in, int64_t max, bool allow_zero) {
  if (allow_zero && in.byte() % 24 == 0) return 0;
  return in.range(1, max);
}

std::string describe_extents(const attnkit_tensor& tensor) {
  std::string text = "[";
  for (int d = 0; d < tensor.rank && d < ATTNKIT_MAX_RANK; ++d) {
    text += (d ? ", " : "") + std::to_string(tensor.extents[d]);
  }
  return text + "] dtype " + std::to_string(tensor.dtype);
}

}  // namespace attnkit::fuzz
