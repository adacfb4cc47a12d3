#include "tune_json.hpp"

#include "tune/cache_format.hpp"

namespace attnkit::cli {

Json cache_file_json(const tune::CacheContents& contents) { return Json::parse(tune::cache_to_json_text(contents)); }

Json device_key_json(const tune::DeviceKey& device) {
  tune::CacheContents contents;
  contents.device = device;
  return cache_file_json(contents).at("device");
}

}  // namespace attnkit::cli
