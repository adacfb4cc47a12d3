// The cache file's JSON text (DESIGN §6.2), human-readable and diffable:
//   {"format": "attnkit-tune-cache", "format_version": 2,
//    "device": {"backend": "cpu", "name": ..., "processors": ..., "compute_capability": ...,
//               "cuda_runtime": ..., "cuda_driver": ..., "library_version": ..., "kernel_set_hash": ...},
//    "device_hash": "<16 hex>",
//    "winners": [{"problem": "<ProblemKey text>", "config": "<id>", "default": "<id>", "time_ms": ...}, ...],
//    "timings": [{"problem": ..., "config": ..., "ok": true, "median_us": ..., "p25_us": ...,
//                 "p75_us": ..., "samples": ..., "time_ms": ...},
//                {"problem": ..., "config": ..., "ok": false, "error": "...", "time_ms": ...}, ...]}
// Parsing never throws: text that is not this format at this version is rejected with a reason.
// Version 2 added the winner's "default" (the evidence rule of cache_records.hpp needs it); files of
// version 1 are rejected like any other version, and the next write replaces them.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "tune/cache_records.hpp"

namespace attnkit::tune {

constexpr const char* kCacheFormatName = "attnkit-tune-cache";
constexpr int kCacheFormatVersion = 2;

std::string cache_to_json_text(const CacheContents& contents);

struct ParsedCache {
  std::optional<CacheContents> contents;
  std::string rejection;  // why contents is empty
};

ParsedCache parse_cache_json_text(std::string_view text);

}  // namespace attnkit::tune
