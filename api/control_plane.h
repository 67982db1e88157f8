// ControlPlane: the ECS operations over the in-memory ClusterState, persisted through the store.
//
// It is the server's one serialized placement applier (DESIGN §2): every operation runs under one mutex, in
// arrival order; a write validates, places against the in-memory state, applies, and hands its WriteBatch to
// the GroupCommitter while still holding the mutex, so commits land in the order they were applied. The
// operation's answer is released only when its batch is durable. Reads are answered from memory.
//
// When a commit fails the in-memory state may be ahead of the disk: the control plane then refuses every
// further write with ServerException (reads still work) and /healthz turns unhealthy until a restart reloads
// the durable state.
//
// Thread-safe: Execute may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "api/codec.h"
#include "scheduler/cluster_state.h"
#include "storage/group_committer.h"
#include "storage/store.h"

namespace gpupack::api {

struct ControlPlaneOptions {
  ArnContext arn;
  std::function<EpochMs()> clock;  // defaults to the system clock
  uint64_t seed = 0;               // 0 = from std::random_device; ids and random placement derive from it
  EpochMs stopped_task_retention_ms = 3'600'000;  // STOPPED tasks stay describable this long (ECS: >= 1 h)
  EpochMs client_token_retention_ms = 24 * 3'600'000LL;
};

struct OperationResult {
  Status status;
  Json body;  // the response document when status is ok
};

class ControlPlane {
 public:
  using Done = std::function<void(OperationResult)>;

  ControlPlane(ControlPlaneOptions options, Store& store, GroupCommitter& committer);
  ~ControlPlane();

  // Loads the durable state. Call once before serving.
  Status Load();

  // Runs one ECS operation (the part of X-Amz-Target after the dot). `done` is called exactly once, possibly
  // on the committer's thread, after the operation's writes are durable.
  void Execute(const std::string& operation, const Json& body, Done done);

  // Is the operation one we serve?
  static bool Knows(const std::string& operation);

  // ---- the agent channel (api/agent_channel.h) reaches the control plane through these. Each runs
  // serialized like an operation; `done` is called once its writes are durable.
  using Notifier = std::function<void(const std::string& instance_arn, Json message)>;
  // SetAgentNotifier: how assignments and stops reach agents. Set before serving.
  void SetAgentNotifier(Notifier notifier);
  // AgentHello reconciles what an agent reports it runs with what the server holds for its instance and
  // answers the welcome: {"type":"welcome","assign":[...],"stop":[...]}. The instance becomes connected.
  void AgentHello(const std::string& instance_arn, const Json& hello, Done done);
  // AgentStateChange applies {"taskArn","status","reason","stopCode","containers":[...]}.
  void AgentStateChange(const std::string& instance_arn, const Json& change, Done done);
  // AgentHeartbeat applies {"impaired": bool, "heldGpus": [ids]}.
  void AgentHeartbeat(const std::string& instance_arn, const Json& heartbeat, Done done);
  // AgentDisconnected marks the instance's agent disconnected (channel closed or heartbeats missed).
  void AgentDisconnected(const std::string& instance_arn);
  // ResendPushIfWanted: whether a push the instance's agent has not acked still matters (an assign while its
  // task is PENDING on that instance and not being stopped; a stop until the task is STOPPED there; anything
  // else always). A report about the task proves the agent got the push, so a copy is only sent while none has
  // been applied. When it matters, `send` runs under the control plane's lock: a report applied after this check
  // is acknowledged after the copy is queued, so an agent never gets a copy of an assign for a task it has
  // already finished and forgotten (it would start it again).
  bool ResendPushIfWanted(const std::string& instance_arn, const Json& push, const std::function<void()>& send) const;
  // CheckAgentInstance: the instance exists and is registered (for the channel's upgrade check).
  Status CheckAgentInstance(const std::string& instance_arn) const;
  // The attribute an agent registers with to say it holds a channel; such an instance counts as
  // disconnected until its agent says hello (after a server restart too).
  static constexpr const char* kChannelAttribute = "gpupack.agent-channel";

  bool healthy() const { return !degraded_.load(); }

  // Prometheus text of the placement and inventory metrics.
  std::string MetricsText() const;

  // Counters by failure reason and placements, for metrics.
  struct Counters {
    uint64_t placements = 0;
    std::map<std::string, uint64_t> failures_by_reason;
  };

 private:
  struct Ctx;  // one operation's output: response body and write batch
  using Handler = Status (ControlPlane::*)(const Json&, Ctx&);
  static const std::map<std::string, Handler>& Handlers();

  // operations
  Status CreateCluster(const Json& in, Ctx& ctx);
  Status DeleteCluster(const Json& in, Ctx& ctx);
  Status DescribeClusters(const Json& in, Ctx& ctx);
  Status ListClusters(const Json& in, Ctx& ctx);
  Status UpdateClusterSettings(const Json& in, Ctx& ctx);
  Status RegisterTaskDefinition(const Json& in, Ctx& ctx);
  Status DeregisterTaskDefinition(const Json& in, Ctx& ctx);
  Status DescribeTaskDefinition(const Json& in, Ctx& ctx);
  Status ListTaskDefinitions(const Json& in, Ctx& ctx);
  Status ListTaskDefinitionFamilies(const Json& in, Ctx& ctx);
  Status RunTask(const Json& in, Ctx& ctx);
  Status StartTask(const Json& in, Ctx& ctx);
  Status StopTask(const Json& in, Ctx& ctx);
  Status DescribeTasks(const Json& in, Ctx& ctx);
  Status ListTasks(const Json& in, Ctx& ctx);
  Status RegisterContainerInstance(const Json& in, Ctx& ctx);
  Status DeregisterContainerInstance(const Json& in, Ctx& ctx);
  Status DescribeContainerInstances(const Json& in, Ctx& ctx);
  Status ListContainerInstances(const Json& in, Ctx& ctx);
  Status UpdateContainerInstancesState(const Json& in, Ctx& ctx);
  Status PutAttributes(const Json& in, Ctx& ctx);
  Status DeleteAttributes(const Json& in, Ctx& ctx);
  Status ListAttributes(const Json& in, Ctx& ctx);
  Status SubmitTaskStateChange(const Json& in, Ctx& ctx);
  Status SubmitContainerStateChange(const Json& in, Ctx& ctx);
  Status ExplainPlacement(const Json& in, Ctx& ctx);

  // Run executes `op` serialized and answers through the commit path (shared by operations and agent calls).
  void Run(const std::function<Status(Ctx&)>& op, Done done);
  Json AssignmentFor(const Task& task) const;

  // helpers (mu_ held)
  Result<const Cluster*> ActiveCluster(const Json& in);
  Result<const TaskDefinition*> ResolveTaskDefinition(const std::string& ref);
  Result<Task*> ResolveTask(const std::string& cluster, const std::string& ref);
  Result<ContainerInstance*> ResolveInstance(const std::string& cluster, const std::string& ref);
  Status PlaceTasks(const Json& in, Ctx& ctx, bool start_task);
  void StopTaskRecord(Task& task, const std::string& stop_code, const std::string& reason, Ctx& ctx);
  void FinishStop(Task& task, Ctx& ctx);
  void PurgeExpired(Ctx& ctx);
  std::string NewId();
  EpochMs Now() const;

  ControlPlaneOptions options_;
  Store& store_;
  GroupCommitter& committer_;

  mutable std::mutex mu_;
  ClusterState state_;        // guarded by mu_
  std::mt19937_64 rng_;       // guarded by mu_
  Counters counters_;         // guarded by mu_
  EpochMs last_purge_ = 0;    // guarded by mu_
  std::atomic<bool> degraded_{false};
  Notifier notifier_;
};

}  // namespace gpupack::api
