// The options of `attnkit run`, as given on the command line, and the context every op runner
// shares (dtype, backend, device, run options, seeded random generator).
#pragma once
#include <cstdint>
#include <random>
#include <string>

#include "attnkit/backend.hpp"
#include "attnkit/dtype.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::cli {

struct RunSettings {
  std::string op;
  // attention family
  int64_t batch = 1;
  int64_t heads = 4;
  int64_t heads_kv = 0;   // 0 = heads
  std::string tokens;     // "" = the op's default
  std::string tokens_kv;  // "" = tokens
  int64_t head_dim = 64;
  int64_t head_dim_v = 0;  // 0 = head_dim
  std::string kernel_size = "7";
  std::string dilation = "1";
  std::string stride = "1";
  bool causal_given = false;
  std::string causal;  // value of --causal ("" when given without a value)
  std::string causal_align = "top-left";
  std::string block_size = "64";
  double density = 0.1;
  // retention
  std::string mode = "chunkwise";
  int64_t chunk = 64;
  bool normalize = false;
  // gemm
  int64_t m = 512;
  int64_t n = 512;
  int64_t k = 512;
  bool transpose_a = false;
  bool transpose_b = false;
  double alpha = 1.0;
  double beta = 0.0;
  bool allow_tf32 = false;
  // every op
  std::string dtype = "f32";
  std::string backend = "auto";
  bool backward = false;
  uint64_t seed = 0;
  int warmup = 1;
  int repeat = 10;
  int threads = 0;
  bool check = false;
};

struct RunContext {
  DType dtype = DType::f32;
  Device device{};
  RunOptions options{};
  std::mt19937_64 rng;
};

// Each returns the process exit code: 0, or 1 when --check failed. Library errors propagate.
int run_attention(const RunSettings& settings, RunContext& context);
int run_retention(const RunSettings& settings, RunContext& context);
int run_gemm(const RunSettings& settings, RunContext& context);

}  // namespace attnkit::cli
