#include "cli_parse.hpp"

#include <charconv>
#include <sstream>

#include "cli_errors.hpp"

namespace attnkit::cli {
namespace {

std::vector<std::string> split_on_x(const std::string& text) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, 'x')) {
    parts.push_back(part);
  }
  if (!text.empty() && text.back() == 'x') {
    parts.emplace_back();
  }
  return parts;
}

template <class T>
std::vector<T> repeat_to(const std::vector<T>& values, int dims, const std::string& option) {
  if (static_cast<int>(values.size()) == dims) {
    return values;
  }
  if (values.size() == 1) {
    return std::vector<T>(static_cast<std::size_t>(dims), values.front());
  }
  throw UsageError(option + ": " + std::to_string(values.size()) +
                   " values; allowed: 1 (used for every dimension) or " + std::to_string(dims) +
                   " (one per token dimension)");
}

}  // namespace

std::vector<int64_t> parse_extents(const std::string& text, const std::string& option) {
  std::vector<int64_t> values;
  for (const std::string& part : split_on_x(text)) {
    int64_t value = 0;
    const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || error != std::errc() || end != part.data() + part.size() || value < 1) {
      throw UsageError(option + ": '" + text + "' is not a list of positive integers; allowed: e.g. 64 or 64x64");
    }
    values.push_back(value);
  }
  if (values.empty()) {
    throw UsageError(option + ": empty value; allowed: e.g. 64 or 64x64");
  }
  return values;
}

std::vector<bool> parse_flags(const std::string& text, const std::string& option) {
  std::vector<bool> values;
  for (const std::string& part : split_on_x(text)) {
    if (part != "0" && part != "1") {
      throw UsageError(option + ": '" + text + "' is not a list of 0/1 flags; allowed: e.g. 1 or 0x1");
    }
    values.push_back(part == "1");
  }
  if (values.empty()) {
    throw UsageError(option + ": empty value; allowed: e.g. 1 or 0x1");
  }
  return values;
}

std::vector<int64_t> per_dimension(const std::vector<int64_t>& values, int dims, const std::string& option) {
  return repeat_to(values, dims, option);
}

std::vector<bool> per_dimension(const std::vector<bool>& values, int dims, const std::string& option) {
  return repeat_to(values, dims, option);
}

DType parse_dtype(const std::string& text) {
  if (text == "f32" || text == "float32") {
    return DType::f32;
  }
  if (text == "f16" || text == "float16") {
    return DType::f16;
  }
  if (text == "bf16" || text == "bfloat16") {
    return DType::bf16;
  }
  if (text == "f64" || text == "float64") {
    return DType::f64;
  }
  throw UsageError("--dtype: '" + text +
                   "'; allowed: f32, f16, bf16, f64 (also spelled float32, float16, bfloat16, float64)");
}

Backend parse_backend(const std::string& text) {
  if (text == "auto") {
    return Backend::automatic;
  }
  if (text == "cpu") {
    return Backend::cpu;
  }
  if (text == "cuda") {
    return Backend::cuda;
  }
  throw UsageError("--backend: '" + text + "'; allowed: auto, cpu, cuda");
}

RetentionMode parse_mode(const std::string& text) {
  if (text == "parallel") {
    return RetentionMode::parallel;
  }
  if (text == "chunkwise" || text == "chunk") {  // "chunk": Python's name (attnkit.retention's default)
    return RetentionMode::chunkwise;
  }
  if (text == "recurrent") {
    return RetentionMode::recurrent;
  }
  throw UsageError("--mode: '" + text + "'; allowed: parallel, chunkwise (also spelled chunk), recurrent");
}

CausalAlignment parse_alignment(const std::string& text) {
  if (text == "top-left" || text == "top_left") {  // top_left, bottom_right: Python's spellings
    return CausalAlignment::top_left;
  }
  if (text == "bottom-right" || text == "bottom_right") {
    return CausalAlignment::bottom_right;
  }
  throw UsageError("--causal-align: '" + text +
                   "'; allowed: top-left, bottom-right (also spelled top_left, bottom_right)");
}

std::string join_extents(const std::vector<int64_t>& values, const char* separator) {
  std::string text;
  for (std::size_t i = 0; i < values.size(); ++i) {
    text += (i ? separator : "") + std::to_string(values[i]);
  }
  return text;
}

const char* mode_name(RetentionMode mode) {
  switch (mode) {
    case RetentionMode::parallel: return "parallel";
    case RetentionMode::chunkwise: return "chunkwise";
    case RetentionMode::recurrent: return "recurrent";
  }
  return "unknown";
}

const char* alignment_name(CausalAlignment alignment) {
  return alignment == CausalAlignment::top_left ? "top-left" : "bottom-right";
}

const char* dtype_flag_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f64: return "f64";
    case DType::boolean: return "bool";
  }
  return "unknown";
}

}  // namespace attnkit::cli
