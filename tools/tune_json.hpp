// JSON of the tuner's records for `attnkit tune --json` and `attnkit cache show --json`, in the
// cache file's own field names (src/tune/cache_format.hpp): taken from the cache file's writer, so
// the CLI's output and the files never name a field differently.
#pragma once
#include "cli_json.hpp"
#include "tune/cache_records.hpp"

namespace attnkit::cli {

// The cache file's document for `contents`: format, format_version, device, device_hash, winners, timings.
Json cache_file_json(const tune::CacheContents& contents);

// The cache file's "device": backend, name, processors, compute_capability (major*10 + minor; 0 on
// the CPU), cuda_runtime, cuda_driver, library_version, kernel_set_hash.
Json device_key_json(const tune::DeviceKey& device);

}  // namespace attnkit::cli
