// The POSIX operations under the disk cache (cache_file.hpp): an exclusive advisory lock, a read of a
// whole file that tells a missing file from an unreadable one, and the atomic replacement of a file
// (write a temporary file next to it, fsync it, rename it over the file, fsync the folder). Nothing
// here throws; failures come back as text naming the file and the system's reason.
//
// Temporary files are named <file>.tmp.<pid>.<n> and are only created while <file>'s lock is held.
// So a temporary file that the holder of the lock finds was left by a writer that died (or was
// killed) before its rename, and remove_stale_temp_files may delete it.
#pragma once
#include <cstddef>
#include <filesystem>
#include <string>

namespace attnkit::tune {

// <file>.lock. Lock files are never deleted: deleting one that a process holds would let a third
// process lock a new file of the same name while the first still writes.
std::filesystem::path lock_file_path(const std::filesystem::path& file);

enum class LockWait {
  block,              // until the lock is free
  up_to_two_seconds,  // then give up: for a second lock taken while holding one (no deadlock)
};

// Holds flock(LOCK_EX) on `lock_file` (created when missing) for its lifetime. A lock file this user
// may not write (another user's, in a shared folder) is locked through a read-only descriptor.
class ExclusiveFileLock {
 public:
  explicit ExclusiveFileLock(const std::filesystem::path& lock_file, LockWait wait = LockWait::block);
  ~ExclusiveFileLock();
  ExclusiveFileLock(const ExclusiveFileLock&) = delete;
  ExclusiveFileLock& operator=(const ExclusiveFileLock&) = delete;
  bool locked() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }  // when !locked()

 private:
  int fd_ = -1;
  std::string error_;
};

struct FileRead {
  bool found = false;  // false only when nothing exists at the path
  std::string text;
  std::string error;  // when found but not read, the system's reason: "Permission denied", "Is a directory"
};

FileRead read_whole_file(const std::filesystem::path& file);

// Replaces `file` with `text` atomically (readers see the old or the new text, never a part); the
// caller holds `file`'s lock. Returns "" or what failed; a failed attempt leaves no temporary file.
std::string write_file_atomically(const std::filesystem::path& file, const std::string& text);

// The cache file whose temporary file `path` is (<file>.tmp.<pid>.<n>), or an empty path.
std::filesystem::path file_of_temp_file(const std::filesystem::path& path);

// Deletes the temporary files of `file` left by writers that died; the caller holds `file`'s lock.
// Returns how many were deleted.
size_t remove_stale_temp_files(const std::filesystem::path& file);

}  // namespace attnkit::tune
