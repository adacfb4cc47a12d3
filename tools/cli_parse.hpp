// Parsing of the CLI's compact option values: extents "64x64", per-dimension flags "0x1",
// and the names of dtypes, backends, retention modes and causal alignments.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/backend.hpp"
#include "attnkit/dtype.hpp"
#include "attnkit/retention.hpp"

namespace attnkit::cli {

// "64x64" -> {64, 64}; "4096" -> {4096}. Every entry >= 1. `option` names the flag in errors.
std::vector<int64_t> parse_extents(const std::string& text, const std::string& option);
// "1" -> {true}; "0x1" -> {false, true}.
std::vector<bool> parse_flags(const std::string& text, const std::string& option);
// A list with one entry per dimension: a single entry is repeated `dims` times.
std::vector<int64_t> per_dimension(const std::vector<int64_t>& values, int dims, const std::string& option);
std::vector<bool> per_dimension(const std::vector<bool>& values, int dims, const std::string& option);

// Each also takes the Python package's spelling: float32, ...; chunk; top_left, bottom_right.
DType parse_dtype(const std::string& text);                // f32 | f16 | bf16 | f64
Backend parse_backend(const std::string& text);            // auto | cpu | cuda
RetentionMode parse_mode(const std::string& text);         // parallel | chunkwise | recurrent
CausalAlignment parse_alignment(const std::string& text);  // top-left | bottom-right

std::string join_extents(const std::vector<int64_t>& values, const char* separator = "x");
const char* mode_name(RetentionMode mode);              // the CLI's spelling: "chunkwise", ...
const char* alignment_name(CausalAlignment alignment);  // "top-left" | "bottom-right"
const char* dtype_flag_name(DType dtype);               // "f32", ...

}  // namespace attnkit::cli
