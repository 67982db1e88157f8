#include "agent/task_uids.h"

#include <pwd.h>

#include <algorithm>
#include <set>

#include "agent/proc_tree.h"

namespace gpupack::agent {

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

TaskUids::TaskUids(TaskUidRange range, Holders holders)
    : range_(range), holders_(std::move(holders)), next_(range.first) {}

// Reading every record and /proc on each start is what lets a restarted agent, and processes that outlived their
// task, keep their uids. The search goes round the range from where the last one ended, so that a freed uid waits
// as long as it can before its next task.
Result<int64_t> TaskUids::Acquire(const std::string& task_arn) {
  std::lock_guard lock(mu_);
  GP_ASSIGN(holders, holders_());
  std::set<int64_t> taken;
  for (const UidHolder& h : holders) {
    if (h.task_arn == task_arn) return reserved_[task_arn] = h.uid;
    taken.insert(h.uid);
  }
  for (const auto& [arn, uid] : reserved_) taken.insert(uid);
  const std::set<int64_t> running = ProcessUids(range_.first, range_.last);
  const int64_t count = range_.last - range_.first + 1;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t uid = range_.first + (next_ - range_.first + i) % count;
    if (taken.count(uid) || running.count(uid) || NamedUser(uid)) continue;
    next_ = uid == range_.last ? range_.first : uid + 1;
    return reserved_[task_arn] = uid;
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
