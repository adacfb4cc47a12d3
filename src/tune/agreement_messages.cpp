#include "tune/agreement_messages.hpp"

#include <nlohmann/json.hpp>

#include "attnkit/error.hpp"

namespace attnkit::tune {
namespace {

using json = nlohmann::json;

json timings_to_json(const std::vector<ConfigTiming>& timings) {
  json array = json::array();
  for (const auto& t : timings) {
    array.push_back(json{{"config", t.config_id},
                         {"ok", t.ok},
                         {"error", t.error},
                         {"median", t.median_seconds},
                         {"p25", t.p25_seconds},
                         {"p75", t.p75_seconds},
                         {"samples", t.samples}});
  }
  return array;
}

std::vector<ConfigTiming> timings_from_json(const json& array) {
  std::vector<ConfigTiming> timings;
  for (const auto& j : array) {
    ConfigTiming t;
    t.config_id = j.at("config").get<std::string>();
    t.ok = j.at("ok").get<bool>();
    t.error = j.at("error").get<std::string>();
    t.median_seconds = j.at("median").get<double>();
    t.p25_seconds = j.at("p25").get<double>();
    t.p75_seconds = j.at("p75").get<double>();
    t.samples = j.at("samples").get<int>();
    timings.push_back(std::move(t));
  }
  return timings;
}

template <typename Parse>
auto parse_or_throw(std::string_view bytes, const char* what, Parse parse) {
  try {
    return parse(json::parse(bytes));
  } catch (const std::exception& e) {
    throw Error(Status::internal, std::string("tuner: ranks exchanged a malformed ") + what + ": " + e.what());
  }
}

}  // namespace

std::string encode_decision(const RootDecision& d) {
  return json{{"winner", d.winner},
              {"source", static_cast<int>(d.source)},
              {"tune", d.tune},
              {"default", d.default_id},
              {"candidates", d.candidates},
              {"margin", d.margin},
              {"timings", timings_to_json(d.timings)}}
      .dump();
}

RootDecision decode_decision(std::string_view bytes) {
  return parse_or_throw(bytes, "decision", [](const json& j) {
    RootDecision d;
    d.winner = j.at("winner").get<std::string>();
    const int source = j.at("source").get<int>();
    if (source < 0 || source > static_cast<int>(ChoiceSource::default_config)) throw std::runtime_error("bad source");
    d.source = static_cast<ChoiceSource>(source);
    d.tune = j.at("tune").get<bool>();
    d.default_id = j.at("default").get<std::string>();
    d.candidates = j.at("candidates").get<std::vector<std::string>>();
    d.margin = j.at("margin").get<double>();
    d.timings = timings_from_json(j.at("timings"));
    return d;
  });
}

std::string encode_timings(const std::vector<ConfigTiming>& timings) { return timings_to_json(timings).dump(); }

std::vector<ConfigTiming> decode_timings(std::string_view bytes) {
  return parse_or_throw(bytes, "timing list", [](const json& j) { return timings_from_json(j); });
}

std::vector<size_t> share_of_candidates(size_t candidates, int rank, int size) {
  std::vector<size_t> share;
  for (size_t i = static_cast<size_t>(rank); size > 0 && i < candidates; i += static_cast<size_t>(size)) {
    share.push_back(i);
  }
  return share;
}

}  // namespace attnkit::tune
