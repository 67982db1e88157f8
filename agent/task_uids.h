// Task uids: which uid of `gpupack agent --task-uids` each process task runs as (ProcessRuntimeOptions::task_uids,
// docs/security.md "A uid per task"). Internal to the process runtime.
//
// A uid is a task's from its first container's start until no container record of the runtime names it. The
// records are the runtime's state files, which outlive the agent: TaskUids keeps nothing in memory but the starts
// in progress and where the next search begins, so an agent started again (after kill -9 too) reads back which
// uids the tasks it adopts hold.
//
// Files a task leaves where any uid may write (/tmp, /dev/shm) are its uid's and would pass to the next task given
// that uid: a uid is swept (SweepUid) each time it goes to a task, at the one moment nothing can write as it (no
// process runs as it, no task holds it), whatever happened before (a task ended, the agent was killed, a process
// that outlived its task wrote more before it ended).
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

// SweepReport: what SweepUid did.
struct SweepReport {
  size_t removed = 0;               // the uid's entries removed (a directory with all it held counts once)
  std::vector<std::string> locked;  // the uid's directories that could not be emptied, now root's, mode 0700
  bool cut_short = false;           // the budget or the depth limit left entries unseen
};

// kSweepBudget bounds the directory entries one SweepUid reads, kSweepDepth how far below a scratch directory it
// goes: a host whose /tmp holds a build tree must not make every task start slow.
inline constexpr size_t kSweepBudget = 100000;
inline constexpr int kSweepDepth = 32;

// SweepUid removes what `uid` owns under each of `scratch_dirs` (ProcessRuntimeOptions::scratch_dirs), so that
// nothing an earlier task of that uid left there passes to the next task given it. It looks where such a task could
// have made an entry and the next could reach one: every entry of a directory the uid may write, and every
// subdirectory the uid may search (mode bits for others, or for the group when the group is the uid's number, as a
// task's gid is), on the scratch directory's own file system, at most `budget` entries and kSweepDepth levels deep.
// It follows no symbolic link (each directory is opened O_NOFOLLOW from its parent). An entry of the uid is
// removed, a directory with everything in it; one that cannot be emptied (a mount inside, too deep) is made
// root's with mode 0700, out of the uid's reach. Error: an entry of the uid that can be neither, named.
// Safe only while no process runs as `uid` (TaskUids sweeps a uid it has just found free).
Result<SweepReport> SweepUid(int64_t uid, const std::vector<std::string>& scratch_dirs, size_t budget = kSweepBudget);

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

  // `scratch_dirs`: swept (SweepUid) before a uid goes to a task; empty: none.
  TaskUids(TaskUidRange range, Holders holders, std::vector<std::string> scratch_dirs);

  // Acquire gives `task_arn` its uid: the one its containers' records already name, else the next free one after
  // the last handed out, swept first. Free: no record names it, no Acquire in progress holds it, no process on the
  // host runs as it and the host's user database does not name it. The uid stays the task's in memory until
  // Release. A sweep that fails fails the Acquire (the next one tries the next uid).
  Result<int64_t> Acquire(const std::string& task_arn);

  // Release: the task's start has ended; from here its container's record holds the uid, or nothing started.
  void Release(const std::string& task_arn);

 private:
  // Pick: a uid Reserve found; fresh when it is new to the task (no record of the task names it yet).
  struct Pick {
    int64_t uid = 0;
    bool fresh = false;
  };
  Result<Pick> Reserve(const std::string& task_arn);
  // Sweep runs SweepUid for a uid new to its task and says at warn what it could not do.
  Status Sweep(int64_t uid) const;
  // NamedUser: the host's user database knows `uid` (a real user, never a task's).
  static bool NamedUser(int64_t uid);

  const TaskUidRange range_;
  const Holders holders_;
  const std::vector<std::string> scratch_dirs_;
  // The uids Acquires in progress hold (by task ARN) and where the next search starts. Guarded by mu_, which also
  // makes each search and its reservation one step.
  std::mutex mu_;
  std::map<std::string, int64_t> reserved_;
  int64_t next_;
};

}  // namespace gpupack::agent
