// `attnkit tune --dry-run OP`: the configs that can run the problem's bucket, cheapest predicted first,
// marking the default and the ones a tuning run would time; as text or, with --json, one document.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

#include "attnkit/error.hpp"
#include "cli_json.hpp"
#include "tune/problem_file.hpp"
#include "tune_json.hpp"
#include "tune_options.hpp"

namespace attnkit::cli {
namespace {

using namespace attnkit::tune;

std::string format_seconds(double seconds) {
  char text[32];
  if (seconds < 1e-3)
    std::snprintf(text, sizeof(text), "%.1f us", seconds * 1e6);
  else if (seconds < 1.0)
    std::snprintf(text, sizeof(text), "%.2f ms", seconds * 1e3);
  else
    std::snprintf(text, sizeof(text), "%.2f s", seconds);
  return text;
}

bool is_timed(const DryRunReport& report, const std::string& id) {
  return std::find(report.would_time.begin(), report.would_time.end(), id) != report.would_time.end();
}

void print_text(const TuneOptions& o, const OfflineDevice& device, const ConfigSpace& space,
                const DryRunReport& report) {
  std::printf("problem: %s\n", report.key.text.c_str());
  std::printf("device:  %s, %s\n", device.options.device.name.c_str(), device.processors.c_str());
  std::printf("%zu valid configs, cheapest predicted first (* default, + timed when tuning with top-k %d%s):\n",
              report.ranking.valid.size(), o.top_k, o.thorough ? ", thorough" : "");
  int width = 14;  // CUDA config names are longer than CPU ones
  for (const auto& config : space.configs) width = std::max(width, static_cast<int>(config.id.size()));
  std::printf("  %-*s %12s %10s %8s %10s %10s\n", width, "config", "predicted", "tiles", "waves", "GFLOP", "MB");
  for (const auto& ranked : report.ranking.valid) {
    const std::string& id = ranked.config->id;
    std::printf("%c%c%-*s %12s %10" PRId64 " %8" PRId64 " %10.3f %10.2f\n", id == report.default_id ? '*' : ' ',
                is_timed(report, id) ? '+' : ' ', width, id.c_str(), format_seconds(ranked.cost.seconds).c_str(),
                ranked.cost.tiles, ranked.cost.waves, ranked.cost.flops * 1e-9, ranked.cost.bytes * 1e-6);
  }
  if (o.all) {
    std::printf("%zu configs cannot run it:\n", report.ranking.rejected.size());
    for (const auto& rejected : report.ranking.rejected) {
      std::printf("  %-*s %s\n", width, rejected.config->id.c_str(), rejected.reason.c_str());
    }
  } else if (!report.ranking.rejected.empty()) {
    std::printf("(%zu configs cannot run it; --all lists them with the reason)\n", report.ranking.rejected.size());
  }
}

void print_document(const TuneOptions& o, const OfflineDevice& device, const ProblemSpec& spec,
                    const DryRunReport& report) {
  Json configs = Json::array();
  for (const auto& ranked : report.ranking.valid) {
    const std::string& id = ranked.config->id;
    configs.push_back(Json{{"config", id},
                           {"default", id == report.default_id},
                           {"timed", is_timed(report, id)},
                           {"predicted_seconds", ranked.cost.seconds},
                           {"tiles", ranked.cost.tiles},
                           {"waves", ranked.cost.waves},
                           {"flops", ranked.cost.flops},
                           {"bytes", ranked.cost.bytes}});
  }
  Json document{{"problem", report.key.text},
                {"problem_spec", Json::parse(problem_spec_to_json(spec))},
                {"device", device_key_json(device.options.device)},
                {"top_k", o.top_k},
                {"thorough", o.thorough},
                {"default", report.default_id.empty() ? Json(nullptr) : Json(report.default_id)},
                {"configs", configs},
                {"rejected_count", report.ranking.rejected.size()}};
  if (o.all) {
    Json rejected = Json::array();
    for (const auto& r : report.ranking.rejected)
      rejected.push_back(Json{{"config", r.config->id}, {"reason", r.reason}});
    document["rejected"] = rejected;
  }
  print_json(document);
}

}  // namespace

int print_dry_run(const TuneOptions& o) {
  const ProblemSpec spec = problem_from_options(o);
  const OfflineDevice device = offline_device(o);
  const TunerOptions& options = device.options;
  const ConfigSpace* space = options.registry->find(spec.op, options.device.backend);
  if (space == nullptr) throw Error(Status::unsupported, "no config space for " + std::string(op_name(spec.op)));
  const DryRunReport report = dry_run(*space, spec, options.limits, options.settings);
  if (o.json) {
    print_document(o, device, spec, report);
  } else {
    print_text(o, device, *space, report);
  }
  return 0;
}

}  // namespace attnkit::cli
