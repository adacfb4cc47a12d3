// What a cache file holds (DESIGN §6.2): for one device key, one record per (problem, config)
// timing and one winner per problem, each stamped with when it was measured so that merging
// several caches keeps the newest.
//
// A winner carries its evidence: it names the default it was compared with, and the timings of
// both are records of the same file. A winner is only trusted when those records show it beating
// that default by the winner rule of measurement.hpp (winner_evidence_problem); one that is the
// default itself needs no timing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tune/device_key.hpp"
#include "tune/measurement.hpp"

namespace attnkit::tune {

struct TimingRecord {
  std::string problem;  // ProblemKey::text
  std::string config;   // Config::id
  bool ok = true;
  std::string error;  // when !ok
  double median_us = 0.0;
  double p25_us = 0.0;
  double p75_us = 0.0;
  int samples = 0;
  int64_t time_ms = 0;  // Unix time of the measurement
};

struct WinnerRecord {
  std::string problem;
  std::string config;
  std::string default_config;  // the default the winner was timed against (== config when it stayed)
  int64_t time_ms = 0;
};

struct CacheContents {
  DeviceKey device;
  std::vector<TimingRecord> timings;  // sorted by (problem, config) after a merge
  std::vector<WinnerRecord> winners;  // sorted by problem after a merge
};

// Union of both; on a conflict (same problem and config, or same problem's winner) the record with
// the later time_ms wins, `into`'s on a tie. Does not look at the device keys.
void merge_cache_contents(CacheContents& into, const CacheContents& from);

TimingRecord timing_record(const std::string& problem, const ConfigTiming& timing, int64_t time_ms);
ConfigTiming config_timing(const TimingRecord& record);  // seconds again

// For each of contents.winners, in order: "" when `contents` holds the evidence that the winner may
// be used (see above; `margin` is the settings' margin), else why not, e.g. "has no timing of its
// default 'c0'".
std::vector<std::string> winner_evidence_problems(const CacheContents& contents, double margin);

int64_t now_unix_ms();

}  // namespace attnkit::tune
