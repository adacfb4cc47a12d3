// `attnkit cache`: the tuning cache on disk (DESIGN §6.2, §6.8).
//   attnkit cache show [--dir DIR] [--timings]   each cache file: its device key, its winners with their
//                                                default (IGNORED: why, for a winner a tuner would drop), and timings
//   attnkit cache merge INPUT... [--dir DIR]     fold cache files (or folders of them) from elsewhere into
//                                                DIR, each into its own device's file; newest record wins
//   attnkit cache clear [--dir DIR]              delete DIR's cache files
// DIR defaults to $ATTNKIT_CACHE_DIR, else ~/.cache/attnkit. Shipping a cache = copying its files.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli_errors.hpp"
#include "commands.hpp"
#include "tune/cache_admin.hpp"
#include "tune/tuner_settings.hpp"

namespace attnkit::cli {
namespace {

using namespace attnkit::tune;

struct CacheOptions {
  std::string dir;
  bool timings = false;
  std::vector<std::string> inputs;
};

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

int show(const CacheOptions& o) {
  const std::string dir = cache_dir(o);
  const auto files = list_cache_files(dir);
  std::printf("cache folder %s: %zu cache files\n", dir.c_str(), files.size());
  for (const auto& info : files) {
    std::printf("%s\n", info.file.filename().c_str());
    if (!info.valid) {
      std::printf("  ignored: %s\n", info.rejection.c_str());
      continue;
    }
    const CacheContents& c = info.contents;
    print_device(c.device);
    std::map<std::pair<std::string, std::string>, const TimingRecord*> timing_of;
    size_t failed = 0;
    for (const auto& t : c.timings) {
      timing_of[{t.problem, t.config}] = &t;
      failed += t.ok ? 0 : 1;
    }
    std::printf("  %zu winners, %zu timings (%zu failed)\n", c.winners.size(), c.timings.size(), failed);
    // The same check a tuner makes when it loads the file: a winner without the evidence is dropped.
    const std::vector<std::string> unproven = winner_evidence_problems(c, settings_from_environment().margin);
    for (size_t i = 0; i < c.winners.size(); ++i) {
      const WinnerRecord& w = c.winners[i];
      const auto own = timing_of.find({w.problem, w.config});
      const auto baseline = timing_of.find({w.problem, w.default_config});
      std::printf("  %s -> %s", w.problem.c_str(), w.config.c_str());
      if (own != timing_of.end() && own->second->ok) {
        std::printf(" (%.2f us", own->second->median_us);
      } else {
        std::printf(" (no timing");
      }
      if (w.config == w.default_config) {
        std::printf(", the default)");
      } else if (baseline != timing_of.end() && baseline->second->ok) {
        std::printf("; default %s %.2f us)", w.default_config.c_str(), baseline->second->median_us);
      } else {
        std::printf("; default %s not timed)", w.default_config.c_str());
      }
      if (!unproven[i].empty()) std::printf(" IGNORED: %s", unproven[i].c_str());
      std::printf("\n");
    }
    if (!o.timings) continue;
    for (const auto& t : c.timings) {
      if (t.ok) {
        std::printf("    %s | %s: median %.2f us [p25 %.2f, p75 %.2f] over %d runs\n", t.problem.c_str(),
                    t.config.c_str(), t.median_us, t.p25_us, t.p75_us, t.samples);
      } else {
        std::printf("    %s | %s: failed: %s\n", t.problem.c_str(), t.config.c_str(), t.error.c_str());
      }
    }
  }
  return 0;
}

int merge(const CacheOptions& o) {
  const std::string dir = cache_dir(o);
  std::vector<std::filesystem::path> inputs(o.inputs.begin(), o.inputs.end());
  const MergeSummary summary = merge_cache_files(inputs, dir);
  for (const auto& problem : summary.problems) std::fprintf(stderr, "attnkit: cache merge: %s\n", problem.c_str());
  std::printf("merged %zu files (%zu winners, %zu timings) into %s; %zu inputs rejected\n", summary.files_merged,
              summary.winners, summary.timings, dir.c_str(), summary.files_rejected);
  for (const auto& file : summary.written) std::printf("  wrote %s\n", file.c_str());
  return summary.problems.empty() ? 0 : 1;
}

int clear(const CacheOptions& o) {
  const std::string dir = cache_dir(o);
  std::printf("removed %zu cache files from %s\n", clear_cache(dir), dir.c_str());
  return 0;
}

}  // namespace

Command add_cache_command(CLI::App& parent) {
  auto o = std::make_shared<CacheOptions>();
  CLI::App* app = parent.add_subcommand("cache", "Show, merge or clear the tuning cache");
  app->require_subcommand(1);
  const auto add_dir = [&](CLI::App* sub) {
    sub->add_option("--dir", o->dir, "Cache folder (default $ATTNKIT_CACHE_DIR or ~/.cache/attnkit)");
  };
  CLI::App* show_app = app->add_subcommand("show", "List each cache file's device and winners");
  add_dir(show_app);
  show_app->add_flag("--timings", o->timings, "Also list every timing record");
  CLI::App* merge_app = app->add_subcommand("merge", "Merge cache files or folders into the cache folder");
  add_dir(merge_app);
  merge_app->add_option("inputs", o->inputs, "Cache files or folders of them")->required()->check(CLI::ExistingPath);
  CLI::App* clear_app = app->add_subcommand("clear", "Delete the cache folder's cache files");
  add_dir(clear_app);
  return Command{app, [o, show_app, merge_app, clear_app]() -> int {
                   if (show_app->parsed()) return show(*o);
                   if (merge_app->parsed()) return merge(*o);
                   if (clear_app->parsed()) return clear(*o);
                   throw UsageError("cache: give show, merge or clear");
                 }};
}

}  // namespace attnkit::cli
