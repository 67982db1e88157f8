#include "agent/task_uids.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>

#include <spdlog/spdlog.h>

#include "agent/proc_tree.h"

namespace gpupack::agent {
namespace {

constexpr size_t kBatch = 4096;               // names read at a time
constexpr size_t kMaxRemovals = 1000000;      // entries one sweep removes: a peer filling a directory ends it

struct DirCloser {
  void operator()(DIR* d) const { closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

// OpenDir opens directory `name` of directory `parent` without following a symbolic link; null with errno.
DirPtr OpenDir(int parent, const char* name, bool follow = false) {
  const int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK | (follow ? 0 : O_NOFOLLOW));
  if (fd < 0) return nullptr;
  DIR* d = fdopendir(fd);
  if (d == nullptr) close(fd);
  return DirPtr(d);
}

struct Entry {
  std::string name;
  unsigned char type = DT_UNKNOWN;
};

// Names reads up to `max` entries of `d` (not . and ..) from where it stands.
std::vector<Entry> Names(DIR* d, size_t max) {
  std::vector<Entry> out;
  while (out.size() < max) {
    const dirent* e = readdir(d);
    if (e == nullptr) break;
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    out.push_back(Entry{e->d_name, e->d_type});
  }
  return out;
}

// Sweeper is one SweepUid.
class Sweeper {
 public:
  Sweeper(uid_t uid, size_t budget) : uid_(uid), budget_(budget) {}

  Status Root(const std::string& path) {
    DirPtr d = OpenDir(AT_FDCWD, path.c_str(), /*follow=*/true);  // the operator's path, a link or not
    if (d == nullptr) {
      if (errno == ENOENT || errno == ENOTDIR) return Status::Ok();  // e.g. no /var/tmp on this host
      return Status::Server("process runtime: cannot open " + path + " to sweep it: " + std::strerror(errno));
    }
    struct stat st {};
    if (fstat(dirfd(d.get()), &st) != 0) return Status::Ok();
    return Walk(d.get(), path, st, 0);
  }

  SweepReport report;

 private:
  // Walk looks at directory `d` (at `path`, `st` its status, `depth` levels below its scratch directory): it takes
  // the uid's entries, then walks the subdirectories the uid may search. In a directory the uid may not write, only
  // subdirectories are looked at: the uid made no entry there.
  Status Walk(DIR* d, const std::string& path, const struct stat& st, int depth) {
    const bool writable = May(st, S_IWOTH | S_IXOTH, S_IWGRP | S_IXGRP);
    std::vector<std::string> subdirs;
    while (true) {
      if (budget_ == 0) {
        report.cut_short = true;
        break;
      }
      const std::vector<Entry> entries = Names(d, std::min(budget_, kBatch));
      if (entries.empty()) break;
      budget_ -= entries.size();
      for (const Entry& e : entries) {
        if (!writable && e.type != DT_DIR && e.type != DT_UNKNOWN) continue;
        struct stat est {};
        if (fstatat(dirfd(d), e.name.c_str(), &est, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
        if (est.st_uid == uid_) {
          GP_TRY(Take(d, e.name, est, path));
        } else if (S_ISDIR(est.st_mode) && est.st_dev == st.st_dev && May(est, S_IXOTH, S_IXGRP)) {
          subdirs.push_back(e.name);
        }
      }
    }
    for (const std::string& name : subdirs) {
      if (depth + 1 > kSweepDepth) {
        report.cut_short = true;
        break;
      }
      DirPtr sub = OpenDir(dirfd(d), name.c_str());
      struct stat sst {};
      if (sub == nullptr || fstat(dirfd(sub.get()), &sst) != 0 || sst.st_dev != st.st_dev) continue;
      GP_TRY(Walk(sub.get(), path + "/" + name, sst, depth + 1));
    }
    return Status::Ok();
  }

  // Take removes the uid's entry `name` of `d`, a directory with everything in it (whoever's: the uid could remove
  // it all); a directory that cannot be emptied is made root's with mode 0700 instead.
  Status Take(DIR* d, const std::string& name, const struct stat& st, const std::string& path) {
    const std::string where = path + "/" + name;
    if (!S_ISDIR(st.st_mode)) {
      if (unlinkat(dirfd(d), name.c_str(), 0) == 0 || errno == ENOENT) return Removed();
      return Failed(where, errno);
    }
    DirPtr sub = OpenDir(dirfd(d), name.c_str());
    struct stat sst {};
    if (sub == nullptr || fstat(dirfd(sub.get()), &sst) != 0)
      return errno == ENOENT || errno == ELOOP || errno == ENOTDIR ? Status::Ok() : Failed(where, errno);
    if (sst.st_uid != uid_) return Status::Ok();  // replaced meanwhile (by whoever may write `d`): not the uid's
    if (Empty(sub.get(), sst.st_dev, 1) &&
        (unlinkat(dirfd(d), name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT))
      return Removed();
    if (fchown(dirfd(sub.get()), 0, 0) != 0 || fchmod(dirfd(sub.get()), 0700) != 0) return Failed(where, errno);
    report.locked.push_back(where);
    return Status::Ok();
  }

  // Empty removes everything in `d`, depth first, following no link and entering no other file system; true when
  // `d` is empty.
  bool Empty(DIR* d, dev_t dev, int depth) {
    if (depth > kSweepDepth) return false;
    while (true) {
      rewinddir(d);
      const std::vector<Entry> entries = Names(d, kBatch);
      if (entries.empty()) return true;
      size_t gone = 0;
      for (const Entry& e : entries) {
        if (removals_ >= kMaxRemovals) return false;
        struct stat st {};
        if (fstatat(dirfd(d), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
          if (st.st_dev != dev) continue;  // a mount point: never emptied
          DirPtr sub = OpenDir(dirfd(d), e.name.c_str());
          if (sub == nullptr || !Empty(sub.get(), dev, depth + 1)) continue;
          sub.reset();
          if (unlinkat(dirfd(d), e.name.c_str(), AT_REMOVEDIR) != 0) continue;
        } else if (unlinkat(dirfd(d), e.name.c_str(), 0) != 0) {
          continue;
        }
        ++gone;
        ++removals_;
      }
      if (gone == 0) return false;
    }
  }

  // May: the uid, or its group (a task's gid is the uid's number), has `other` or `group` on `st`.
  bool May(const struct stat& st, mode_t other, mode_t group) const {
    return (st.st_mode & other) == other || (st.st_gid == uid_ && (st.st_mode & group) == group);
  }

  Status Removed() {
    ++report.removed;
    return Status::Ok();
  }

  Status Failed(const std::string& where, int err) const {
    return Status::Server("process runtime: cannot remove " + where + ", which uid " + std::to_string(uid_) +
                          " left, before giving the uid to a task: " + std::strerror(err));
  }

  const uid_t uid_;
  size_t budget_;
  size_t removals_ = 0;
};

}  // namespace

Result<SweepReport> SweepUid(int64_t uid, const std::vector<std::string>& scratch_dirs, size_t budget) {
  Sweeper sweeper(static_cast<uid_t>(uid), budget);
  for (const std::string& dir : scratch_dirs) GP_TRY(sweeper.Root(dir));
  return sweeper.report;
}

std::optional<int64_t> ParseNumericId(const std::string& s) {
  if (s.empty() || s.size() > 10 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  const int64_t v = std::stoll(s);
  if (v > 4294967294LL) return std::nullopt;
  return v;
}

Result<TaskUidRange> ParseTaskUids(const std::string& text) {
  const auto refuse = [&text](const std::string& why) {
    return Status::InvalidParameter("--task-uids '" + text + "': " + why);
  };
  const size_t dash = text.find('-');
  if (dash == std::string::npos) return refuse("give a range FIRST-LAST, e.g. 70000-70999");
  const auto first = ParseNumericId(text.substr(0, dash));
  const auto last = ParseNumericId(text.substr(dash + 1));
  if (!first || !last) return refuse("FIRST and LAST must be decimal uids, e.g. 70000-70999");
  if (*first == 0) return refuse("the range must not hold uid 0 (root)");
  if (*first > *last) return refuse("FIRST is above LAST");
  if (*last > 2147483647) return refuse("uids above 2147483647 are read as negative by some programs");
  if (*last - *first + 1 > kMaxTaskUids) return refuse("at most " + std::to_string(kMaxTaskUids) + " uids");
  return TaskUidRange{*first, *last};
}

TaskUids::TaskUids(TaskUidRange range, Holders holders, std::vector<std::string> scratch_dirs)
    : range_(range), holders_(std::move(holders)), scratch_dirs_(std::move(scratch_dirs)), next_(range.first) {}

// The sweep runs outside the lock: the reservation keeps the uid from every other start meanwhile, and the task's
// own starts are one at a time.
Result<int64_t> TaskUids::Acquire(const std::string& task_arn) {
  GP_ASSIGN(pick, Reserve(task_arn));
  if (pick.fresh) {
    if (Status swept = Sweep(pick.uid); !swept.ok()) {
      Release(task_arn);
      return swept;
    }
  }
  return pick.uid;
}

Status TaskUids::Sweep(int64_t uid) const {
  if (scratch_dirs_.empty()) return Status::Ok();
  GP_ASSIGN(report, SweepUid(uid, scratch_dirs_));
  for (const std::string& dir : report.locked)
    spdlog::warn("process runtime: {}, left by uid {}, could not be emptied; it is root's now, mode 0700", dir, uid);
  if (report.cut_short)
    spdlog::warn("process runtime: the sweep of uid {} stopped after {} entries or {} levels; what the uid owns "
                 "beyond them stays", uid, kSweepBudget, kSweepDepth);
  if (report.removed > 0) spdlog::info("process runtime: removed {} entries uid {} left", report.removed, uid);
  return Status::Ok();
}

// Reading every record and /proc on each start is what lets a restarted agent, and processes that outlived their
// task, keep their uids. The search goes round the range from where the last one ended, so that a freed uid waits
// as long as it can before its next task.
Result<TaskUids::Pick> TaskUids::Reserve(const std::string& task_arn) {
  std::lock_guard lock(mu_);
  GP_ASSIGN(holders, holders_());
  std::set<int64_t> taken;
  for (const UidHolder& h : holders) {
    if (h.task_arn == task_arn) return Pick{reserved_[task_arn] = h.uid, false};
    taken.insert(h.uid);
  }
  for (const auto& [arn, uid] : reserved_) taken.insert(uid);
  const std::set<int64_t> running = ProcessUids(range_.first, range_.last);
  const int64_t count = range_.last - range_.first + 1;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t uid = range_.first + (next_ - range_.first + i) % count;
    if (taken.count(uid) || running.count(uid) || NamedUser(uid)) continue;
    next_ = uid == range_.last ? range_.first : uid + 1;
    return Pick{reserved_[task_arn] = uid, true};
  }
  return Status::Server("process runtime: no free uid in --task-uids " + std::to_string(range_.first) + "-" +
                        std::to_string(range_.last) + ": every one is held by a task of this agent, by a process "
                        "still running as it or by a user of this host");
}

void TaskUids::Release(const std::string& task_arn) {
  std::lock_guard lock(mu_);
  reserved_.erase(task_arn);
}

bool TaskUids::NamedUser(int64_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buffer[4096];
  return getpwuid_r(static_cast<uid_t>(uid), &pw, buffer, sizeof buffer, &found) == 0 && found != nullptr;
}

}  // namespace gpupack::agent
