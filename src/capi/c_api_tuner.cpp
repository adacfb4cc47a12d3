// The C ABI of the tuner control API (attnkit_tuner_* in attnkit.h) over include/attnkit/tuner.hpp.
// Rank collectives arrive as C callbacks; each hands its result back through attnkit_bytes_append
// into an attnkit_bytes the library owns, and a non-zero return becomes an attnkit::Error (the
// tuner turns failures inside an agreement into "failed" timings or the default where it can).
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "attnkit/attnkit.h"
#include "attnkit/tuner.hpp"
#include "capi/c_api_convert.hpp"
#include "capi/c_api_errors.hpp"
#include "capi/c_api_tuner.hpp"

struct attnkit_bytes {
  std::string data;
};

namespace attnkit::capi {
namespace {

bool flag(int32_t value) { return value != 0; }

// cache_dir strings handed out by attnkit_tuner_get_settings stay valid for the process's life (a
// handful of folder names), which is longer than the ABI promises.
const char* interned(const std::string& text) {
  static std::mutex mutex;
  static std::set<std::string> strings;
  std::lock_guard lock(mutex);
  return strings.insert(text).first->c_str();
}

void check_mode(int32_t mode) {
  if (mode < ATTNKIT_TUNE_OFF || mode > ATTNKIT_TUNE_LOAD_ONLY) {
    throw Error(Status::invalid_argument, "settings.mode: " + std::to_string(mode) +
                                              "; allowed: 0 (ATTNKIT_TUNE_OFF), 1 (ATTNKIT_TUNE_ON), 2 "
                                              "(ATTNKIT_TUNE_LOAD_ONLY)");
  }
}

void check_callback(int32_t result, const char* which) {
  if (result != 0) {
    throw Error(Status::internal, std::string("rank group ") + which + " callback returned " + std::to_string(result) +
                                      "; allowed: 0 (success)");
  }
}

}  // namespace

RankCollectives to_collectives(const attnkit_rank_group& g) {
  if (g.agreement != ATTNKIT_AGREE_ROOT_TUNES && g.agreement != ATTNKIT_AGREE_SPLIT_CONFIGS) {
    throw Error(Status::invalid_argument, "group.agreement: " + std::to_string(g.agreement) +
                                              "; allowed: 0 (ATTNKIT_AGREE_ROOT_TUNES), 1 "
                                              "(ATTNKIT_AGREE_SPLIT_CONFIGS)");
  }
  if (g.size > 1 && (g.broadcast == nullptr || g.all_gather == nullptr)) {
    throw Error(Status::invalid_argument,
                "group.broadcast/all_gather: NULL with size " + std::to_string(g.size) +
                    "; allowed: both callbacks set when size > 1 (or pass NULL for a process alone)");
  }
  RankCollectives c;
  c.rank = g.rank;
  c.size = g.size;
  c.agreement = static_cast<Agreement>(g.agreement);
  if (g.size <= 1) return c;
  const attnkit_rank_group copy = g;
  c.broadcast = [copy](std::string& bytes, int root) {
    attnkit_bytes result;
    check_callback(copy.broadcast(copy.context, bytes.data(), static_cast<int64_t>(bytes.size()), root, &result),
                   "broadcast");
    bytes = std::move(result.data);
  };
  c.all_gather = [copy](const std::string& bytes) {
    std::vector<attnkit_bytes> results(static_cast<size_t>(copy.size));
    std::vector<attnkit_bytes*> handles;
    for (auto& r : results) handles.push_back(&r);
    check_callback(copy.all_gather(copy.context, bytes.data(), static_cast<int64_t>(bytes.size()), handles.data()),
                   "all_gather");
    std::vector<std::string> all;
    for (auto& r : results) all.push_back(std::move(r.data));
    return all;
  };
  return c;
}

namespace {

// `text` with its terminating NUL must fit buffer[capacity] (a NULL buffer takes nothing).
void check_capacity(const std::string& text, const char* buffer, int64_t capacity, const char* name) {
  if (buffer != nullptr && capacity < static_cast<int64_t>(text.size()) + 1) {
    throw Error(Status::invalid_argument, std::string(name) + "_capacity: " + std::to_string(capacity) +
                                              " bytes; allowed: at least " + std::to_string(text.size() + 1) +
                                              " for '" + text + "'");
  }
}

void copy_out(const std::string& text, char* buffer) {
  if (buffer != nullptr) std::memcpy(buffer, text.c_str(), text.size() + 1);
}

// Both capacities are checked before either buffer is written: a refused call writes nothing.
void report_config(const TunedConfig& config, char* name, int64_t name_capacity, char* source,
                   int64_t source_capacity) {
  check_capacity(config.name, name, name_capacity, "name");
  check_capacity(config.source, source, source_capacity, "source");
  copy_out(config.name, name);
  copy_out(config.source, source);
}

}  // namespace
}  // namespace attnkit::capi

using namespace attnkit::capi;

extern "C" {

attnkit_status attnkit_tuner_get_settings(attnkit_tuner_settings* settings) {
  return guarded_call([&] {
    require_args(settings, "attnkit_tuner_settings");
    const attnkit::TunerSettings s = attnkit::tuner_settings();
    *settings = attnkit_tuner_settings{};
    settings->mode = static_cast<int32_t>(s.mode);
    settings->deterministic = s.deterministic;
    settings->forward_pass = s.forward_pass;
    settings->backward_pass = s.backward_pass;
    settings->thorough_mode_forward = s.thorough_mode_forward;
    settings->thorough_mode_backward = s.thorough_mode_backward;
    settings->warmup_steps_forward = s.warmup_steps_forward;
    settings->warmup_steps_backward = s.warmup_steps_backward;
    settings->steps_forward = s.steps_forward;
    settings->steps_backward = s.steps_backward;
    settings->top_k = s.top_k;
    settings->cache_dir = interned(s.cache_dir);
  });
}

attnkit_status attnkit_tuner_configure(const attnkit_tuner_settings* settings) {
  return guarded_call([&] {
    require_args(settings, "attnkit_tuner_settings");
    check_mode(settings->mode);
    attnkit::TunerSettings s;
    s.mode = static_cast<attnkit::TuneMode>(settings->mode);
    s.deterministic = flag(settings->deterministic);
    s.forward_pass = flag(settings->forward_pass);
    s.backward_pass = flag(settings->backward_pass);
    s.thorough_mode_forward = flag(settings->thorough_mode_forward);
    s.thorough_mode_backward = flag(settings->thorough_mode_backward);
    s.warmup_steps_forward = settings->warmup_steps_forward;
    s.warmup_steps_backward = settings->warmup_steps_backward;
    s.steps_forward = settings->steps_forward;
    s.steps_backward = settings->steps_backward;
    s.top_k = settings->top_k;
    s.cache_dir = settings->cache_dir == nullptr ? "" : settings->cache_dir;
    attnkit::configure_tuner(s);
  });
}

void attnkit_bytes_append(attnkit_bytes* result, const char* data, int64_t size) {
  if (result == nullptr || data == nullptr || size <= 0) return;
  result->data.append(data, static_cast<size_t>(size));
}

attnkit_status attnkit_tuner_set_rank_group(const attnkit_rank_group* group) {
  return guarded_call(
      [&] { attnkit::set_tuner_rank_group(group == nullptr ? attnkit::RankCollectives{} : to_collectives(*group)); });
}

attnkit_status attnkit_attention_forward_config(const attnkit_attention_forward_args* args,
                                                const attnkit_run_options* options, char* name, int64_t name_capacity,
                                                char* source, int64_t source_capacity) {
  return guarded_call([&] {
    require_args(args, "attnkit_attention_forward_args");
    require_args(name, "name");
    report_config(attnkit::attention_forward_config(to_attention_forward(*args), to_run_options(options)), name,
                  name_capacity, source, source_capacity);
  });
}

attnkit_status attnkit_attention_backward_config(const attnkit_attention_backward_args* args,
                                                 const attnkit_run_options* options, char* name, int64_t name_capacity,
                                                 char* source, int64_t source_capacity) {
  return guarded_call([&] {
    require_args(args, "attnkit_attention_backward_args");
    require_args(name, "name");
    report_config(attnkit::attention_backward_config(to_attention_backward(*args), to_run_options(options)), name,
                  name_capacity, source, source_capacity);
  });
}

}  // extern "C"
