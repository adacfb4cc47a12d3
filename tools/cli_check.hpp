// `--check`: relative L2 error ||out - ref|| / ||ref|| in double of each output against the
// brute-force reference, with the DESIGN §5 tolerance for the dtype, reported as
//   check: rel_l2(out) = X (tolerance T) PASS|FAIL
// or, with --json, as "check": {"passed": ..., "outputs": [{"name", "rel_l2", "tolerance", "passed"}]}.
#pragma once
#include <string>

#include "attnkit/dtype.hpp"
#include "cli_tensor.hpp"
#include "run_report.hpp"

namespace attnkit::cli {

// DESIGN §5: fp32 1e-5 (3e-4 with TF32), fp16 5e-3, bf16 1.5e-2; fp64 1e-10.
double tolerance_for(DType dtype, bool tf32 = false);

// Equal values (also equal infinities, e.g. LSE = -inf of rows without keys) count as no error and
// infinite reference values stay out of ||ref||; any NaN in `tested` makes the error NaN.
double relative_l2(const HostTensor& tested, const HostTensor& reference);

class CheckReport {
 public:
  explicit CheckReport(RunReport& report);
  // Reports one output and remembers whether it passed.
  void compare(const std::string& name, const HostTensor& tested, const HostTensor& reference, double tolerance);
  bool passed() const { return passed_; }

 private:
  RunReport& report_;
  bool passed_ = true;
};

}  // namespace attnkit::cli
