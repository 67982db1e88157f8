// ReadView: an immutable snapshot of the committed cluster state, for Describe/List calls and /metrics.
//
// The applier publishes a new view after each commit (engine/applier.h); readers take the current one with
// Applier::View() and never wait for the writer thread or touch its working state, so a read shows only what is
// durable and never waits for a placement. A view is never changed once published: every entity is held as a
// shared_ptr<const T>, and a new view shares with the previous one everything its commit did not touch.
// Tasks, instances and services live in sharded maps; a commit copies only the shards it touched (copy on write),
// so publishing costs O(changed entities x shard size), not O(state). (The sorted list of service ARNs is copied
// only by a commit that adds a service.)
//
// Thread-safe: any number of threads may read one view concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/core/task_order.h"
#include "scheduler/cluster_state.h"
#include "scheduler/model.h"

namespace gpupack::api {

// InstanceRecord: a container instance and the load its tasks put on it (for memberOf-style filters).
struct InstanceRecord {
  ContainerInstance instance;
  InstanceLoad load;  // group_counts only: what the query language reads (task ARNs and group ids are the working
                      // state's business, and copying them would make each commit cost O(tasks on the instance))
};

using TaskDefinitionFamily = std::map<int, std::shared_ptr<const TaskDefinition>>;  // revision -> definition

// ViewDelta: what one commit changed, as copies made by the transaction on the writer thread. Applied to
// the previous view once the commit is durable.
struct ViewDelta {
  std::vector<Cluster> clusters;
  std::vector<std::shared_ptr<const TaskDefinition>> task_definitions;
  std::vector<std::shared_ptr<const InstanceRecord>> instances;
  std::vector<std::shared_ptr<const Task>> tasks;
  std::vector<std::string> erased_tasks;
  std::vector<std::shared_ptr<const Service>> services;
  std::vector<CapacityProvider> capacity_providers;
  bool empty() const {
    return clusters.empty() && task_definitions.empty() && instances.empty() && tasks.empty() &&
           erased_tasks.empty() && services.empty() && capacity_providers.empty();
  }
};

class ReadView {
 public:
  static constexpr size_t kShards = 4096;

  // FromState: a view of everything in `state` (at load).
  static std::shared_ptr<const ReadView> FromState(const ClusterState& state);
  // Apply: the view after `delta`, sharing every untouched shard with `base`.
  static std::shared_ptr<const ReadView> Apply(const ReadView& base, ViewDelta delta);

  // ---- clusters
  const Cluster* FindCluster(const std::string& name) const;
  std::vector<const Cluster*> Clusters() const;  // sorted by name
  ClusterCounts CountsOf(const std::string& cluster) const;

  // ---- task definitions
  const TaskDefinition* FindTaskDefinition(const std::string& family, int revision) const;
  const TaskDefinition* LatestActiveRevision(const std::string& family) const;
  // Families sorted by name, each with its revisions in ascending order.
  const std::map<std::string, std::shared_ptr<const TaskDefinitionFamily>>& TaskDefinitions() const {
    return *task_definitions_;
  }

  // ---- container instances
  const InstanceRecord* FindInstanceRecord(const std::string& arn) const;
  const ContainerInstance* FindInstance(const std::string& arn) const;
  // InstancePtr: the instance as a shared pointer that keeps it alive beyond this view (null when unknown).
  std::shared_ptr<const ContainerInstance> InstancePtr(const std::string& arn) const;
  // Instances of a cluster in registration order, INACTIVE ones included.
  std::vector<const InstanceRecord*> InstancesOf(const std::string& cluster) const;

  // ---- tasks
  const Task* FindTask(const std::string& arn) const;
  // TaskPtr: the task as a shared pointer that keeps it alive beyond this view (null when unknown).
  std::shared_ptr<const Task> TaskPtr(const std::string& arn) const;
  // ForEachTask calls `f(const Task&)` for every task, in no particular order.
  template <typename F>
  void ForEachTask(F&& f) const {
    for (const auto& shard : tasks_)
      for (const auto& entry : *shard) f(*entry.second);
  }
  size_t task_count() const { return task_count_; }
  // TaskOrderOf: the cluster's tasks whose desiredStatus is STOPPED (`stopped`) or RUNNING, oldest first
  // (createdAt, then ARN): what ListTasks pages through.
  const TaskOrder& TaskOrderOf(const std::string& cluster, bool stopped) const;

  // ---- services
  std::shared_ptr<const Service> FindService(const std::string& arn) const;
  // ServiceArns: every service's ARN, sorted (a cluster's services are a range of it: ListServices).
  const std::set<std::string>& ServiceArns() const { return *service_arns_; }

  // ---- capacity providers (few: copied whole by a commit that changes one)
  const CapacityProvider* FindCapacityProvider(const std::string& name) const;
  const std::map<std::string, CapacityProvider>& CapacityProviders() const { return *capacity_providers_; }

  // The number of commits published before this view (0 = the view of the loaded state).
  uint64_t sequence() const { return sequence_; }

 private:
  // Keyed by a view of the ARN inside the entry's own task (an ARN is not stored twice).
  using TaskShard = std::unordered_map<std::string_view, std::shared_ptr<const Task>>;
  using InstanceShard = std::unordered_map<std::string, std::shared_ptr<const InstanceRecord>>;
  using ServiceShard = std::unordered_map<std::string, std::shared_ptr<const Service>>;  // ARN -> service
  static constexpr size_t kServiceShards = 256;  // services are fewer than tasks: fewer shards, a cheaper copy
  static size_t ShardOf(const std::string& key);
  static void ApplyTaskOrders(const ReadView& base, const ViewDelta& delta, ReadView& view);

  std::shared_ptr<const std::map<std::string, Cluster>> clusters_;
  std::shared_ptr<const std::map<std::string, std::shared_ptr<const TaskDefinitionFamily>>> task_definitions_;
  std::array<std::shared_ptr<const InstanceShard>, kShards> instances_;
  std::shared_ptr<const std::map<std::string, std::vector<std::string>>> instances_by_cluster_;  // ARNs in order
  std::array<std::shared_ptr<const TaskShard>, kShards> tasks_;
  // cluster -> its tasks in ListTasks order, split by desired status
  struct ClusterTaskOrders {
    std::shared_ptr<const TaskOrder> running, stopped;
  };
  std::shared_ptr<const std::map<std::string, ClusterTaskOrders>> task_orders_;
  std::array<std::shared_ptr<const ServiceShard>, kServiceShards> services_;  // by ShardOf(ARN) % kServiceShards
  std::shared_ptr<const std::set<std::string>> service_arns_ = std::make_shared<const std::set<std::string>>();
  std::shared_ptr<const std::map<std::string, CapacityProvider>> capacity_providers_ =
      std::make_shared<const std::map<std::string, CapacityProvider>>();
  size_t task_count_ = 0;
  uint64_t sequence_ = 0;
};

}  // namespace gpupack::api
