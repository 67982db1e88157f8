// Task uids: which uid of `gpupack agent --task-uids` each process task runs as (ProcessRuntimeOptions::task_uids,
// docs/security.md "A uid per task"). Internal to the process runtime.
//
// A uid is a task's from its first container's start until no container record of the runtime names it. The
// records are the runtime's state files, which outlive the agent: TaskUids keeps nothing in memory but the starts
// in progress and where the next search begins, so an agent started again (after kill -9 too) reads back which
// uids the tasks it adopts hold.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/runtime.h"
#include "base/status.h"

namespace gpupack::agent {

// ParseNumericId reads a decimal uid or gid (0..2^32-2); nullopt when `s` is not one.
std::optional<int64_t> ParseNumericId(const std::string& s);

// UidHolder: a container record's task and the uid it names.
struct UidHolder {
  std::string task_arn;
  int64_t uid = 0;
};

class TaskUids {
 public:
  // Holders reads every container record of the runtime; an error (an unreadable record could hold any uid) fails
  // the Acquire that asked.
  using Holders = std::function<Result<std::vector<UidHolder>>()>;

  TaskUids(TaskUidRange range, Holders holders);

  // Acquire gives `task_arn` its uid: the one its containers' records already name, else the next free one after
  // the last handed out. Free: no record names it, no Acquire in progress holds it, no process on the host runs as
  // it and the host's user database does not name it. The uid stays the task's in memory until Release.
  Result<int64_t> Acquire(const std::string& task_arn);

  // Release: the task's start has ended; from here its container's record holds the uid, or nothing started.
  void Release(const std::string& task_arn);

 private:
  // NamedUser: the host's user database knows `uid` (a real user, never a task's).
  static bool NamedUser(int64_t uid);

  const TaskUidRange range_;
  const Holders holders_;
  // The uids Acquires in progress hold (by task ARN) and where the next search starts. Guarded by mu_, which also
  // makes each search and its reservation one step.
  std::mutex mu_;
  std::map<std::string, int64_t> reserved_;
  int64_t next_;
};

}  // namespace gpupack::agent
