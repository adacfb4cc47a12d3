#include "tune/cache_records.hpp"

#include <chrono>
#include <map>
#include <sstream>
#include <utility>

namespace attnkit::tune {

void merge_cache_contents(CacheContents& into, const CacheContents& from) {
  std::map<std::pair<std::string, std::string>, TimingRecord> timings;
  for (auto& record : into.timings) timings[{record.problem, record.config}] = std::move(record);
  for (const auto& record : from.timings) {
    auto [it, inserted] = timings.try_emplace({record.problem, record.config}, record);
    if (!inserted && record.time_ms > it->second.time_ms) it->second = record;
  }
  std::map<std::string, WinnerRecord> winners;
  for (auto& record : into.winners) winners[record.problem] = std::move(record);
  for (const auto& record : from.winners) {
    auto [it, inserted] = winners.try_emplace(record.problem, record);
    if (!inserted && record.time_ms > it->second.time_ms) it->second = record;
  }
  into.timings.clear();
  for (auto& [key, record] : timings) into.timings.push_back(std::move(record));
  into.winners.clear();
  for (auto& [key, record] : winners) into.winners.push_back(std::move(record));
}

TimingRecord timing_record(const std::string& problem, const ConfigTiming& timing, int64_t time_ms) {
  TimingRecord record;
  record.problem = problem;
  record.config = timing.config_id;
  record.ok = timing.ok;
  record.error = timing.error;
  record.median_us = timing.median_seconds * 1e6;
  record.p25_us = timing.p25_seconds * 1e6;
  record.p75_us = timing.p75_seconds * 1e6;
  record.samples = timing.samples;
  record.time_ms = time_ms;
  return record;
}

ConfigTiming config_timing(const TimingRecord& record) {
  ConfigTiming timing;
  timing.config_id = record.config;
  timing.ok = record.ok;
  timing.error = record.error;
  timing.median_seconds = record.median_us * 1e-6;
  timing.p25_seconds = record.p25_us * 1e-6;
  timing.p75_seconds = record.p75_us * 1e-6;
  timing.samples = record.samples;
  return timing;
}

namespace {

using TimingIndex = std::map<std::pair<std::string, std::string>, const TimingRecord*>;

std::string describe(const TimingRecord& record) {
  std::ostringstream out;
  out.precision(4);
  out << record.median_us << " us (p25 " << record.p25_us << ", p75 " << record.p75_us << ", " << record.samples
      << " runs)";
  return out.str();
}

std::string evidence_problem(const WinnerRecord& winner, const TimingIndex& index, double margin) {
  if (winner.default_config.empty()) return "names no default to compare with";
  if (winner.config == winner.default_config) return "";  // the default itself: nothing to prove
  const auto lookup = [&](const std::string& config) -> const TimingRecord* {
    const auto it = index.find({winner.problem, config});
    return it == index.end() ? nullptr : it->second;
  };
  const TimingRecord* baseline = lookup(winner.default_config);
  if (baseline == nullptr) return "has no timing of its default '" + winner.default_config + "'";
  const TimingRecord* own = lookup(winner.config);
  if (own == nullptr) return "has no timing of its own";
  if (!own->ok) return "has a failed timing of its own";
  if (!baseline->ok) return "";  // the default could not run; a config that ran replaces it
  const ConfigTiming candidate = config_timing(*own);
  const ConfigTiming reference = config_timing(*baseline);
  if (beats_default(candidate, reference, margin)) return "";
  std::ostringstream why;
  why.precision(3);
  why << "does not beat its default '" << winner.default_config << "' by more than the margin (" << margin * 100
      << " %) and the noise (" << comparison_noise(candidate, reference) * 100 << " %): " << describe(*own)
      << " against " << describe(*baseline);
  return why.str();
}

}  // namespace

std::vector<std::string> winner_evidence_problems(const CacheContents& contents, double margin) {
  TimingIndex index;
  for (const auto& record : contents.timings) index[{record.problem, record.config}] = &record;
  std::vector<std::string> problems;
  problems.reserve(contents.winners.size());
  for (const auto& winner : contents.winners) problems.push_back(evidence_problem(winner, index, margin));
  return problems;
}

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace attnkit::tune
