// `attnkit tune --optimize FILE`: tunes every problem of a JSON-lines file into the cache. Each
// problem's outcome goes to stdout as it is known (a line, or with --json one document at the end);
// progress (problems done, configs timed, time elapsed and left) goes to stderr.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cli_errors.hpp"
#include "cli_json.hpp"
#include "progress_reporter.hpp"
#include "tune/problem_file.hpp"
#include "tune_json.hpp"
#include "tune_options.hpp"

namespace attnkit::cli {
namespace {

using namespace attnkit::tune;

struct ProblemOutcome {
  std::string problem;  // the bucket's key text
  std::string winner;   // "" when it failed
  std::string source;   // "tuned", "cached", "default" or "failed"
};

// tune_problem_list() tunes a repeated key once and reports the last tuned winner for the repeat;
// the repeat's own outcome is its first occurrence's.
class OutcomeLog {
 public:
  ProblemOutcome record(const TuneProgress& p) {
    const auto known = first_.find(p.last_problem);
    if (known != first_.end()) {
      ProblemOutcome repeat = known->second;
      if (!repeat.winner.empty()) repeat.source = "cached";
      outcomes_.push_back(repeat);
      return repeat;
    }
    ProblemOutcome outcome{p.last_problem, p.last_winner,
                           p.last_winner.empty() ? "failed" : std::string(source_name(p.last_source))};
    first_.emplace(outcome.problem, outcome);
    outcomes_.push_back(outcome);
    return outcome;
  }
  const std::vector<ProblemOutcome>& outcomes() const { return outcomes_; }

 private:
  std::map<std::string, ProblemOutcome> first_;
  std::vector<ProblemOutcome> outcomes_;
};

Json outcomes_json(const std::vector<ProblemOutcome>& outcomes) {
  Json list = Json::array();
  for (const auto& o : outcomes) {
    list.push_back(Json{
        {"problem", o.problem}, {"winner", o.winner.empty() ? Json(nullptr) : Json(o.winner)}, {"source", o.source}});
  }
  return list;
}

}  // namespace

int optimize(const TuneOptions& o) {
  const std::vector<ProblemSpec> problems = read_problem_list(o.optimize_file);
  const OfflineDevice device = offline_device(o);
  const TunerOptions& options = device.options;
  if (options.settings.cache_dir.empty()) {
    throw UsageError("--dir: no cache folder (HOME and ATTNKIT_CACHE_DIR are unset); pass --dir DIR");
  }
  Tuner tuner(options);
  if (!o.json) {
    std::printf("tuning %zu problems on %s (%s) into %s\n", problems.size(), options.device.name.c_str(),
                device.processors.c_str(), options.settings.cache_dir.c_str());
    std::fflush(stdout);
  }
  OutcomeLog log;
  double elapsed_seconds = 0.0;
  ProgressReporter progress(ProgressOutput::to_stderr(o.quiet), "tuning", static_cast<int64_t>(problems.size()),
                            "problems");
  const auto summary = tune_problem_list(
      tuner, problems, device.make_runner,
      [&](const TuneProgress& p) {
        const ProblemOutcome outcome = log.record(p);
        elapsed_seconds = p.elapsed_seconds;
        if (!o.json) {
          progress.clear_line();
          std::printf("[%zu/%zu] %s -> %s (%s)\n", p.problems_done, p.problems_total, outcome.problem.c_str(),
                      outcome.winner.empty() ? "-" : outcome.winner.c_str(), outcome.source.c_str());
          std::fflush(stdout);
        }
        progress.advance_to(static_cast<int64_t>(p.problems_done), std::to_string(p.configs_timed) + " configs timed",
                            p.estimated_left_seconds);
      },
      o.force);
  progress.finish();
  for (const auto& error : summary.errors) std::fprintf(stderr, "attnkit: tune: %s\n", error.c_str());
  if (o.json) {
    print_json(Json{{"device", device_key_json(options.device)},
                    {"cache_dir", options.settings.cache_dir},
                    {"problems", outcomes_json(log.outcomes())},
                    {"tuned", summary.tuned},
                    {"cached", summary.cached},
                    {"failed", summary.failed},
                    {"configs_timed", summary.configs_timed},
                    {"elapsed_seconds", elapsed_seconds},
                    {"errors", summary.errors}});
  } else {
    std::printf("done: %zu tuned, %zu already cached, %zu failed; %zu configs timed\n", summary.tuned, summary.cached,
                summary.failed, summary.configs_timed);
  }
  return summary.failed == 0 ? 0 : 1;
}

}  // namespace attnkit::cli
