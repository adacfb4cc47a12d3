// `attnkit cache`: the tuning cache on disk (DESIGN §6.2, §6.8).
//   attnkit cache show [--dir DIR] [--timings] [--json]
//                                                each cache file: its device key, its winners with their
//                                                default (IGNORED: why, for a winner a tuner would drop), and timings;
//                                                as text or one JSON document (fields in kShowJsonFields)
//   attnkit cache merge INPUT... [--dir DIR] [--json]  fold cache files (or folders of them) from elsewhere into
//                                                DIR, each into its own device's file; newest record wins
//   attnkit cache clear [--dir DIR] [--json]     delete DIR's cache files
// DIR defaults to $ATTNKIT_CACHE_DIR, else ~/.cache/attnkit. Shipping a cache = copying its files.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli_errors.hpp"
#include "cli_json.hpp"
#include "commands.hpp"
#include "python_spellings.hpp"
#include "tune/cache_admin.hpp"
#include "tune/tuner_settings.hpp"
#include "tune_json.hpp"

namespace attnkit::cli {
namespace {

using namespace attnkit::tune;

const char* const kShowJsonFields = R"(JSON output (--json): one document on stdout:
  cache_dir, files: [{file, valid, and when not valid rejection; when valid: device {backend, name,
  processors, compute_capability, cuda_runtime, cuda_driver, library_version, kernel_set_hash},
  device_hash, timing_count, failed_timing_count, winners: [{problem, config, default, time_ms,
  median_us, default_median_us (null when not timed or failed), ignored (why a tuner drops it, or
  null)}], and with --timings timings: the file's records {problem, config, ok, median_us, p25_us,
  p75_us, samples, time_ms, or error when not ok}}]
The names are the cache file's own (docs/tuner.md). Errors go to stderr (exit 2).)";
const char* const kMergeJsonFields = R"(JSON output (--json): one document on stdout:
  cache_dir, files_merged, files_rejected, winners, timings, written: [file], problems: [why an input was
  rejected or a write failed] (also on stderr). Exit status 1 when problems is not empty.)";
const char* const kClearJsonFields = R"(JSON output (--json): one document on stdout: cache_dir, removed (files).)";

struct CacheOptions {
  std::string dir;
  bool timings = false;
  bool json = false;
  std::vector<std::string> inputs;
};

// A winner with the timings that back it: its own and its default's (null when absent or failed),
// and why a tuner loading the file would drop it ("" when it would not).
struct WinnerEvidence {
  const WinnerRecord* winner = nullptr;
  const TimingRecord* own = nullptr;
  const TimingRecord* baseline = nullptr;
  std::string ignored;
};

std::vector<WinnerEvidence> winner_evidence(const CacheContents& c) {
  std::map<std::pair<std::string, std::string>, const TimingRecord*> timing_of;
  for (const auto& t : c.timings) {
    if (t.ok) timing_of[{t.problem, t.config}] = &t;
  }
  const auto find = [&](const std::string& problem, const std::string& config) -> const TimingRecord* {
    const auto found = timing_of.find({problem, config});
    return found == timing_of.end() ? nullptr : found->second;
  };
  // The same check a tuner makes when it loads the file: a winner without the evidence is dropped.
  const std::vector<std::string> unproven = winner_evidence_problems(c, settings_from_environment().margin);
  std::vector<WinnerEvidence> evidence;
  for (size_t i = 0; i < c.winners.size(); ++i) {
    const WinnerRecord& w = c.winners[i];
    evidence.push_back({&w, find(w.problem, w.config), find(w.problem, w.default_config), unproven[i]});
  }
  return evidence;
}

size_t failed_timings(const CacheContents& c) {
  size_t failed = 0;
  for (const auto& t : c.timings) failed += t.ok ? 0 : 1;
  return failed;
}

std::string cache_dir(const CacheOptions& o) {
  const std::string dir = o.dir.empty() ? default_cache_dir() : o.dir;
  if (dir.empty()) throw UsageError("--dir: no cache folder (HOME and ATTNKIT_CACHE_DIR are unset); pass --dir DIR");
  return dir;
}

void print_device(const DeviceKey& d) {
  std::printf("  device: %s %s, %d %s", backend_name(d.backend), d.name.c_str(), d.processors,
              d.backend == Backend::cpu ? "threads" : "SMs");
  if (d.backend == Backend::cuda) {
    std::printf(", compute capability %d.%d, CUDA runtime %s, driver %s", d.compute_capability / 10,
                d.compute_capability % 10, d.cuda_runtime.c_str(), d.cuda_driver.c_str());
  }
  std::printf("\n  attnkit %s, kernel set %s\n", d.library_version.c_str(), d.kernel_set_hash.c_str());
}

void print_file_text(const CacheFileInfo& info, bool timings) {
  std::printf("%s\n", info.file.filename().c_str());
  if (!info.valid) {
    std::printf("  ignored: %s\n", info.rejection.c_str());
    return;
  }
  const CacheContents& c = info.contents;
  print_device(c.device);
  std::printf("  %zu winners, %zu timings (%zu failed)\n", c.winners.size(), c.timings.size(), failed_timings(c));
  for (const WinnerEvidence& e : winner_evidence(c)) {
    const WinnerRecord& w = *e.winner;
    std::printf("  %s -> %s", w.problem.c_str(), w.config.c_str());
    if (e.own != nullptr) {
      std::printf(" (%.2f us", e.own->median_us);
    } else {
      std::printf(" (no timing");
    }
    if (w.config == w.default_config) {
      std::printf(", the default)");
    } else if (e.baseline != nullptr) {
      std::printf("; default %s %.2f us)", w.default_config.c_str(), e.baseline->median_us);
    } else {
      std::printf("; default %s not timed)", w.default_config.c_str());
    }
    if (!e.ignored.empty()) std::printf(" IGNORED: %s", e.ignored.c_str());
    std::printf("\n");
  }
  if (timings) {
    for (const auto& t : c.timings) {
      if (t.ok) {
        std::printf("    %s | %s: median %.2f us [p25 %.2f, p75 %.2f] over %d runs\n", t.problem.c_str(),
                    t.config.c_str(), t.median_us, t.p25_us, t.p75_us, t.samples);
      } else {
        std::printf("    %s | %s: failed: %s\n", t.problem.c_str(), t.config.c_str(), t.error.c_str());
      }
    }
  }
}

Json file_json(const CacheFileInfo& info, bool timings) {
  Json file{{"file", info.file.filename().string()}, {"valid", info.valid}};
  if (!info.valid) {
    file["rejection"] = info.rejection;
    return file;
  }
  const CacheContents& c = info.contents;
  const Json records = cache_file_json(c);
  file["device"] = records.at("device");
  file["device_hash"] = records.at("device_hash");
  file["timing_count"] = c.timings.size();
  file["failed_timing_count"] = failed_timings(c);
  const auto median_or_null = [](const TimingRecord* t) { return t ? Json(t->median_us) : Json(nullptr); };
  Json winners = records.at("winners");
  const std::vector<WinnerEvidence> evidence = winner_evidence(c);
  for (size_t i = 0; i < evidence.size(); ++i) {
    winners[i]["median_us"] = median_or_null(evidence[i].own);
    winners[i]["default_median_us"] = median_or_null(evidence[i].baseline);
    winners[i]["ignored"] = evidence[i].ignored.empty() ? Json(nullptr) : Json(evidence[i].ignored);
  }
  file["winners"] = winners;
  if (timings) file["timings"] = records.at("timings");
  return file;
}

int show(const CacheOptions& o) {
  const std::string dir = cache_dir(o);
  const auto files = list_cache_files(dir);
  if (o.json) {
    Json list = Json::array();
    for (const auto& info : files) list.push_back(file_json(info, o.timings));
    print_json(Json{{"cache_dir", dir}, {"files", list}});
    return 0;
  }
  std::printf("cache folder %s: %zu cache files\n", dir.c_str(), files.size());
  for (const auto& info : files) print_file_text(info, o.timings);
  return 0;
}

int merge(const CacheOptions& o) {
  const std::string dir = cache_dir(o);
  std::vector<std::filesystem::path> inputs(o.inputs.begin(), o.inputs.end());
  const MergeSummary summary = merge_cache_files(inputs, dir);
  for (const auto& problem : summary.problems) std::fprintf(stderr, "attnkit: cache merge: %s\n", problem.c_str());
  if (o.json) {
    Json written = Json::array();
    for (const auto& file : summary.written) written.push_back(file.string());
    print_json(Json{{"cache_dir", dir},
                    {"files_merged", summary.files_merged},
                    {"files_rejected", summary.files_rejected},
                    {"winners", summary.winners},
                    {"timings", summary.timings},
                    {"written", written},
                    {"problems", summary.problems}});
    return summary.problems.empty() ? 0 : 1;
  }
  std::printf("merged %zu files (%zu winners, %zu timings) into %s; %zu inputs rejected\n", summary.files_merged,
              summary.winners, summary.timings, dir.c_str(), summary.files_rejected);
  for (const auto& file : summary.written) std::printf("  wrote %s\n", file.c_str());
  return summary.problems.empty() ? 0 : 1;
}

int clear(const CacheOptions& o) {
  const std::string dir = cache_dir(o);
  const size_t removed = clear_cache(dir);
  if (o.json) {
    print_json(Json{{"cache_dir", dir}, {"removed", removed}});
  } else {
    std::printf("removed %zu cache files from %s\n", removed, dir.c_str());
  }
  return 0;
}

}  // namespace

Command add_cache_command(CLI::App& parent) {
  auto o = std::make_shared<CacheOptions>();
  CLI::App* app = parent.add_subcommand("cache", "Show, merge or clear the tuning cache");
  app->require_subcommand(1);
  const auto add_dir = [&](CLI::App* sub) {
    sub->add_option("--dir", o->dir, "Cache folder (default $ATTNKIT_CACHE_DIR or ~/.cache/attnkit)");
    add_python_spelling(sub, "--cache-dir", o->dir);  // attnkit.tuner.configure(cache_dir=...)
  };
  CLI::App* show_app = app->add_subcommand("show", "List each cache file's device and winners");
  add_dir(show_app);
  show_app->add_flag("--timings", o->timings, "Also list every timing record");
  show_app->add_flag("--json", o->json, "Print one JSON document on stdout instead of text (fields below)");
  show_app->footer(std::string(kShowJsonFields) + "\n\nPython's spelling --cache-dir is accepted for --dir.");
  CLI::App* merge_app = app->add_subcommand("merge", "Merge cache files or folders into the cache folder");
  add_dir(merge_app);
  merge_app->add_option("inputs", o->inputs, "Cache files or folders of them")->required()->check(CLI::ExistingPath);
  merge_app->add_flag("--json", o->json, "Print one JSON document on stdout instead of text (fields below)");
  merge_app->footer(kMergeJsonFields);
  CLI::App* clear_app = app->add_subcommand("clear", "Delete the cache folder's cache files");
  add_dir(clear_app);
  clear_app->add_flag("--json", o->json, "Print one JSON document on stdout instead of text (fields below)");
  clear_app->footer(kClearJsonFields);
  return Command{app, [o, show_app, merge_app, clear_app]() -> int {
                   if (show_app->parsed()) return show(*o);
                   if (merge_app->parsed()) return merge(*o);
                   if (clear_app->parsed()) return clear(*o);
                   throw UsageError("cache: give show, merge or clear");
                 }};
}

}  // namespace attnkit::cli
