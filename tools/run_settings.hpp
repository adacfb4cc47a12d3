// The options of `attnkit run`, as given on the command line, and the context every op runner
// shares (dtype, backend, device, run options, seeded random generator, where its report and its
// progress go).
#pragma once
#include <cstdint>
#include <random>
#include <string>

#include "attnkit/backend.hpp"
#include "attnkit/dtype.hpp"
#include "attnkit/tensor.hpp"
#include "problem_options.hpp"
#include "progress_reporter.hpp"
#include "run_report.hpp"

namespace attnkit::cli {

struct RunSettings : ProblemOptions {  // the attention ops' problem; retention and gemm use some of it
  std::string op;
  // element-sparse: auto|tiles|scattered (AttentionMask::element_path)
  std::string mask_path = "auto";
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
  std::string dtype = kDefaultDType;
  std::string backend = "auto";
  bool backward = false;
  uint64_t seed = 0;
  int warmup = 1;
  int repeat = 10;
  int threads = 0;
  bool check = false;
  bool json = false;
  bool quiet = false;
};

struct RunContext {
  DType dtype = DType::f32;
  Device device{};
  RunOptions options{};
  std::mt19937_64 rng;
  RunReport report;
  ProgressOutput progress;
};

// Each returns the process exit code: 0, or 1 when --check failed. Library errors propagate.
int run_attention(const RunSettings& settings, RunContext& context);
int run_retention(const RunSettings& settings, RunContext& context);
int run_gemm(const RunSettings& settings, RunContext& context);

}  // namespace attnkit::cli
