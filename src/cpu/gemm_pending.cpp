// TEMPORARY placeholder until the CPU GEMM lands; delete when src/cpu/gemm.cpp exists.
#include "attnkit/error.hpp"
#include "cpu/cpu_backend.hpp"
namespace attnkit::cpu {
void gemm(const GemmProblem&, const RunOptions&) { throw Error(Status::internal, "CPU gemm: not implemented yet"); }
}  // namespace attnkit::cpu
