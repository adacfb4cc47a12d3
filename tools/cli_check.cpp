#include "cli_check.hpp"

#include <cmath>
#include <limits>

namespace attnkit::cli {

double tolerance_for(DType dtype, bool tf32) {
  switch (dtype) {
    case DType::f32: return tf32 ? 3e-4 : 1e-5;
    case DType::f16: return 5e-3;
    case DType::bf16: return 1.5e-2;
    case DType::f64: return 1e-10;
    case DType::boolean: break;
  }
  return 0.0;
}

double relative_l2(const HostTensor& tested, const HostTensor& reference) {
  const double infinity = std::numeric_limits<double>::infinity();
  double error = 0.0;
  double norm = 0.0;
  for (int64_t i = 0, n = tested.numel(); i < n; ++i) {
    const double value = tested.at(i);
    const double expected = reference.at(i);
    if (std::isnan(value) || std::isnan(expected)) {
      return std::numeric_limits<double>::quiet_NaN();
    }
    if (value == expected) {
      if (std::isfinite(expected)) {
        norm += expected * expected;
      }
      continue;
    }
    if (!std::isfinite(value) || !std::isfinite(expected)) {
      return infinity;
    }
    error += (value - expected) * (value - expected);
    norm += expected * expected;
  }
  if (norm == 0.0) {
    return error == 0.0 ? 0.0 : infinity;
  }
  return std::sqrt(error / norm);
}

CheckReport::CheckReport(RunReport& report) : report_(report) {
  report_.document()["check"] = Json{{"passed", true}, {"outputs", Json::array()}};
}

void CheckReport::compare(const std::string& name, const HostTensor& tested, const HostTensor& reference,
                          double tolerance) {
  const double error = relative_l2(tested, reference);
  const bool pass = error <= tolerance;  // false for NaN
  passed_ = passed_ && pass;
  report_.line("check: rel_l2(%s) = %.3g (tolerance %.3g) %s", name.c_str(), error, tolerance, pass ? "PASS" : "FAIL");
  Json& check = report_.document()["check"];
  check["passed"] = passed_;
  check["outputs"].push_back(
      Json{{"name", name}, {"rel_l2", finite_or_null(error)}, {"tolerance", tolerance}, {"passed", pass}});
}

}  // namespace attnkit::cli
