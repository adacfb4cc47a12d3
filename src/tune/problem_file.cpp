#include "tune/problem_file.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "attnkit/error.hpp"

namespace attnkit::tune {
namespace {

using json = nlohmann::json;

[[noreturn]] void reject(const std::string& what) { throw Error(Status::invalid_argument, "problem: " + what); }

int64_t integer_field(const json& j, const char* name, int64_t fallback) {
  if (!j.contains(name)) return fallback;
  const json& v = j.at(name);
  if (!v.is_number_integer()) reject(std::string(name) + ": " + v.dump() + "; allowed: an integer");
  return v.get<int64_t>();
}

// A list of 1..3 values, or one value for every dim.
template <typename T>
std::vector<T> per_dim_field(const json& j, const char* name) {
  if (!j.contains(name)) return {};
  const json& v = j.at(name);
  try {
    if (v.is_array()) {
      if (v.empty() || v.size() > static_cast<size_t>(kMaxTokenDims)) {
        reject(std::string(name) + ": " + v.dump() + "; allowed: 1 to 3 values");
      }
      return v.get<std::vector<T>>();
    }
    return {v.get<T>()};
  } catch (const nlohmann::json::exception&) {
    reject(std::string(name) + ": " + v.dump() + "; allowed: a number or a list of 1 to 3");
  }
}

template <typename T>
T at_dim(const std::vector<T>& values, int d, T fallback) {
  if (values.empty()) return fallback;
  return values.size() == 1 ? values[0] : values[static_cast<size_t>(d)];
}

std::string string_field(const json& j, const char* name, const std::string& fallback) {
  if (!j.contains(name)) return fallback;
  if (!j.at(name).is_string()) reject(std::string(name) + ": " + j.at(name).dump() + "; allowed: a string");
  return j.at(name).get<std::string>();
}

bool flag_field(const json& j, const char* name) {
  if (!j.contains(name)) return false;
  const json& v = j.at(name);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) return v.get<int64_t>() == 1;
  reject(std::string(name) + ": " + v.dump() + "; allowed: true, false, 1 or 0");
}

// A gemm's own spellings: "m", "n", "k" for tokens / tokens_kv / head_dim, and the flags "transpose_a",
// "transpose_b", "allow_tf32" for the variant bits. Either spelling, not both.
void read_gemm_fields(const json& j, ProblemSpec& s) {
  const bool named = j.contains("m") || j.contains("n") || j.contains("k");
  const bool generic = j.contains("tokens") || j.contains("tokens_kv") || j.contains("head_dim");
  if (named && generic) reject("m/n/k: given with tokens/tokens_kv/head_dim; allowed: one of the two spellings");
  if (named) {
    for (const char* name : {"m", "n", "k"}) {
      if (!j.contains(name)) reject(std::string(name) + ": missing; a gemm given by m, n, k needs all three");
    }
    s.tokens = {integer_field(j, "m", 0), 1, 1};
    s.tokens_kv = {integer_field(j, "n", 0), 1, 1};
    s.head_dim = s.head_dim_v = integer_field(j, "k", 0);
  }
  const bool flags = j.contains("transpose_a") || j.contains("transpose_b") || j.contains("allow_tf32");
  if (flags && j.contains("variant")) {
    reject("variant: given with transpose_a/transpose_b/allow_tf32; allowed: one of the two spellings");
  }
  if (flags) {
    s.variant = (flag_field(j, "transpose_a") ? kGemmATransposed : 0) |
                (flag_field(j, "transpose_b") ? kGemmBTransposed : 0) |
                (flag_field(j, "allow_tf32") && s.dtype == DType::f32 ? kGemmAllowTf32 : 0);
  }
}

}  // namespace

ProblemSpec problem_spec_from_json(std::string_view json_text) {
  const json j = json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) reject("not a JSON object: " + std::string(json_text.substr(0, 80)));
  ProblemSpec s;
  const std::string op = string_field(j, "op", "");
  const auto parsed_op = parse_op(op);
  if (!parsed_op) reject("op: '" + op + "'; allowed: attention_fwd, attention_bwd, retention_fwd, retention_bwd, gemm");
  s.op = *parsed_op;
  const std::string dtype = string_field(j, "dtype", "float16");
  const auto parsed_dtype = parse_dtype(dtype);
  if (!parsed_dtype) reject("dtype: '" + dtype + "'; allowed: float32, float16, bfloat16, float64");
  s.dtype = *parsed_dtype;
  s.batch = integer_field(j, "batch", 1);
  s.heads_q = integer_field(j, "heads", 1);
  s.heads_kv = integer_field(j, "heads_kv", s.heads_q);
  s.head_dim = integer_field(j, "head_dim", 64);
  s.head_dim_v = integer_field(j, "head_dim_v", s.head_dim);

  const bool gemm_by_name = s.op == TuneOp::gemm && (j.contains("m") || j.contains("n") || j.contains("k"));
  auto tokens = per_dim_field<int64_t>(j, "tokens");
  if (gemm_by_name && tokens.empty()) tokens = {1};  // replaced by "m" (read_gemm_fields)
  if (tokens.empty()) reject("tokens: missing; allowed: 1 to 3 extents, e.g. [56, 56]");
  auto tokens_kv = per_dim_field<int64_t>(j, "tokens_kv");
  if (tokens_kv.empty()) tokens_kv = tokens;
  if (tokens_kv.size() != tokens.size()) {
    reject("tokens_kv: " + std::to_string(tokens_kv.size()) + " extents but tokens has " +
           std::to_string(tokens.size()) + "; allowed: the same count");
  }
  s.token_dims = static_cast<int32_t>(tokens.size());
  for (int d = 0; d < s.token_dims; ++d) {
    s.tokens[static_cast<size_t>(d)] = tokens[static_cast<size_t>(d)];
    s.tokens_kv[static_cast<size_t>(d)] = tokens_kv[static_cast<size_t>(d)];
  }

  const std::string mask = string_field(j, "mask", "none");
  const auto parsed_mask = parse_mask(mask);
  if (!parsed_mask) reject("mask: '" + mask + "'; allowed: none, causal, neighborhood, block, element");
  s.mask = *parsed_mask;
  const std::string alignment = string_field(j, "causal_alignment", "top_left");
  if (alignment != "top_left" && alignment != "bottom_right") {
    reject("causal_alignment: '" + alignment + "'; allowed: top_left, bottom_right");
  }
  s.causal_alignment = alignment == "top_left" ? CausalAlignment::top_left : CausalAlignment::bottom_right;
  const auto kernel = per_dim_field<int64_t>(j, "kernel_size");
  const auto dilation = per_dim_field<int64_t>(j, "dilation");
  const auto stride = per_dim_field<int64_t>(j, "stride");
  const auto causal = per_dim_field<bool>(j, "causal");
  for (const auto* list : {&kernel, &dilation, &stride}) {
    if (list->size() > 1 && list->size() != tokens.size())
      reject("kernel_size/dilation/stride: one value per token dim");
  }
  if (causal.size() > 1 && causal.size() != tokens.size()) reject("causal: one value per token dim");
  if (s.mask == MaskKind::neighborhood && kernel.empty()) reject("kernel_size: missing for mask neighborhood");
  for (int d = 0; d < s.token_dims && s.mask == MaskKind::neighborhood; ++d) {
    auto& na = s.neighborhood[static_cast<size_t>(d)];
    na.kernel_size = at_dim<int64_t>(kernel, d, 1);
    na.dilation = at_dim<int64_t>(dilation, d, 1);
    na.stride = at_dim<int64_t>(stride, d, 1);
    na.causal = at_dim<bool>(causal, d, false);
  }
  s.block_q = integer_field(j, "block_q", 0);
  s.block_k = integer_field(j, "block_k", 0);
  if (j.contains("density")) {
    if (!j.at("density").is_number()) reject("density: " + j.at("density").dump() + "; allowed: a number in (0, 1]");
    s.density = j.at("density").get<double>();
  }
  s.variant = static_cast<int32_t>(integer_field(j, "variant", 0));
  s.positional_bias = integer_field(j, "rpb", 0) != 0;
  if (s.op == TuneOp::gemm) read_gemm_fields(j, s);
  validate_problem_spec(s);
  return s;
}

std::string problem_spec_to_json(const ProblemSpec& s) {
  nlohmann::ordered_json j;
  j["op"] = op_name(s.op);
  j["dtype"] = dtype_name(s.dtype);
  if (s.op == TuneOp::gemm) {
    j["batch"] = s.batch;
    j["m"] = s.tokens[0];
    j["n"] = s.tokens_kv[0];
    j["k"] = s.head_dim;
    j["transpose_a"] = (s.variant & kGemmATransposed) != 0;
    j["transpose_b"] = (s.variant & kGemmBTransposed) != 0;
    if ((s.variant & kGemmAllowTf32) != 0) j["allow_tf32"] = true;
    return j.dump();
  }
  j["batch"] = s.batch;
  j["heads"] = s.heads_q;
  j["heads_kv"] = s.heads_kv;
  j["head_dim"] = s.head_dim;
  j["head_dim_v"] = s.head_dim_v;
  std::vector<int64_t> tokens, tokens_kv, kernel, dilation, stride;
  std::vector<bool> causal;
  for (int d = 0; d < s.token_dims; ++d) {
    const auto i = static_cast<size_t>(d);
    tokens.push_back(s.tokens[i]);
    tokens_kv.push_back(s.tokens_kv[i]);
    kernel.push_back(s.neighborhood[i].kernel_size);
    dilation.push_back(s.neighborhood[i].dilation);
    stride.push_back(s.neighborhood[i].stride);
    causal.push_back(s.neighborhood[i].causal);
  }
  j["tokens"] = tokens;
  j["tokens_kv"] = tokens_kv;
  j["mask"] = mask_name(s.mask);
  if (s.mask == MaskKind::causal) {
    j["causal_alignment"] = s.causal_alignment == CausalAlignment::top_left ? "top_left" : "bottom_right";
  }
  if (s.mask == MaskKind::neighborhood) {
    j["kernel_size"] = kernel;
    j["dilation"] = dilation;
    j["stride"] = stride;
    j["causal"] = causal;
  }
  if (s.block_q != 0) j["block_q"] = s.block_q;
  if (s.block_k != 0) j["block_k"] = s.block_k;
  if (s.mask == MaskKind::block || s.mask == MaskKind::element) j["density"] = s.density;
  if (s.variant != 0) j["variant"] = s.variant;
  if (s.positional_bias) j["rpb"] = 1;
  return j.dump();
}

std::vector<ProblemSpec> read_problem_list(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw Error(Status::invalid_argument, file.string() + ": cannot open the problem list");
  std::vector<ProblemSpec> problems;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const auto start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#') continue;
    try {
      problems.push_back(problem_spec_from_json(line));
    } catch (const Error& e) {
      throw Error(Status::invalid_argument, file.string() + ":" + std::to_string(line_number) + ": " + e.what());
    }
  }
  return problems;
}

}  // namespace attnkit::tune
