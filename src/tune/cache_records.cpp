#include "tune/cache_records.hpp"

#include <chrono>
#include <map>
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

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace attnkit::tune
