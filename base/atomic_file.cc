#include "base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

namespace gpupack {
namespace {

// OpenTemp creates `temp` afresh; a stale one (a crashed write's) is removed once when `replace_stale`.
int OpenTemp(const char* temp, mode_t mode, bool replace_stale) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = open(temp, kFlags, mode);
  if (fd < 0 && errno == EEXIST && replace_stale && unlink(temp) == 0) fd = open(temp, kFlags, mode);
  return fd;
}

int WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

// SyncDirectory fsyncs the directory that holds `path`, so the rename itself is durable.
int SyncDirectory(const char* path) {
  char dir[PATH_MAX];
  const char* slash = std::strrchr(path, '/');
  if (slash == nullptr) {
    dir[0] = '.';
    dir[1] = '\0';
  } else {
    size_t n = slash == path ? 1 : static_cast<size_t>(slash - path);  // "/x" is in "/"
    if (n >= sizeof dir) return ENAMETOOLONG;
    std::memcpy(dir, path, n);
    dir[n] = '\0';
  }
  const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int rc = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  return rc;
}

// Step: the failing step's name for messages.
enum class Step { kCreate, kWrite, kSync, kRename, kSyncDir };

// Write does the whole write, saying which step failed.
int Write(const char* path, const char* temp, const void* data, size_t size, mode_t mode, bool replace_stale,
          Step& step) {
  step = Step::kCreate;
  const int fd = OpenTemp(temp, mode, replace_stale);
  if (fd < 0) return errno;
  step = Step::kWrite;
  int rc = WriteAll(fd, data, size);
  if (rc == 0) {
    step = Step::kSync;
    if (fsync(fd) != 0) rc = errno;
  }
  if (close(fd) != 0 && rc == 0) rc = errno;
  if (rc == 0) {
    step = Step::kRename;
    if (rename(temp, path) != 0) rc = errno;
  }
  if (rc != 0) {
    unlink(temp);
    return rc;
  }
  step = Step::kSyncDir;
  return SyncDirectory(path);  // the new content is in place; only its durability is in doubt
}

}  // namespace

int WriteFileAtomicallyAt(const char* path, const char* temp_path, const void* data, size_t size, mode_t mode) {
  Step step;
  return Write(path, temp_path, data, size, mode, true, step);
}

Status WriteFileAtomically(const std::string& path, std::string_view content, mode_t mode) {
  static std::atomic<unsigned long> counter{0};
  const std::string temp =
      path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  Step step;
  const int rc = Write(path.c_str(), temp.c_str(), content.data(), content.size(), mode, false, step);
  if (rc == 0) return Status::Ok();
  std::string what;
  switch (step) {
    case Step::kCreate: what = "cannot create " + temp; break;
    case Step::kWrite: what = "cannot write " + temp; break;
    case Step::kSync: what = "cannot sync " + temp; break;
    case Step::kRename: what = "cannot rename " + temp + " to " + path; break;
    case Step::kSyncDir: what = "cannot sync the directory of " + path; break;
  }
  return Status::Server(what + ": " + std::strerror(rc));
}

}  // namespace gpupack
