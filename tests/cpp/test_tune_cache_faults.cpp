// The tuner cache under faults (DESIGN §6.2, docs/reliability.md "Tuner cache durability"): damaged,
// foreign and old files, folders that refuse writes, processes writing at once and writers killed
// mid-write. Whatever happens, the library does not crash, never uses a damaged record, loses at most
// the result being written, and says in its log what it ignored. Every random choice is seeded and no
// assertion depends on timing.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/log.hpp"
#include "test_tune_support.hpp"
#include "tune/cache_admin.hpp"
#include "tune/cache_file.hpp"
#include "tune/cache_format.hpp"

namespace attnkit::tune {
namespace {

namespace fs = std::filesystem;
using testing::ScriptedRunner;
using testing::TempDir;

// c2 wins every tuning by far (c0 is the default); device "B" below prefers c1.
const std::map<std::string, double> kTimings{{"c0", 100}, {"c1", 80}, {"c2", 20}};
const std::map<std::string, double> kOtherDeviceTimings{{"c0", 100}, {"c1", 20}, {"c2", 80}};

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const fs::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

// Distinct problems that bucketing cannot merge: the head count is never bucketed.
ProblemKey problem(int index) {
  ProblemSpec spec = testing::test_problem();
  spec.heads_q = 2 * (index + 1);
  spec.heads_kv = 2;
  return make_problem_key(spec);
}

size_t count_warnings(const std::string& log) {
  size_t count = 0;
  for (size_t at = log.find("attnkit [warning]"); at != std::string::npos; at = log.find("attnkit [warning]", at + 1)) {
    ++count;
  }
  return count;
}

// The log assertions read stderr: they need warnings enabled and no ATTNKIT_LOG_FILE.
bool warnings_reach_stderr() {
  const char* file = std::getenv("ATTNKIT_LOG_FILE");
  return detail::log_enabled(detail::LogLevel::warning) && (file == nullptr || *file == '\0');
}

std::vector<fs::path> temp_files(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().find(".tmp.") != std::string::npos) found.push_back(entry.path());
  }
  return found;
}

std::string listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  std::string text;
  for (const auto& name : names) text += name + "\n";
  return text;
}

// --- Child processes --------------------------------------------------------------------------------

enum class Privileges { same, unprivileged };
constexpr int kCannotDropPrivileges = 77;

// Root passes every permission check; the read-only and unreadable cases run as nobody.
bool drop_privileges() {
  if (::geteuid() != 0) return true;
  constexpr uid_t kNobody = 65534;
  return ::setgroups(0, nullptr) == 0 && ::setresgid(kNobody, kNobody, kNobody) == 0 &&
         ::setresuid(kNobody, kNobody, kNobody) == 0;
}

struct ChildResult {
  int exit_code = -1;   // -signal when killed
  std::string summary;  // what the child's body returned
  std::string log;      // the child's stderr: the library's log
};

// A forked process running `body`; its stderr goes to a file and the text `body` returns comes back
// through a pipe.
class Child {
 public:
  Child(const std::function<std::string()>& body, Privileges privileges = Privileges::same) {
    log_file_ = scratch_.path() / "stderr.log";
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
    std::fflush(stdout);
    std::fflush(stderr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(pipe_fds[0]);
      const int log_fd = ::open(log_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(log_fd, STDERR_FILENO);
      if (privileges == Privileges::unprivileged && !drop_privileges()) ::_exit(kCannotDropPrivileges);
      std::string summary;
      int code = 0;
      try {
        summary = body();
      } catch (const std::exception& e) {
        summary = std::string("threw: ") + e.what();
        code = 3;
      }
      for (size_t sent = 0; sent < summary.size();) {
        const ssize_t n = ::write(pipe_fds[1], summary.data() + sent, summary.size() - sent);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      ::_exit(code);
    }
    ::close(pipe_fds[1]);
    summary_fd_ = pipe_fds[0];
  }
  ~Child() {
    if (pid_ > 0 && !finished_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  bool running() {
    if (finished_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
    record(status);
    return false;
  }
  ChildResult wait() {
    std::string summary;
    char buffer[4096];
    for (ssize_t n; (n = ::read(summary_fd_, buffer, sizeof buffer)) > 0;)
      summary.append(buffer, static_cast<size_t>(n));
    ::close(summary_fd_);
    if (!finished_) {
      int status = 0;
      ::waitpid(pid_, &status, 0);
      record(status);
    }
    result_.summary = summary;
    result_.log = read_text(log_file_);
    return result_;
  }

 private:
  void record(int status) {
    finished_ = true;
    result_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }

  TempDir scratch_;
  fs::path log_file_;
  pid_t pid_ = -1;
  int summary_fd_ = -1;
  bool finished_ = false;
  ChildResult result_;
};

ChildResult run_in_child(const std::function<std::string()>& body, Privileges privileges = Privileges::same) {
  Child child(body, privileges);
  return child.wait();
}

// A forked process running `body` (which never returns) with the write end of a pipe whose read end
// comes back, for a child that is killed rather than left to finish (Child collects finished ones).
struct ForkedProcess {
  pid_t pid = -1;
  int report_fd = -1;  // the read end
};

ForkedProcess fork_with_report_pipe(const std::function<void(int report_fd)>& body) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::fflush(stdout);
  ForkedProcess process;
  process.pid = ::fork();
  if (process.pid < 0) throw std::runtime_error("fork failed");
  if (process.pid == 0) {
    ::close(fds[0]);
    body(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  process.report_fd = fds[0];
  return process;
}

// Whether this process can run a child as an unprivileged user (it is not root, or root may switch).
bool unprivileged_children_possible() {
  static const bool possible = run_in_child([] { return std::string(); }, Privileges::unprivileged).exit_code == 0;
  return possible;
}

// --- The fixture: one cache folder, the scripted configs c0 (default), c1, c2 -----------------------

class TuneCacheFaults : public ::testing::Test {
 protected:
  TuneCacheFaults()
      : registry_(testing::scripted_registry({10, 20, 30})),
        device_(testing::test_device(registry_)),
        file_(cache_file_path(dir_.path(), device_)) {}

  TunerOptions options(TuneMode mode, const DeviceKey* device = nullptr) const {
    TunerOptions o = testing::test_options(registry_, testing::fast_settings(mode, dir_.str()));
    if (device != nullptr) o.device = *device;
    return o;
  }

  // Tunes problems [first, first + count) in this process; each result is written to the cache.
  void tune_problems(int first, int count, const DeviceKey* device = nullptr,
                     const std::map<std::string, double>& timings = kTimings) const {
    Tuner tuner(options(TuneMode::on, device));
    ScriptedRunner runner(timings);
    for (int i = first; i < first + count; ++i)
      ASSERT_EQ(tuner.choose(problem(i), &runner).source, ChoiceSource::tuned);
  }

  // "<source>:<config>" of each problem, space-separated, then "winners=<n>": what a tuner answers.
  static std::string answers(Tuner& tuner, int first, int count, Runner* runner) {
    std::string text;
    for (int i = first; i < first + count; ++i) {
      const TuneChoice choice = tuner.choose(problem(i), runner);
      text += std::string(source_name(choice.source)) + ":" + choice.config->id + " ";
    }
    return text + "winners=" + std::to_string(tuner.known_winners());
  }

  CacheContents contents() const { return read_cache_file(file_, &device_).contents; }

  // Tunes problems [0, count) in a child run as nobody (see tune_in_child) while the cache folder
  // has mode `folder_mode`.
  ChildResult tune_unprivileged_in_folder_of_mode(mode_t folder_mode, int count) const;

  DeviceKey other_device() const {
    DeviceKey other = device_;
    other.processors = 8;  // another machine, or another worker count
    return other;
  }

  ConfigSpaceRegistry registry_;
  TempDir dir_;
  DeviceKey device_;
  fs::path file_;
};

// --- Damaged files ----------------------------------------------------------------------------------

TEST_F(TuneCacheFaults, ATruncatedFileIsNeverUsedAtAnyByteOffset) {
  if (!warnings_reach_stderr()) GTEST_SKIP() << "the log does not reach stderr at warning level";
  tune_problems(0, 2);
  const std::string original = read_text(file_);
  const std::string intact = cache_to_json_text(contents());
  size_t rejected = 0;
  ::testing::internal::CaptureStderr();
  for (size_t length = 0; length < original.size(); ++length) {
    write_text(file_, original.substr(0, length));
    Tuner tuner(options(TuneMode::load_only));
    if (tuner.cache_problems().empty()) {
      // Only the whole document (its final newline cut at most) may be accepted, and then unchanged.
      EXPECT_GE(length, original.size() - 1);
      EXPECT_TRUE(cache_to_json_text(contents()) == intact) << "cut at " << length << " used a damaged record";
      EXPECT_EQ(tuner.known_winners(), 2u);
      continue;
    }
    ++rejected;
    EXPECT_EQ(tuner.cache_problems().size(), 1u) << "cut at " << length;
    EXPECT_EQ(tuner.known_winners(), 0u) << "cut at " << length;
    EXPECT_EQ(tuner.choose(problem(0), nullptr).source, ChoiceSource::default_config) << "cut at " << length;
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rejected, original.size() - 1) << "every cut but the final newline's is reported";
  EXPECT_EQ(count_warnings(log), rejected) << "one warning per rejected load";
  std::cout << "figures: " << original.size() << " truncations of a " << original.size() << "-byte file, " << rejected
            << " rejected and reported, " << original.size() - rejected << " whole (final newline cut)\n";
}

TEST_F(TuneCacheFaults, ATruncatedFileIsReplacedCleanlyByTheNextWrite) {
  tune_problems(0, 2);
  const std::string original = read_text(file_);
  std::mt19937 random(23);
  for (int trial = 0; trial < 16; ++trial) {
    const size_t length = random() % (original.size() - 1);
    write_text(file_, original.substr(0, length));
    tune_problems(2, 1);  // reads the damaged file (rejected), writes a clean one with its result
    const CacheLoad load = read_cache_file(file_, &device_);
    EXPECT_TRUE(load.problems.empty()) << "cut at " << length;
    ASSERT_EQ(load.contents.winners.size(), 1u) << "cut at " << length;
    EXPECT_EQ(load.contents.winners[0].problem, problem(2).text);
    EXPECT_TRUE(temp_files(dir_.path()).empty());
  }
}

TEST_F(TuneCacheFaults, RandomByteCorruptionIsRejectedOrChangesNothing) {
  tune_problems(0, 3);
  const std::string original = read_text(file_);
  const std::string intact = cache_to_json_text(contents());
  std::mt19937 random(2024);
  constexpr int kTrials = 600;
  int rejected = 0;
  ::testing::internal::CaptureStderr();
  for (int trial = 0; trial < kTrials; ++trial) {
    std::string damaged = original;
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t at = random() % damaged.size();
      damaged[at] = static_cast<char>(static_cast<unsigned char>(damaged[at]) ^ (1 + random() % 255));
    }
    write_text(file_, damaged);
    Tuner tuner(options(TuneMode::load_only));
    if (tuner.cache_problems().empty()) {
      // Accepted: then every record is the one written (only whitespace can have changed).
      EXPECT_TRUE(cache_to_json_text(contents()) == intact) << "trial " << trial << " used a damaged record";
      EXPECT_EQ(answers(tuner, 0, 3, nullptr), "cached:c2 cached:c2 cached:c2 winners=3") << "trial " << trial;
      continue;
    }
    ++rejected;
    EXPECT_EQ(tuner.known_winners(), 0u) << "trial " << trial;
    EXPECT_EQ(answers(tuner, 0, 3, nullptr), "default:c0 default:c0 default:c0 winners=0") << "trial " << trial;
  }
  ::testing::internal::GetCapturedStderr();
  std::cout << "figures: " << kTrials << " corruptions (1-4 random bytes of a " << original.size() << "-byte file), "
            << rejected << " rejected and reported, " << kTrials - rejected << " harmless (whitespace only)\n";
}

TEST_F(TuneCacheFaults, AnUnknownFormatVersionIsIgnoredReportedAndReplaced) {
  tune_problems(0, 1);
  const auto original = nlohmann::ordered_json::parse(read_text(file_));
  const std::vector<nlohmann::ordered_json> versions{0, 1, kCacheFormatVersion + 1, 99, -3, 2.5, "3", nullptr};
  for (const auto& version : versions) {
    auto changed = original;
    changed["format_version"] = version;
    write_text(file_, changed.dump(1));
    {
      Tuner tuner(options(TuneMode::load_only));
      ASSERT_EQ(tuner.cache_problems().size(), 1u) << "format_version " << version.dump();
      EXPECT_NE(tuner.cache_problems()[0].find("version"), std::string::npos) << tuner.cache_problems()[0];
      EXPECT_EQ(tuner.known_winners(), 0u);
    }
    tune_problems(1, 1);
    const CacheLoad load = read_cache_file(file_, &device_);
    EXPECT_TRUE(load.problems.empty());
    EXPECT_EQ(load.contents.winners.size(), 1u);
  }
}

// What attnkit wrote before the checksum: format version 2, the same fields without "checksum".
std::string as_version_2(const std::string& text) {
  auto document = nlohmann::ordered_json::parse(text);
  document.erase("checksum");
  document["format_version"] = 2;
  return document.dump(1);
}

TEST_F(TuneCacheFaults, AVersion2FileIsReadAndTheNextWriteStoresTheCurrentVersion) {
  tune_problems(0, 2);
  write_text(file_, as_version_2(read_text(file_)));
  {
    Tuner tuner(options(TuneMode::load_only));
    EXPECT_TRUE(tuner.cache_problems().empty());
    EXPECT_EQ(answers(tuner, 0, 2, nullptr), "cached:c2 cached:c2 winners=2");
  }
  tune_problems(2, 1);
  EXPECT_EQ(nlohmann::json::parse(read_text(file_)).at("format_version"), kCacheFormatVersion);
  EXPECT_EQ(contents().winners.size(), 3u) << "the version 2 records were kept";
}

TEST_F(TuneCacheFaults, ACurrentFileWhoseVersionReads2IsRejected) {
  tune_problems(0, 1);
  auto document = nlohmann::ordered_json::parse(read_text(file_));
  document["format_version"] = 2;  // a damaged version number: the checksum must not be skipped
  write_text(file_, document.dump(1));
  Tuner tuner(options(TuneMode::load_only));
  ASSERT_EQ(tuner.cache_problems().size(), 1u);
  EXPECT_NE(tuner.cache_problems()[0].find("never had ('checksum')"), std::string::npos) << tuner.cache_problems()[0];
  EXPECT_EQ(tuner.known_winners(), 0u);
}

// --- Foreign devices --------------------------------------------------------------------------------

TEST_F(TuneCacheFaults, AnotherDevicesFileInTheSameFolderIsKeptAndNotUsed) {
  const DeviceKey other = other_device();
  tune_problems(0, 2);
  tune_problems(0, 2, &other, kOtherDeviceTimings);
  const fs::path other_file = cache_file_path(dir_.path(), other);
  ASSERT_NE(other_file, file_);
  const std::string other_text = read_text(other_file);

  Tuner tuner(options(TuneMode::load_only));
  EXPECT_TRUE(tuner.cache_problems().empty());
  EXPECT_EQ(answers(tuner, 0, 2, nullptr), "cached:c2 cached:c2 winners=2") << "this device's own winners";
  tune_problems(2, 1);
  EXPECT_EQ(read_text(other_file), other_text) << "a write for this device leaves the other's file alone";
  Tuner other_tuner(options(TuneMode::load_only, &other));
  EXPECT_EQ(answers(other_tuner, 0, 2, nullptr), "cached:c1 cached:c1 winners=2");
}

TEST_F(TuneCacheFaults, AnotherDevicesCacheAtThisDevicesNameIsNotUsedAndMovedToItsOwnFile) {
  const DeviceKey other = other_device();
  {
    TempDir elsewhere;  // the other device's problems 0 and 1, tuned on another machine...
    TunerOptions there = options(TuneMode::on, &other);
    there.settings.cache_dir = elsewhere.str();
    Tuner tuner(there);
    ScriptedRunner runner(kOtherDeviceTimings);
    ASSERT_EQ(answers(tuner, 0, 2, &runner), "tuned:c1 tuned:c1 winners=2");
    fs::copy_file(cache_file_path(elsewhere.path(), other), file_);  // ...shipped under this device's name
  }
  tune_problems(2, 1, &other, kOtherDeviceTimings);  // the other device's own file here: problem 2

  {
    Tuner tuner(options(TuneMode::load_only));
    ASSERT_EQ(tuner.cache_problems().size(), 1u);
    EXPECT_NE(tuner.cache_problems()[0].find("another device"), std::string::npos) << tuner.cache_problems()[0];
    EXPECT_EQ(answers(tuner, 0, 2, nullptr), "default:c0 default:c0 winners=0") << "never used here";
  }
  tune_problems(3, 1);  // this device's first write at its own name

  Tuner tuner(options(TuneMode::load_only));
  EXPECT_TRUE(tuner.cache_problems().empty());
  EXPECT_EQ(answers(tuner, 0, 4, nullptr), "default:c0 default:c0 default:c0 cached:c2 winners=1");
  Tuner other_tuner(options(TuneMode::load_only, &other));
  EXPECT_TRUE(other_tuner.cache_problems().empty());
  EXPECT_EQ(answers(other_tuner, 0, 3, nullptr), "cached:c1 cached:c1 cached:c1 winners=3")
      << "the misplaced records were kept: merged into the other device's own file";
}

// --- Folders that refuse -----------------------------------------------------------------------------

// Runs a tuner in a child process (by default as nobody when this process is root: root passes every
// permission check) and returns what it answered for problems [0, count) and how many cache problems
// it reported.
ChildResult tune_in_child(const std::function<TunerOptions()>& options, int count,
                          Privileges privileges = Privileges::unprivileged) {
  return run_in_child(
      [&] {
        Tuner tuner(options());
        ScriptedRunner runner(kTimings);
        std::string text;
        for (int i = 0; i < count; ++i) {
          const TuneChoice choice = tuner.choose(problem(i), &runner);
          text += std::string(source_name(choice.source)) + ":" + choice.config->id + " ";
        }
        return text + "problems=" + std::to_string(tuner.cache_problems().size());
      },
      privileges);
}

ChildResult TuneCacheFaults::tune_unprivileged_in_folder_of_mode(mode_t folder_mode, int count) const {
  ::chmod(dir_.path().c_str(), folder_mode);
  ChildResult child = tune_in_child([this] { return options(TuneMode::on); }, count);
  ::chmod(dir_.path().c_str(), 0700);
  EXPECT_EQ(child.exit_code, 0) << child.summary;
  return child;
}

constexpr const char* kNoUnprivilegedUser = "cannot run a child as an unprivileged user here";

TEST_F(TuneCacheFaults, AReadOnlyFolderStillTunesPersistsNothingAndWarnsOnce) {
  if (!unprivileged_children_possible()) GTEST_SKIP() << kNoUnprivilegedUser;
  tune_problems(0, 1);
  const std::string before = read_text(file_);
  const std::string names = listing(dir_.path());
  const ChildResult child = tune_unprivileged_in_folder_of_mode(0555, 4);
  EXPECT_EQ(child.summary, "cached:c2 tuned:c2 tuned:c2 tuned:c2 problems=0");
  EXPECT_EQ(read_text(file_), before);
  EXPECT_EQ(listing(dir_.path()), names) << "no file was created, no temporary file left";
  if (warnings_reach_stderr()) {
    EXPECT_EQ(count_warnings(child.log), 1u) << child.log;
    EXPECT_NE(child.log.find("Permission denied"), std::string::npos) << child.log;
  }
}

TEST_F(TuneCacheFaults, AnEmptyReadOnlyFolderStillTunesAndWarnsOnce) {
  if (!unprivileged_children_possible()) GTEST_SKIP() << kNoUnprivilegedUser;
  const ChildResult child = tune_unprivileged_in_folder_of_mode(0555, 3);
  EXPECT_EQ(child.summary, "tuned:c2 tuned:c2 tuned:c2 problems=0");
  EXPECT_EQ(listing(dir_.path()), "");
  if (warnings_reach_stderr()) {
    EXPECT_EQ(count_warnings(child.log), 1u) << child.log;
  }
}

TEST_F(TuneCacheFaults, AnUnreadableCacheFileIsReportedAndNeverReplaced) {
  if (!unprivileged_children_possible()) GTEST_SKIP() << kNoUnprivilegedUser;
  tune_problems(0, 2);
  const std::string before = read_text(file_);
  ::chmod(lock_file_path(file_).c_str(), 0666);
  ::chmod(file_.c_str(), 0);
  const ChildResult child = tune_unprivileged_in_folder_of_mode(0777, 3);  // only the file cannot be read
  ::chmod(file_.c_str(), 0644);
  EXPECT_EQ(child.summary, "tuned:c2 tuned:c2 tuned:c2 problems=1") << "reported on load, then tuned again";
  EXPECT_EQ(read_text(file_), before) << "records that cannot be read are not overwritten";
  EXPECT_TRUE(temp_files(dir_.path()).empty());
  if (warnings_reach_stderr()) {
    EXPECT_EQ(count_warnings(child.log), 2u) << "the load and the first refused write:\n" << child.log;
    EXPECT_NE(child.log.find("Permission denied"), std::string::npos) << child.log;
  }
}

TEST_F(TuneCacheFaults, ALockFileThisUserCannotWriteStillLocks) {
  if (!unprivileged_children_possible()) GTEST_SKIP() << kNoUnprivilegedUser;
  tune_problems(0, 1);
  ::chmod(lock_file_path(file_).c_str(), 0444);  // another user's lock file in a shared folder
  const ChildResult child = tune_unprivileged_in_folder_of_mode(0777, 3);
  EXPECT_EQ(child.summary, "cached:c2 tuned:c2 tuned:c2 problems=0");
  EXPECT_EQ(contents().winners.size(), 3u) << "both new results were saved";
  if (warnings_reach_stderr()) {
    EXPECT_EQ(count_warnings(child.log), 0u) << child.log;
  }
}

TEST_F(TuneCacheFaults, ACacheFileThatIsAFolderIsReportedAndTuningStillWorks) {
  fs::create_directory(file_);
  const ChildResult child = tune_in_child([&] { return options(TuneMode::on); }, 3, Privileges::same);
  ASSERT_EQ(child.exit_code, 0) << child.summary;
  EXPECT_EQ(child.summary, "tuned:c2 tuned:c2 tuned:c2 problems=1");
  EXPECT_TRUE(fs::is_directory(file_));
  if (warnings_reach_stderr()) {
    EXPECT_EQ(count_warnings(child.log), 2u) << "the load and the first refused write:\n" << child.log;
    EXPECT_NE(child.log.find("Is a directory"), std::string::npos) << child.log;
  }
}

// A full disk, simulated with a file size limit (RLIMIT_FSIZE, SIGXFSZ ignored: writes past it fail
// with EFBIG as they would with ENOSPC); needs no privilege.
TEST_F(TuneCacheFaults, AFullDiskKeepsTheOldFileAndWarnsOncePerOutage) {
  tune_problems(0, 10);
  const ChildResult child = run_in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit original{};
    ::getrlimit(RLIMIT_FSIZE, &original);
    const auto limit_files_to = [&](rlim_t bytes) {
      rlimit limit = original;
      limit.rlim_cur = std::min(bytes, original.rlim_max);
      return ::setrlimit(RLIMIT_FSIZE, &limit) == 0;
    };
    const auto full_disk = [&] { return limit_files_to(fs::file_size(file_) + 256); };
    Tuner tuner(options(TuneMode::on));
    ScriptedRunner runner(kTimings);
    if (!full_disk()) return std::string("setrlimit failed");
    std::string text = answers(tuner, 10, 3, &runner);  // nothing can be saved
    limit_files_to(original.rlim_cur);
    text += " | " + answers(tuner, 13, 1, &runner);  // space again: saved
    full_disk();
    return text + " | " + answers(tuner, 14, 1, &runner);  // full again: reported again
  });
  ASSERT_EQ(child.exit_code, 0) << child.summary;
  EXPECT_EQ(child.summary, "tuned:c2 tuned:c2 tuned:c2 winners=13 | tuned:c2 winners=14 | tuned:c2 winners=15");
  const CacheLoad load = read_cache_file(file_, &device_);
  EXPECT_TRUE(load.problems.empty());
  std::set<std::string> saved;
  for (const auto& w : load.contents.winners) saved.insert(w.problem);
  for (int i = 0; i < 15; ++i) {
    const bool expected = i < 10 || i == 13;
    EXPECT_EQ(saved.count(problem(i).text), expected ? 1u : 0u) << "problem " << i;
  }
  EXPECT_TRUE(temp_files(dir_.path()).empty()) << "the partial temporary files were removed";
  if (warnings_reach_stderr()) {
    EXPECT_EQ(count_warnings(child.log), 2u) << "one per outage:\n" << child.log;
    EXPECT_NE(child.log.find("File too large"), std::string::npos) << child.log;
  }
}

// --- Several processes ------------------------------------------------------------------------------

TEST_F(TuneCacheFaults, ConcurrentTuningProcessesKeepEveryResult) {
  constexpr int kProcesses = 4;
  constexpr int kProblemsEach = 12;
  std::vector<std::unique_ptr<Child>> children;
  for (int p = 0; p < kProcesses; ++p) {
    children.push_back(std::make_unique<Child>([this, p] {
      Tuner tuner(options(TuneMode::on));
      ScriptedRunner runner(kTimings);
      return answers(tuner, p * kProblemsEach, kProblemsEach, &runner);
    }));
  }
  // Meanwhile this process reads the cache as a starting tuner would: never a torn file.
  size_t reads = 0;
  size_t torn = 0;
  const auto any_running = [&] {
    bool running = false;
    for (auto& child : children) running = child->running() || running;
    return running;
  };
  ::testing::internal::CaptureStderr();
  while (any_running()) {
    torn += !read_cache_file(file_, &device_).problems.empty();
    ++reads;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  ::testing::internal::GetCapturedStderr();
  std::string tuned_all;
  for (int i = 0; i < kProblemsEach; ++i) tuned_all += "tuned:c2 ";
  for (auto& child : children) {
    const ChildResult result = child->wait();
    ASSERT_EQ(result.exit_code, 0) << result.summary;
    // Every problem of the child was tuned by it; its tuner may also have read winners the others wrote
    // before its own saves merged the file.
    ASSERT_EQ(result.summary.substr(0, tuned_all.size()), tuned_all) << result.summary;
    const int winners = std::stoi(result.summary.substr(tuned_all.size() + std::string("winners=").size()));
    EXPECT_GE(winners, kProblemsEach) << result.summary;
    EXPECT_LE(winners, kProcesses * kProblemsEach) << result.summary;
    EXPECT_EQ(count_warnings(result.log), 0u) << result.log;
  }
  EXPECT_EQ(torn, 0u) << "of " << reads << " reads during the writes";
  Tuner reloaded(options(TuneMode::load_only));
  EXPECT_TRUE(reloaded.cache_problems().empty());
  EXPECT_EQ(reloaded.known_winners(), static_cast<size_t>(kProcesses * kProblemsEach));
  EXPECT_EQ(winner_evidence_problems(contents(), 0.03), std::vector<std::string>(kProcesses * kProblemsEach, ""));
  EXPECT_TRUE(temp_files(dir_.path()).empty());
  std::cout << "figures: " << kProcesses << " processes x " << kProblemsEach << " tuned problems, "
            << kProcesses * kProblemsEach << " of " << kProcesses * kProblemsEach << " results kept, " << reads
            << " concurrent reads, " << torn << " torn\n";
}

TimingRecord timing_of(const std::string& problem, const std::string& config, double median_us) {
  TimingRecord t;
  t.problem = problem;
  t.config = config;
  t.median_us = median_us;
  t.p25_us = median_us * 0.99;
  t.p75_us = median_us * 1.01;
  t.samples = 10;
  t.time_ms = 1000;
  return t;
}

// One result as the tuner writes it: the winner c2 with its own timing and its default's.
CacheContents result_entry(const DeviceKey& device, const std::string& name) {
  CacheContents entry;
  entry.device = device;
  entry.winners.push_back({name, "c2", "c0", 1000});
  entry.timings.push_back(timing_of(name, "c0", 100.0));
  entry.timings.push_back(timing_of(name, "c2", 20.0 + static_cast<double>(name.size() % 7)));
  return entry;
}

std::string record_text(const WinnerRecord& w) {
  return w.problem + "|" + w.config + "|" + w.default_config + "|" + std::to_string(w.time_ms);
}
std::string record_text(const TimingRecord& t) {
  std::ostringstream text;
  text.precision(17);
  text << t.problem << "|" << t.config << "|" << t.ok << "|" << t.median_us << "|" << t.p25_us << "|" << t.p75_us << "|"
       << t.samples << "|" << t.time_ms;
  return text.str();
}

// Every record of `found` is the record some entry wrote ("" when so, else the first that is not).
std::string damaged_record(const CacheContents& found) {
  for (const auto& w : found.winners) {
    if (record_text(w) != record_text(result_entry(found.device, w.problem).winners[0])) return record_text(w);
  }
  for (const auto& t : found.timings) {
    const CacheContents entry = result_entry(found.device, t.problem);
    const bool known =
        record_text(t) == record_text(entry.timings[0]) || record_text(t) == record_text(entry.timings[1]);
    if (!known) return record_text(t);
  }
  return "";
}

std::set<std::string> problems_of(const CacheContents& contents) {
  std::set<std::string> problems;
  for (const auto& w : contents.winners) problems.insert(w.problem);
  return problems;
}

std::string entry_name(const std::string& writer, int index) { return writer + " entry " + std::to_string(index); }

[[noreturn]] void write_entries_until_killed(const fs::path& file, const DeviceKey& device, const std::string& writer,
                                             int done_fd) {
  for (int i = 0;; ++i) {
    if (!merge_into_cache_file(file, result_entry(device, entry_name(writer, i))).empty()) ::_exit(1);
    const char done = 'x';
    if (::write(done_fd, &done, 1) != 1) ::_exit(2);
  }
}

TEST_F(TuneCacheFaults, AWriterKilledAtRandomPointsLosesAtMostItsInFlightResult) {
  constexpr int kTrials = 40;
  constexpr int kSurvivors = 2;
  constexpr int kEntriesEach = 6;
  constexpr int kFiller = 300;  // a larger file: each write takes longer, more kills land inside one
  CacheContents filler;
  filler.device = device_;
  for (int i = 0; i < kFiller; ++i) merge_cache_contents(filler, result_entry(device_, entry_name("filler", i)));
  ASSERT_EQ(merge_into_cache_file(file_, filler), "");
  const std::string prefilled = read_text(file_);

  std::mt19937 random(4242);
  int completed_total = 0;
  int in_flight_saved = 0;
  int temps_left = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    write_text(file_, prefilled);
    const std::string victim_name = "victim " + std::to_string(trial);
    const ForkedProcess victim_process =
        fork_with_report_pipe([&](int done_fd) { write_entries_until_killed(file_, device_, victim_name, done_fd); });
    const pid_t victim = victim_process.pid;
    std::vector<std::unique_ptr<Child>> survivors;
    for (int s = 0; s < kSurvivors; ++s) {
      const std::string writer = "survivor " + std::to_string(trial) + "." + std::to_string(s);
      survivors.push_back(std::make_unique<Child>([this, writer] {
        for (int i = 0; i < kEntriesEach; ++i) {
          const std::string error = merge_into_cache_file(file_, result_entry(device_, entry_name(writer, i)));
          if (!error.empty()) return error;
        }
        return std::string("ok");
      }));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 25000));
    ::kill(victim, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(victim, &status, 0), victim);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the victim stopped by itself: exit " << WEXITSTATUS(status);
    temps_left += !temp_files(dir_.path()).empty();  // seen right after the kill (a survivor may remove it)
    for (auto& survivor : survivors) {
      const ChildResult result = survivor->wait();
      ASSERT_EQ(result.exit_code, 0);
      ASSERT_EQ(result.summary, "ok");
    }
    int completed = 0;
    char buffer[256];
    for (ssize_t n; (n = ::read(victim_process.report_fd, buffer, sizeof buffer)) > 0;)
      completed += static_cast<int>(n);
    ::close(victim_process.report_fd);
    completed_total += completed;

    const CacheLoad load = read_cache_file(file_, &device_);
    ASSERT_TRUE(load.found);
    ASSERT_TRUE(load.problems.empty()) << "trial " << trial << ": " << load.problems[0];
    EXPECT_EQ(damaged_record(load.contents), "") << "trial " << trial;
    const std::set<std::string> saved = problems_of(load.contents);
    for (int i = 0; i < kFiller; ++i) ASSERT_EQ(saved.count(entry_name("filler", i)), 1u) << "trial " << trial;
    for (int s = 0; s < kSurvivors; ++s) {
      for (int i = 0; i < kEntriesEach; ++i) {
        const std::string name = entry_name("survivor " + std::to_string(trial) + "." + std::to_string(s), i);
        EXPECT_EQ(saved.count(name), 1u) << "trial " << trial << ": " << name << " was lost";
      }
    }
    for (int i = 0; i < completed; ++i) {
      EXPECT_EQ(saved.count(entry_name(victim_name, i)), 1u) << "trial " << trial << ": a completed write was lost";
    }
    in_flight_saved += static_cast<int>(saved.count(entry_name(victim_name, completed)));
    EXPECT_EQ(saved.size(),
              kFiller + kSurvivors * kEntriesEach + completed + saved.count(entry_name(victim_name, completed)))
        << "trial " << trial << ": only the in-flight result may be missing or present";
    EXPECT_TRUE(winner_evidence_problems(load.contents, 0.03) == std::vector<std::string>(saved.size(), ""));

    ASSERT_EQ(merge_into_cache_file(file_, result_entry(device_, entry_name("after", trial))), "")
        << "a later writer is not disturbed by what the killed one left";
    EXPECT_TRUE(temp_files(dir_.path()).empty()) << "trial " << trial << ": the later writer removed stale files";
  }
  std::cout << "figures: " << kTrials << " writers killed (SIGKILL after 0-25 ms, seeded) while " << kSurvivors
            << " others wrote " << kEntriesEach << " results each; " << completed_total
            << " results completed by the killed writers, all kept; " << in_flight_saved
            << " in-flight results had already landed; " << temps_left
            << " kills left a temporary file (seen right after the kill), all removed by later writers\n";
}

TEST_F(TuneCacheFaults, ATempFileLeftByAKilledWriterIsRemovedByTheNextWriter) {
  tune_problems(0, 1);
  const std::string text = read_text(file_);
  // A process id above pid_max (at most 2^22): no live writer can own these.
  const fs::path stale = file_.string() + ".tmp.4194304.0";
  const fs::path another_devices = cache_file_path(dir_.path(), other_device()).string() + ".tmp.4194304.0";
  write_text(stale, text.substr(0, text.size() / 2));
  write_text(another_devices, "{");
  ::testing::internal::CaptureStderr();
  tune_problems(1, 1);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(another_devices)) << "removed only under its own cache file's lock";
  EXPECT_EQ(contents().winners.size(), 2u);
  EXPECT_EQ(count_warnings(log), 0u) << log;
}

TEST_F(TuneCacheFaults, ClearRemovesTheTempFilesOfKilledWriters) {
  tune_problems(0, 1);
  const fs::path stale = file_.string() + ".tmp.4194304.0";
  const fs::path orphan = cache_file_path(dir_.path(), other_device()).string() + ".tmp.4194304.1";
  write_text(stale, "{");
  write_text(orphan, "{");  // a first write killed before its cache file existed
  EXPECT_EQ(clear_cache(dir_.path()), 1u);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_FALSE(fs::exists(file_));
}

TEST_F(TuneCacheFaults, AWriterKilledWhileHoldingTheLockDoesNotBlockTheNext) {
  tune_problems(0, 1);
  const fs::path lock = lock_file_path(file_);
  const ForkedProcess holder = fork_with_report_pipe([&](int report_fd) {
    const ExclusiveFileLock held(lock);
    const char locked = held.locked() ? 'y' : 'n';
    if (::write(report_fd, &locked, 1) != 1) ::_exit(1);
    for (;;) ::pause();
  });
  char locked = 0;
  ASSERT_EQ(::read(holder.report_fd, &locked, 1), 1);
  ::close(holder.report_fd);
  ASSERT_EQ(locked, 'y');
  const auto try_lock = [&] {
    const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
    const bool got = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (fd >= 0) ::close(fd);
    return got;
  };
  EXPECT_FALSE(try_lock()) << "the child holds it";
  ::kill(holder.pid, SIGKILL);
  ASSERT_EQ(::waitpid(holder.pid, nullptr, 0), holder.pid);
  EXPECT_TRUE(try_lock()) << "the kernel released the dead writer's lock";
  tune_problems(1, 1);
  EXPECT_EQ(contents().winners.size(), 2u);
}

}  // namespace
}  // namespace attnkit::tune
