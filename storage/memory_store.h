// MemoryStore: a Store that keeps everything in memory; the fake for tests of the layers above storage/.
//
// Same contract as SqliteStore (atomic Commit, Load order: clusters by name, task definitions by (family,
// revision), client tokens by (cluster, token), instances and tasks in first-stored order) without durability.
// FailCommits() makes every Commit fail until cleared, to test how callers handle a failing store.
//
// Thread-safe: every method takes an internal mutex.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "base/status.h"
#include "storage/store.h"

namespace gpupack {

class MemoryStore : public Store {
 public:
  Result<Snapshot> Load() override;
  // on_task runs under the store's mutex: it must not call back into this store.
  Result<Snapshot> LoadStreaming(const TaskSink& on_task) override;
  Status Commit(const WriteBatch& batch) override;

  // FailCommits makes the next `times` Commits (0: every later one) return `error` (a non-ok Status) and apply
  // nothing; Status::Ok() clears it.
  void FailCommits(Status error, uint64_t times = 0);
  uint64_t commit_count() const;  // Commit calls that applied a non-empty batch

 private:
  Snapshot SnapshotLocked(bool with_tasks) const;  // requires mu_

  mutable std::mutex mu_;
  // Every live record, in first-stored order; all guarded by mu_.
  KeyedPuts<std::string, Cluster> clusters_;
  KeyedPuts<TaskDefinitionKey, TaskDefinition> task_definitions_;
  KeyedPuts<std::string, ContainerInstance> instances_;
  KeyedPuts<std::string, Task> tasks_;
  KeyedPuts<ClientTokenKey, ClientTokenRecord> client_tokens_;
  KeyedPuts<std::string, Service> services_;
  KeyedPuts<std::string, CapacityProvider> capacity_providers_;
  Status commit_error_;        // guarded by mu_
  uint64_t failures_left_ = 0;  // guarded by mu_: commits still to fail (0: until cleared)
  uint64_t commit_count_ = 0;  // guarded by mu_
};

}  // namespace gpupack
