// Store: the durable home of the control plane's state, behind an interface that speaks no SQL.
//
// The server loads a Snapshot once at start, serves reads from memory, and persists every change as a
// WriteBatch through Store::Commit (usually via GroupCommitter, which merges concurrent batches into one
// transaction). SqliteStore (the embedded default) and PostgresStore (several servers sharing one database,
// docs/ha.md) implement it.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/cluster_state.h"
#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack {

// Snapshot: everything a store holds. Clusters are sorted by name, task definitions by (family, revision),
// client tokens by (cluster, token); instances and tasks come in the order they were first stored, so
// ClusterState rebuilds the same per-cluster registration order after a restart.
struct Snapshot {
  std::vector<Cluster> clusters;
  std::vector<TaskDefinition> task_definitions;
  std::vector<ContainerInstance> instances;
  std::vector<Task> tasks;
  std::vector<ClientTokenRecord> client_tokens;
  std::vector<Service> services;  // by ARN
  std::vector<CapacityProvider> capacity_providers;  // by name
  // change_seq: the change feed's position this snapshot shows (PostgreSQL: storage/change_feed.h); 0 elsewhere.
  uint64_t change_seq = 0;
};

// KeyedPuts: upserts of one entity kind, unique by key, in the order each key was first put. A later put of
// the same key replaces the value in place (last write wins, first position kept).
template <typename Key, typename T>
class KeyedPuts {
 public:
  void Put(Key key, T value) {
    auto [it, inserted] = index_.try_emplace(std::move(key), values_.size());
    if (inserted) {
      values_.push_back(std::move(value));
    } else {
      values_[it->second] = std::move(value);
    }
  }
  // Erase drops the put of `key`; false when there was none. O(n) when there was one (the values after it move
  // up and are renumbered): a batch holds one group of writes, and deletes a key it put only when a later write
  // of the group forgets it. MemoryStore keeps its records otherwise (MemoryStore::Records).
  bool Erase(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    const size_t pos = it->second;
    index_.erase(it);
    values_.erase(values_.begin() + static_cast<std::ptrdiff_t>(pos));
    for (auto& [k, i] : index_)
      if (i > pos) --i;
    return true;
  }
  // TakeValues moves the values out, in order, and leaves this empty.
  std::vector<T> TakeValues() {
    index_.clear();
    return std::exchange(values_, {});
  }
  bool Contains(const Key& key) const { return index_.count(key) != 0; }
  const std::vector<T>& values() const { return values_; }
  size_t size() const { return values_.size(); }
  bool empty() const { return values_.empty(); }

 private:
  std::vector<T> values_;
  std::map<Key, size_t> index_;  // key -> position in values_
};

using TaskDefinitionKey = std::pair<std::string, int>;         // (family, revision)
using ClientTokenKey = std::pair<std::string, std::string>;    // (cluster, token)

// WriteBatch: a set of upserts and deletes that a Store applies atomically.
//
// Keys: cluster name; (family, revision); instance ARN; task ARN; (cluster, token). A key is never both put
// and deleted in one batch: a put cancels an earlier delete of the same key and a delete cancels an earlier
// put, so the batch always means "the net effect of these operations, in the order they were made".
// A value type; not thread-safe.
class WriteBatch {
 public:
  void PutCluster(Cluster cluster);
  void PutTaskDefinition(TaskDefinition td);
  void PutInstance(ContainerInstance instance);
  void PutTask(Task task);
  void PutClientToken(ClientTokenRecord record);
  void PutService(Service service);  // services are never deleted: an INACTIVE one stays describable
  void PutCapacityProvider(CapacityProvider provider);  // never deleted either: a deleted one turns INACTIVE

  void DeleteTask(const std::string& arn);  // retention purge of a STOPPED task
  void DeleteClientToken(const std::string& cluster, const std::string& token);
  void DeleteInstance(const std::string& arn);

  // ReplaceEverything makes the batch replace all the store holds: the store empties every table, in the same
  // transaction, before the batch's puts (`gpupack migrate --force`, a restore). Deletes are then moot.
  void ReplaceEverything() { replaces_everything_ = true; }
  bool replaces_everything() const { return replaces_everything_; }

  // Append adds `other`'s operations after this batch's: later puts of the same key win, and puts and
  // deletes of one key cancel as if they had been made on this batch in order; when `other` replaces
  // everything, it replaces this batch too.
  void Append(WriteBatch&& other);

  bool empty() const { return size() == 0; }
  size_t size() const;  // number of operations (puts plus deletes)

  const std::vector<Cluster>& clusters() const { return clusters_.values(); }
  const std::vector<TaskDefinition>& task_definitions() const { return task_definitions_.values(); }
  const std::vector<ContainerInstance>& instances() const { return instances_.values(); }
  const std::vector<Task>& tasks() const { return tasks_.values(); }
  const std::vector<ClientTokenRecord>& client_tokens() const { return client_tokens_.values(); }
  const std::vector<Service>& services() const { return services_.values(); }
  const std::vector<CapacityProvider>& capacity_providers() const { return capacity_providers_.values(); }
  const std::set<std::string>& deleted_tasks() const { return deleted_tasks_; }
  const std::set<ClientTokenKey>& deleted_client_tokens() const { return deleted_client_tokens_; }
  const std::set<std::string>& deleted_instances() const { return deleted_instances_; }

 private:
  KeyedPuts<std::string, Cluster> clusters_;
  KeyedPuts<TaskDefinitionKey, TaskDefinition> task_definitions_;
  KeyedPuts<std::string, ContainerInstance> instances_;
  KeyedPuts<std::string, Task> tasks_;
  KeyedPuts<ClientTokenKey, ClientTokenRecord> client_tokens_;
  KeyedPuts<std::string, Service> services_;
  KeyedPuts<std::string, CapacityProvider> capacity_providers_;
  std::set<std::string> deleted_tasks_;
  std::set<ClientTokenKey> deleted_client_tokens_;
  std::set<std::string> deleted_instances_;
  bool replaces_everything_ = false;
};

// Store: loads and persists the control plane's state. Implementations say their own thread-safety.
class Store {
 public:
  virtual ~Store();

  // Load reads everything, as one consistent snapshot. A record that cannot be decoded is a Status::Server
  // naming its table and key.
  virtual Result<Snapshot> Load() = 0;

  // TaskSink receives one decoded task; a non-ok Status stops the load and is returned as is.
  using TaskSink = std::function<Status(Task&&)>;

  // LoadStreaming reads the same snapshot as Load but hands each task to `on_task`, in Load's order, instead
  // of collecting them: the returned snapshot's tasks vector is empty. Tasks are handed over before Load
  // returns, so a consumer must accept them before it sees clusters and instances; on an error some tasks may
  // already have been handed over. The default calls Load() and hands its tasks over one by one (no memory
  // saved); stores override it so that no more than one decoded task is held at a time.
  virtual Result<Snapshot> LoadStreaming(const TaskSink& on_task);

  // Commit applies the whole batch or nothing. When it returns ok the batch is durable (it survives a crash
  // of the process or, for SqliteStore, of the machine); otherwise nothing of it was applied and the status
  // (Status::Server) names what failed. An empty batch is ok and writes nothing.
  virtual Status Commit(const WriteBatch& batch) = 0;
};

}  // namespace gpupack
