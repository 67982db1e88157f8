// TaskStore: the agent's persisted task records, one file per task, <dir>/<task id>.json, each written atomically
// (a temporary file, then rename(); not fsync'ed: the processes a record describes do not outlive the host
// either). A record is written before any container of its task starts and deleted only once the server has
// acknowledged the task's STOPPED report, so a restarted agent never starts a task twice and never loses a report.
//
// A record holds the task's typed assignment (protocol::Assignment, as the server sent it, written with
// protocol::ToJson), its report as the agent last knew it (protocol::TaskReport: status, stop code, reason, per
// container status, exit code and reason; containers in the assignment's order) and the runtime id of each
// container once started. The layout is the one agents have always written, so records survive an upgrade of the
// agent in either direction:
//   {"taskArn", "assignment": {...}, "status", "stopCode" ("" for none), "reason",
//    "containers": [{"name", "runtimeId" ("" until started), "status", "exitCode"?, "reason", "essential",
//                    "gpuIds"}]}
//
// The store also keeps every record in memory: Put writes the file and then the memory copy, so what Get, Visit
// and Snapshot return is what is on disk. Thread-safe: one mutex guards the map and the writes (writes of
// different tasks are serialized; each is a small file). Each task's record is written by that task's own
// state machine only (ManagedTask), so the store never merges concurrent changes to one record.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "base/status.h"

namespace gpupack::agent {

struct TaskRecord {
  protocol::Assignment assignment;
  protocol::TaskReport report;           // report.containers[i] is assignment.containers[i]
  std::vector<std::string> runtime_ids;  // per container; "" until the runtime started it

  const std::string& arn() const { return report.task_arn; }
  // ForAssignment is the record of a task just assigned: PENDING, every container PENDING, none started.
  static TaskRecord ForAssignment(protocol::Assignment assignment);
};

protocol::Json RecordToJson(const TaskRecord& r);
// RecordFromJson reads a record (see above); `path` names the file in errors.
Result<TaskRecord> RecordFromJson(const protocol::Json& j, const std::string& path);

class TaskStore {
 public:
  // Open creates `dir` when missing and reads every record in it (an unreadable one is logged and skipped).
  static Result<std::unique_ptr<TaskStore>> Open(std::string dir);

  // Put persists the record (atomically) and keeps it; the memory copy is updated even when the write fails
  // (the error is returned and logged by the caller).
  Status Put(const TaskRecord& record);
  // Erase deletes a task's record.
  void Erase(const std::string& arn);

  std::optional<TaskRecord> Get(const std::string& arn) const;
  bool Contains(const std::string& arn) const;
  std::vector<TaskRecord> Snapshot() const;
  // Visit calls `fn` for every record with the store's lock held: `fn` must be quick and must not call the store.
  void Visit(const std::function<void(const TaskRecord&)>& fn) const;
  size_t size() const;

  // FileName is the record's file name: the task id (the ARN's last segment, sanitized) + ".json".
  static std::string FileName(const std::string& arn);

 private:
  explicit TaskStore(std::string dir) : dir_(std::move(dir)) {}
  const std::string dir_;
  mutable std::mutex mu_;
  std::map<std::string, TaskRecord> records_;  // by task ARN; guarded by mu_
};

}  // namespace gpupack::agent
