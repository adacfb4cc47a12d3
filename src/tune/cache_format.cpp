#include "tune/cache_format.hpp"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace attnkit::tune {
namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json device_to_json(const DeviceKey& key) {
  return ordered_json{{"backend", backend_name(key.backend)},   {"name", key.name},
                      {"processors", key.processors},           {"compute_capability", key.compute_capability},
                      {"cuda_runtime", key.cuda_runtime},       {"cuda_driver", key.cuda_driver},
                      {"library_version", key.library_version}, {"kernel_set_hash", key.kernel_set_hash}};
}

// Throws nlohmann exceptions (caught by the parser) on a missing field or a wrong type.
DeviceKey device_from_json(const nlohmann::json& j) {
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

}  // namespace

std::string cache_to_json_text(const CacheContents& contents) {
  ordered_json root;
  root["format"] = kCacheFormatName;
  root["format_version"] = kCacheFormatVersion;
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
  return root.dump(1) + "\n";
}

ParsedCache parse_cache_json_text(std::string_view text) {
  ParsedCache parsed;
  const nlohmann::json root = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    parsed.rejection = "not valid JSON (corrupt or truncated)";
    return parsed;
  }
  try {
    if (!root.is_object() || root.value("format", std::string()) != kCacheFormatName) {
      parsed.rejection = std::string("not an attnkit tune cache (no \"format\": \"") + kCacheFormatName + "\")";
      return parsed;
    }
    const int version = root.at("format_version").get<int>();
    if (version != kCacheFormatVersion) {
      parsed.rejection = "cache format version " + std::to_string(version) + ", this build reads version " +
                         std::to_string(kCacheFormatVersion);
      return parsed;
    }
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
    parsed.contents = std::move(contents);
  } catch (const std::exception& e) {
    parsed.rejection = std::string("malformed cache: ") + e.what();
  }
  return parsed;
}

}  // namespace attnkit::tune
