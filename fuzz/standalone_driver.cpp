// The fuzzer without libFuzzer (any compiler; what CI runs under ASan + UBSan): replays corpus files and
// folders, then runs seeded generated inputs for a bounded count and time, and prints inputs/s. When an
// input breaks a property, crashes, makes a sanitizer report or runs past the per-input time limit, its
// bytes are written to the artifact folder and printed in hex, so it can be replayed and added to the
// corpus (fuzz/README.md).
#include <fcntl.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#if defined(__has_include)
#if __has_include(<sanitizer/common_interface_defs.h>)
#include <sanitizer/common_interface_defs.h>
#define ATTNKIT_FUZZ_HAS_SANITIZER_HOOKS 1
#endif
#endif

#include "fuzz_checks.hpp"
#include "fuzz_ops.hpp"

namespace {

namespace fs = std::filesystem;

const char kUsage[] =
    "usage: attnkit_fuzz_c_abi [options] [FILE|FOLDER ...]\n"
    "  FILE|FOLDER        replay these inputs first (a folder: each file in it, in name order)\n"
    "  --runs N           then run N generated inputs (default 0)\n"
    "  --seconds S        stop generating after S seconds (default: no limit)\n"
    "  --seed X           seed of the first generated input (default 1); input i uses seed X + i\n"
    "  --max-len L        generated inputs are 1 to L bytes long (default 512)\n"
    "  --generate FOLDER  also write every generated input there (to make corpus seeds)\n"
    "  --artifact-dir D   where a failing input is written (default: the current folder)\n"
    "  --timeout T        seconds one input may run before it counts as a hang (default 20)\n"
    "  --quiet            print the summary only\n";

// The input being run, for the failure handlers (which may only use async-signal-safe calls).
const uint8_t* g_input = nullptr;
std::size_t g_input_size = 0;
char g_artifact_path[4096] = "crash-input";
char g_input_name[1024] = "";

void write_all(int fd, const char* text, std::size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, text, size);
    if (n <= 0) return;
    text += n;
    size -= static_cast<std::size_t>(n);
  }
}
void write_text(int fd, const char* text) { write_all(fd, text, std::strlen(text)); }

// Saves and prints the current input. Called on a violation (SIGABRT), a sanitizer's death, a crash
// signal or the watchdog.
void dump_input(const char* why) {
  if (g_input == nullptr) return;
  write_text(2, "\nattnkit fuzz: ");
  write_text(2, why);
  write_text(2, " while running input ");
  write_text(2, g_input_name);
  write_text(2, "\nattnkit fuzz: what the input generated:\n");
  write_text(2, attnkit::fuzz::notes().c_str());  // only appended to between calls, so readable here
  write_text(2, "attnkit fuzz: input saved to ");
  write_text(2, g_artifact_path);
  write_text(2, "; hex: ");
  const int fd = open(g_artifact_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    write_all(fd, reinterpret_cast<const char*>(g_input), g_input_size);
    close(fd);
  }
  static const char digits[] = "0123456789abcdef";
  for (std::size_t i = 0; i < g_input_size; ++i) {
    const char pair[2] = {digits[g_input[i] >> 4], digits[g_input[i] & 15]};
    write_all(2, pair, 2);
  }
  write_text(2, "\nattnkit fuzz: replay with: attnkit_fuzz_c_abi ");
  write_text(2, g_artifact_path);
  write_text(2, "\n");
  g_input = nullptr;
}

void on_signal(int signal) {
  dump_input(signal == SIGALRM   ? "time limit exceeded (a hang?)"
             : signal == SIGABRT ? "abort (property violated or failed assertion)"
                                 : "crash signal");
  if (signal == SIGALRM) _exit(3);
  std::signal(signal, SIG_DFL);
  raise(signal);
}

#ifdef ATTNKIT_FUZZ_HAS_SANITIZER_HOOKS
void on_sanitizer_death() { dump_input("sanitizer report"); }
#endif

}  // namespace

// gcc links UBSan as its own runtime, whose death does not reach the callback above: a report aborts
// instead (SIGABRT reaches on_signal). UBSAN_OPTIONS still overrides.
extern "C" const char* __ubsan_default_options() { return "print_stacktrace=1:abort_on_error=1"; }

namespace {

void install_handlers() {
  for (int s : {SIGABRT, SIGALRM, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(s, on_signal);
#ifdef ATTNKIT_FUZZ_HAS_SANITIZER_HOOKS
  __sanitizer_set_death_callback(on_sanitizer_death);
#endif
}

// FNV-1a, to name artifacts by content.
uint64_t content_hash(const std::vector<uint8_t>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

struct Options {
  std::vector<std::string> paths;
  uint64_t runs = 0;
  double seconds = -1.0;
  uint64_t seed = 1;
  std::size_t max_len = 512;
  std::string generate_dir;
  std::string artifact_dir = ".";
  unsigned timeout = 20;
  bool quiet = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n%s", arg.c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--runs")
      o.runs = std::stoull(value());
    else if (arg == "--seconds")
      o.seconds = std::stod(value());
    else if (arg == "--seed")
      o.seed = std::stoull(value());
    else if (arg == "--max-len")
      o.max_len = std::max<std::size_t>(1, std::stoull(value()));
    else if (arg == "--generate")
      o.generate_dir = value();
    else if (arg == "--artifact-dir")
      o.artifact_dir = value();
    else if (arg == "--timeout")
      o.timeout = static_cast<unsigned>(std::stoul(value()));
    else if (arg == "--quiet")
      o.quiet = true;
    else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "unknown option %s\n%s", arg.c_str(), kUsage);
      std::exit(2);
    } else {
      o.paths.push_back(arg);
    }
  }
  return o;
}

void run_input(const std::vector<uint8_t>& bytes, const std::string& name, const Options& o) {
  std::snprintf(g_input_name, sizeof(g_input_name), "%s", name.c_str());
  std::snprintf(g_artifact_path, sizeof(g_artifact_path), "%s/crash-%016llx", o.artifact_dir.c_str(),
                static_cast<unsigned long long>(content_hash(bytes)));
  g_input = bytes.data();
  g_input_size = bytes.size();
  alarm(o.timeout);
  attnkit::fuzz::run_one_input(bytes.data(), bytes.size());
  alarm(0);
  g_input = nullptr;
}

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  install_handlers();
  attnkit::fuzz::initialise();
  using Clock = std::chrono::steady_clock;

  std::vector<fs::path> files;
  for (const auto& p : o.paths) {
    if (fs::is_directory(p)) {
      std::vector<fs::path> inside;
      for (const auto& entry : fs::directory_iterator(p)) {
        if (entry.is_regular_file()) inside.push_back(entry.path());
      }
      std::sort(inside.begin(), inside.end());
      files.insert(files.end(), inside.begin(), inside.end());
    } else if (fs::is_regular_file(p)) {
      files.emplace_back(p);
    } else {
      std::fprintf(stderr, "attnkit fuzz: no such file or folder: %s\n", p.c_str());
      return 2;
    }
  }
  const auto replay_start = Clock::now();
  for (const auto& file : files) run_input(read_file(file), file.string(), o);
  const double replay_seconds = std::chrono::duration<double>(Clock::now() - replay_start).count();
  if (!o.quiet && !files.empty()) {
    std::printf("attnkit fuzz: replayed %zu corpus inputs in %.2f s\n", files.size(), replay_seconds);
  }

  if (!o.generate_dir.empty()) fs::create_directories(o.generate_dir);
  const auto start = Clock::now();
  uint64_t generated = 0;
  std::vector<uint8_t> bytes;
  for (; generated < o.runs; ++generated) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (o.seconds >= 0 && elapsed >= o.seconds) break;
    const uint64_t seed = o.seed + generated;
    std::mt19937_64 rng(seed);
    bytes.resize(1 + rng() % o.max_len);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    if (!o.generate_dir.empty()) {
      std::ofstream(fs::path(o.generate_dir) / ("seed-" + std::to_string(seed)), std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    run_input(bytes, "generated seed " + std::to_string(seed) + " (--seed " + std::to_string(seed) + " --runs 1)", o);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const auto& counts = attnkit::fuzz::call_counts();
  std::printf(
      "attnkit fuzz: %zu corpus inputs and %llu generated inputs (seeds %llu..%llu) passed; %.1f generated "
      "inputs/s over %.1f s; %llu C ABI calls checked, %llu accepted\n",
      files.size(), static_cast<unsigned long long>(generated), static_cast<unsigned long long>(o.seed),
      static_cast<unsigned long long>(o.seed + (generated ? generated - 1 : 0)),
      seconds > 0 ? static_cast<double>(generated) / seconds : 0.0, seconds,
      static_cast<unsigned long long>(counts.checked), static_cast<unsigned long long>(counts.accepted));
  return 0;
}
