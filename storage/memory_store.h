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
#include <vector>

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
  // Records: the live records of one kind, unique by key, in first-stored order (a later put of a key replaces
  // its record in place; a key put again after its erase goes last), as KeyedPuts keeps a batch's upserts, but
  // with Put and Erase in O(log n): a purge deleting 1,000 records among 100,000 costs 1,000 map erasures, where
  // KeyedPuts would move and renumber the 100,000 each time. InOrder hands them out in order.
  template <typename Key, typename T>
  class Records {
   public:
    void Put(const Key& key, const T& value) {
      auto [it, inserted] = seq_of_.try_emplace(key, next_seq_);
      if (inserted) ++next_seq_;
      by_seq_.insert_or_assign(it->second, value);
    }
    void Erase(const Key& key) {
      auto it = seq_of_.find(key);
      if (it == seq_of_.end()) return;
      by_seq_.erase(it->second);
      seq_of_.erase(it);
    }
    const std::map<uint64_t, T>& InOrder() const { return by_seq_; }  // first-stored order -> record
    std::vector<T> Values() const {
      std::vector<T> out;
      out.reserve(by_seq_.size());
      for (const auto& [_, v] : by_seq_) out.push_back(v);
      return out;
    }

   private:
    std::map<Key, uint64_t> seq_of_;  // key -> its place in first-stored order
    std::map<uint64_t, T> by_seq_;
    uint64_t next_seq_ = 0;
  };

  Snapshot SnapshotLocked(bool with_tasks) const;  // requires mu_

  mutable std::mutex mu_;
  // Every live record, in first-stored order; all guarded by mu_.
  Records<std::string, Cluster> clusters_;
  Records<TaskDefinitionKey, TaskDefinition> task_definitions_;
  Records<std::string, ContainerInstance> instances_;
  Records<std::string, Task> tasks_;
  Records<ClientTokenKey, ClientTokenRecord> client_tokens_;
  Records<std::string, Service> services_;
  Records<std::string, CapacityProvider> capacity_providers_;
  Status commit_error_;        // guarded by mu_
  uint64_t failures_left_ = 0;  // guarded by mu_: commits still to fail (0: until cleared)
  uint64_t commit_count_ = 0;  // guarded by mu_
};

}  // namespace gpupack
