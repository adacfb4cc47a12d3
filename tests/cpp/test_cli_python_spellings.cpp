// The CLI agrees with the Python package (python/attnkit) on defaults and spellings: `run` and
// `tune --dry-run` default to float32, as Python computes with torch's default dtype; retention's
// mode "chunk" is chunkwise; Python's keyword spellings of options are accepted next to the CLI's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "test_cli_support.hpp"

namespace attnkit::test {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

const std::string kQuick = " --backend cpu --warmup 0 --repeat 1 --quiet --json";

Json document_of(const std::string& arguments) {
  const CliResult result = run_cli(arguments);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return Json::accept(result.out) ? Json::parse(result.out) : Json::object();
}

TEST(CliPythonSpellings, RunAndTuneDryRunDefaultToFloat32) {
  const Json run = document_of("run attention --tokens 16 --head-dim 8" + kQuick);
  const Json dry = document_of("tune --dry-run attention --tokens 16 --head-dim 8 --json");
  EXPECT_EQ(run["dtype"], "f32");
  EXPECT_EQ(dry["problem_spec"]["dtype"], "float32");
}

TEST(CliPythonSpellings, RunAndTuneDryRunDescribeTheSameDefaultProblem) {
  const Json run = document_of("run na2d" + kQuick);
  const Json dry = document_of("tune --dry-run na2d --json");
  EXPECT_EQ(dry["problem_spec"]["tokens"], run["problem"]["tokens"]);
  EXPECT_EQ(dry["problem_spec"]["heads"], run["problem"]["heads"]);
  EXPECT_EQ(dry["problem_spec"]["head_dim"], run["problem"]["head_dim"]);
  EXPECT_EQ(dry["problem_spec"]["kernel_size"], run["problem"]["mask"]["kernel_size"]);
}

TEST(CliPythonSpellings, RetentionModeChunkIsTheChunkwiseForm) {
  const std::string problem = "run retention --tokens 37 --heads 2 --head-dim 8 --chunk 8 --backward --check --seed 7";
  const Json chunk = document_of(problem + " --mode chunk" + kQuick);
  const Json chunkwise = document_of(problem + " --mode chunkwise" + kQuick);
  EXPECT_EQ(chunk["problem"]["mode"], "chunkwise");
  EXPECT_EQ(chunk["flops"], chunkwise["flops"]);
  EXPECT_EQ(chunk["check"]["passed"], true);
  // The same inputs through the same form: the same errors against the reference, to the last bit.
  EXPECT_EQ(chunk["check"]["outputs"], chunkwise["check"]["outputs"]);
}

TEST(CliPythonSpellings, PythonKeywordSpellingsOfOptionsAreAccepted) {
  const Json chunk_size = document_of("run retention --tokens 16 --head-dim 8 --chunk-size 4" + kQuick);
  EXPECT_EQ(chunk_size["problem"]["chunk_size"], 4);
  const Json causal = document_of(
      "run attention --tokens 8 --tokens-kv 12 --head-dim 8 --is-causal --causal-alignment bottom_right" + kQuick);
  EXPECT_EQ(causal["problem"]["mask"]["kind"], "causal");
  EXPECT_EQ(causal["problem"]["mask"]["causal_alignment"], "bottom-right");
  const Json dtype = document_of("run attention --tokens 8 --head-dim 8 --dtype bfloat16" + kQuick);
  EXPECT_EQ(dtype["dtype"], "bf16");
  const Json dry = document_of("tune --dry-run attention --tokens 16 --is-causal --causal-alignment top_left --json");
  EXPECT_EQ(dry["problem_spec"]["mask"], "causal");
  const CliResult cache = run_cli("cache show --cache-dir '" + fresh_folder("cli_python_cache_dir") + "' --json");
  EXPECT_EQ(cache.exit_code, 0) << cache.output;
}

TEST(CliPythonSpellings, AnUnknownModeNamesBothSpellings) {
  const CliResult result = run_cli("run retention --mode blocks --backend cpu");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.err, HasSubstr("--mode: 'blocks'; allowed: parallel, chunkwise (also spelled chunk), recurrent"));
}

}  // namespace
}  // namespace attnkit::test
