// The float64 brute-force references of `attnkit run --check`, computed one slice of the problem at a
// time so that a check taking minutes reports progress (progress_reporter.hpp). Every slice is
// independent, so the result is the reference's on the whole problem. Each keeps the reference's own
// parallelism: attention forward slices by (batch, query head), one after another, each parallel over
// its queries; attention backward by (batch, kv head) and retention by (batch, head), slices in
// parallel; GEMM by (batch, block of rows), one after another, each parallel over its rows.
#pragma once
#include "attnkit/attention.hpp"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "progress_reporter.hpp"

namespace attnkit::cli {

void attention_forward_reference_in_slices(const AttentionForward& problem, const ProgressOutput& output);
void attention_backward_reference_in_slices(const AttentionBackward& problem, const ProgressOutput& output);
void retention_forward_reference_in_slices(const RetentionForward& problem, const ProgressOutput& output);
void retention_backward_reference_in_slices(const RetentionBackward& problem, const ProgressOutput& output);
void gemm_reference_in_slices(const GemmProblem& problem, const ProgressOutput& output);

}  // namespace attnkit::cli
