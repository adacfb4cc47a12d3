// The cache file's JSON text (DESIGN §6.2), human-readable and diffable:
//   {"format": "attnkit-tune-cache", "format_version": 3, "checksum": "<16 hex>",
//    "device": {"backend": "cpu", "name": ..., "processors": ..., "compute_capability": ...,
//               "cuda_runtime": ..., "cuda_driver": ..., "library_version": ..., "kernel_set_hash": ...},
//    "device_hash": "<16 hex>",
//    "winners": [{"problem": "<ProblemKey text>", "config": "<id>", "default": "<id>", "time_ms": ...}, ...],
//    "timings": [{"problem": ..., "config": ..., "ok": true, "median_us": ..., "p25_us": ...,
//                 "p75_us": ..., "samples": ..., "time_ms": ...},
//                {"problem": ..., "config": ..., "ok": false, "error": "...", "time_ms": ...}, ...]}
// The checksum is the stable hash (stable_hash.hpp) of the document without its "checksum" field,
// dumped compactly in the file's key order: a flipped byte, a cut or an edit by hand changes a key, a
// value or the structure, and so the checksum, while whitespace does not. A damaged record is
// therefore never used: its file is rejected.
// Parsing never throws: text that is not this format at a version this build reads is rejected with
// a reason. Versions: 1 (no winner "default") is rejected; 2 (no checksum) is read when its top-level
// fields are exactly version 2's and its device_hash is its device's, and a write stores it as
// version 3; 3 added the checksum.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "tune/cache_records.hpp"

namespace attnkit::tune {

constexpr const char* kCacheFormatName = "attnkit-tune-cache";
constexpr int kCacheFormatVersion = 3;
constexpr int kOldestReadableCacheFormatVersion = 2;

std::string cache_to_json_text(const CacheContents& contents);

struct ParsedCache {
  std::optional<CacheContents> contents;
  std::string rejection;   // why contents is empty
  int format_version = 0;  // the version the text was read as
};

ParsedCache parse_cache_json_text(std::string_view text);

}  // namespace attnkit::tune
