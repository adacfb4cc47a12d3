#include "tune/cache_format.hpp"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "tune/stable_hash.hpp"

namespace attnkit::tune {
namespace {

using ordered_json = nlohmann::ordered_json;

// Invalid UTF-8 (a device name from the system, an error text) is written as U+FFFD instead of throwing.
std::string dump(const ordered_json& document, int indent) {
  return document.dump(indent, ' ', false, ordered_json::error_handler_t::replace);
}

std::string checksum_of(ordered_json document) {
  document.erase("checksum");
  return hash_hex(stable_hash(dump(document, -1)));
}

ordered_json device_to_json(const DeviceKey& key) {
  return ordered_json{{"backend", backend_name(key.backend)},   {"name", key.name},
                      {"processors", key.processors},           {"compute_capability", key.compute_capability},
                      {"cuda_runtime", key.cuda_runtime},       {"cuda_driver", key.cuda_driver},
                      {"library_version", key.library_version}, {"kernel_set_hash", key.kernel_set_hash}};
}

// Throws nlohmann exceptions (caught by the parser) on a missing field or a wrong type.
DeviceKey device_from_json(const ordered_json& j) {
  DeviceKey key;
  const std::string backend = j.at("backend").get<std::string>();
  if (backend == "cpu")
    key.backend = Backend::cpu;
  else if (backend == "cuda")
    key.backend = Backend::cuda;
  else
    throw std::runtime_error("device.backend '" + backend + "' is not cpu or cuda");
  key.name = j.at("name").get<std::string>();
  key.processors = j.at("processors").get<int32_t>();
  key.compute_capability = j.at("compute_capability").get<int32_t>();
  key.cuda_runtime = j.at("cuda_runtime").get<std::string>();
  key.cuda_driver = j.at("cuda_driver").get<std::string>();
  key.library_version = j.at("library_version").get<std::string>();
  key.kernel_set_hash = j.at("kernel_set_hash").get<std::string>();
  return key;
}

// Throws like device_from_json.
CacheContents records_from_json(const ordered_json& root) {
  CacheContents contents;
  contents.device = device_from_json(root.at("device"));
  for (const auto& w : root.at("winners")) {
    contents.winners.push_back({w.at("problem").get<std::string>(), w.at("config").get<std::string>(),
                                w.at("default").get<std::string>(), w.at("time_ms").get<int64_t>()});
  }
  for (const auto& t : root.at("timings")) {
    TimingRecord record;
    record.problem = t.at("problem").get<std::string>();
    record.config = t.at("config").get<std::string>();
    record.ok = t.at("ok").get<bool>();
    if (record.ok) {
      record.median_us = t.at("median_us").get<double>();
      record.p25_us = t.at("p25_us").get<double>();
      record.p75_us = t.at("p75_us").get<double>();
      record.samples = t.at("samples").get<int>();
    } else {
      record.error = t.value("error", std::string());
    }
    record.time_ms = t.at("time_ms").get<int64_t>();
    contents.timings.push_back(std::move(record));
  }
  return contents;
}

// The rules a document must pass, in order; each returns "" or what is wrong and what is allowed.

const std::string kVersionsRead = "this build reads version " + std::to_string(kOldestReadableCacheFormatVersion) +
                                  " or " + std::to_string(kCacheFormatVersion);

std::string format_name_problem(const ordered_json& root) {
  if (root.is_object() && root.contains("format") && root["format"] == kCacheFormatName) return "";
  return std::string("not an attnkit tune cache (no \"format\": \"") + kCacheFormatName + "\")";
}

std::string format_version_problem(const ordered_json& root) {
  const ordered_json version = root.contains("format_version") ? root["format_version"] : ordered_json();
  if (!version.is_number_integer())
    return "cache format version " + dump(version, -1) + " is not a whole number; " + kVersionsRead;
  const int64_t number = version.get<int64_t>();
  if (number >= kOldestReadableCacheFormatVersion && number <= kCacheFormatVersion) return "";
  return "cache format version " + std::to_string(number) + ", " + kVersionsRead;
}

// Version 3 and later: the checksum must be the document's own.
std::string checksum_problem(const ordered_json& root) {
  if (!root.contains("checksum") || !root["checksum"].is_string()) {
    return "malformed cache: no \"checksum\" (version " + std::to_string(kCacheFormatVersion) + " files have one)";
  }
  const std::string expected = checksum_of(root);
  if (root["checksum"] == expected) return "";
  return "checksum mismatch (the file was changed after attnkit wrote it: damaged, or edited by hand); expected " +
         expected;
}

// Version 2 had no checksum: its top-level fields must be exactly its own, so that a damaged newer
// file whose version reads 2 is not read without its checksum.
std::string version_2_fields_problem(const ordered_json& root) {
  static const char* const kFields[] = {"format", "format_version", "device", "device_hash", "winners", "timings"};
  for (const auto& [field, value] : root.items()) {
    bool known = false;
    for (const char* name : kFields) known = known || field == name;
    if (!known) return "a version 2 file with a field version 2 never had ('" + field + "'): damaged";
  }
  return "";
}

std::string device_hash_problem(const ordered_json& root, const DeviceKey& device) {
  const std::string expected = device_key_hash(device);
  if (root.contains("device_hash") && root["device_hash"] == expected) return "";
  return "device_hash " + dump(root.contains("device_hash") ? root["device_hash"] : ordered_json(), -1) +
         " is not its device's ('" + expected + "'): damaged";
}

}  // namespace

std::string cache_to_json_text(const CacheContents& contents) {
  ordered_json root;
  root["format"] = kCacheFormatName;
  root["format_version"] = kCacheFormatVersion;
  root["checksum"] = "";  // set below, in this place
  root["device"] = device_to_json(contents.device);
  root["device_hash"] = device_key_hash(contents.device);
  ordered_json winners = ordered_json::array();
  for (const auto& w : contents.winners) {
    winners.push_back(ordered_json{
        {"problem", w.problem}, {"config", w.config}, {"default", w.default_config}, {"time_ms", w.time_ms}});
  }
  root["winners"] = std::move(winners);
  ordered_json timings = ordered_json::array();
  for (const auto& t : contents.timings) {
    ordered_json record{{"problem", t.problem}, {"config", t.config}, {"ok", t.ok}};
    if (t.ok) {
      record["median_us"] = t.median_us;
      record["p25_us"] = t.p25_us;
      record["p75_us"] = t.p75_us;
      record["samples"] = t.samples;
    } else {
      record["error"] = t.error;
    }
    record["time_ms"] = t.time_ms;
    timings.push_back(std::move(record));
  }
  root["timings"] = std::move(timings);
  root["checksum"] = checksum_of(root);
  return dump(root, 1) + "\n";
}

ParsedCache parse_cache_json_text(std::string_view text) {
  ParsedCache parsed;
  const ordered_json root = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    parsed.rejection = "not valid JSON (corrupt or truncated)";
    return parsed;
  }
  parsed.rejection = format_name_problem(root);
  if (parsed.rejection.empty()) parsed.rejection = format_version_problem(root);
  if (!parsed.rejection.empty()) return parsed;
  parsed.format_version = root["format_version"].get<int>();
  CacheContents contents;
  try {
    contents = records_from_json(root);
  } catch (const std::exception& e) {
    parsed.rejection = std::string("malformed cache: ") + e.what();
    return parsed;
  }
  parsed.rejection = parsed.format_version >= 3 ? checksum_problem(root) : version_2_fields_problem(root);
  if (parsed.rejection.empty()) parsed.rejection = device_hash_problem(root, contents.device);
  if (parsed.rejection.empty()) parsed.contents = std::move(contents);
  return parsed;
}

}  // namespace attnkit::tune
