// ClusterState: the whole in-memory state of the control plane, and the only code that moves reservations.
//
// Not thread-safe: one writer (the server's PlacementApplier, or the planner's simulation loop) owns it.
// Reservations are keyed by task ARN: ReserveTask() holds a placed task's CPU, memory and GPU memory on its
// instance; ReleaseTask() returns them exactly once (a second call is a no-op), so a STOPPED report that
// arrives twice, or a StopTask racing an agent's report, never frees memory twice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack {

struct ClusterFragments;  // scheduler/fragmentation.h
struct TargetWorkload;
struct WorkloadShape;

// Per-instance facts derived from the tasks on it, kept up to date by ReserveTask()/ReleaseTask().
struct InstanceLoad {
  std::unordered_map<std::string, int> group_counts;  // task group -> non-STOPPED tasks of that group
  std::vector<std::string> task_arns;                  // non-STOPPED tasks on the instance
  // The same counts keyed by ClusterState::GroupId (placement's hot loops; no string hashing). Only loads
  // kept by ClusterState fill it.
  std::vector<std::pair<uint32_t, int>> group_id_counts;
  // A number no other state of any instance had: set by every change of the instance or of its holdings
  // (FragmentCache recomputes an instance whose stamp moved). 0 only in loads ClusterState does not keep.
  uint64_t stamp = 0;
  int CountOfGroupId(uint32_t id) const {
    for (const auto& [g, n] : group_id_counts)
      if (g == id) return n;
    return 0;
  }
};

// An instance with its load, in registration order (ClusterState::EntriesOf).
struct InstanceEntry {
  const ContainerInstance* instance = nullptr;
  const InstanceLoad* load = nullptr;
};

// A RunTask clientToken record: the request fingerprint and the tasks it produced.
struct ClientTokenRecord {
  std::string cluster;
  std::string token;
  std::string request_fingerprint;
  std::vector<std::string> task_arns;
  EpochMs created_at = 0;
  // write_seq: the server's sequence number of the write that made this record (0 = loaded from the store).
  // Never stored and not compared: it tells a retry whether the first answer is durable yet (engine/applier.h).
  uint64_t write_seq = 0;
  bool operator==(const ClientTokenRecord& o) const {
    return cluster == o.cluster && token == o.token && request_fingerprint == o.request_fingerprint &&
           task_arns == o.task_arns && created_at == o.created_at;
  }
};

// GpuSlot: one GPU in a cluster's best-fit index, ordered by remaining memory, then by the instance's
// registration order, then by GPU position. Every GPU of every instance is in the index whatever its mode;
// callers skip the ones that cannot take a task.
struct GpuSlot {
  MiB remaining = 0;
  uint32_t seq = 0;  // registration order of the instance in its cluster
  uint32_t gpu = 0;  // index into instance->gpus
  const ContainerInstance* instance = nullptr;
  bool operator<(const GpuSlot& o) const {
    if (remaining != o.remaining) return remaining < o.remaining;
    if (seq != o.seq) return seq < o.seq;
    return gpu < o.gpu;
  }
};

// HostSlot: one instance in a cluster's binpack(cpu) or binpack(memory) index, ordered by its remaining CPU units
// (or MiB of memory), then by its registration order. Every instance of the cluster is in both indexes whatever
// its status; callers skip the ones that cannot take a task.
struct HostSlot {
  int64_t remaining = 0;
  uint32_t seq = 0;  // registration order of the instance in its cluster
  const ContainerInstance* instance = nullptr;
  bool operator<(const HostSlot& o) const {
    if (remaining != o.remaining) return remaining < o.remaining;
    return seq < o.seq;
  }
};

enum class HostResource { kCpu, kMemory };

// GroupMembers: the instances of a cluster that hold at least one task of a group (count > 0); instances of
// count 0 are in neither field.
struct GroupMembers {
  std::set<std::pair<int, uint32_t>> by_count;  // (count, registration order), ascending
  std::vector<uint64_t> present;                // bit `seq` set: the instance is in by_count (may be short)
  bool Has(uint32_t seq) const { return seq / 64 < present.size() && (present[seq / 64] >> (seq % 64) & 1) != 0; }
};

class ClusterState {
 public:
  ClusterState() = default;
  ClusterState(const ClusterState&) = delete;
  ClusterState& operator=(const ClusterState&) = delete;

  // ---- clusters
  const Cluster* FindCluster(const std::string& name) const;
  void PutCluster(Cluster cluster);
  std::vector<const Cluster*> Clusters() const;  // sorted by name

  // ---- task definitions
  const TaskDefinition* FindTaskDefinition(const std::string& family, int revision) const;
  const TaskDefinition* LatestActiveRevision(const std::string& family) const;
  int LatestRevision(const std::string& family) const;  // 0 when the family is new
  void PutTaskDefinition(TaskDefinition td);
  const std::map<std::string, std::map<int, TaskDefinition>>& TaskDefinitions() const { return task_definitions_; }

  // ---- container instances
  // Instances are kept in registration order per cluster; the index is stable for the instance's lifetime.
  ContainerInstance* FindInstance(const std::string& arn);
  const ContainerInstance* FindInstance(const std::string& arn) const;
  // Adds or replaces an instance (matched by ARN). Replacing keeps its load.
  void PutInstance(ContainerInstance instance);
  // ForEachInstance calls `f(const ContainerInstance&)` for every instance, in no particular order.
  template <typename F>
  void ForEachInstance(F&& f) const {
    for (const auto& entry : instances_) f(*entry.second.instance);
  }
  // Instances of a cluster in registration order, INACTIVE ones included.
  const std::vector<ContainerInstance*>& InstancesOf(const std::string& cluster) const;
  const InstanceLoad& LoadOf(const std::string& instance_arn) const;
  const InstanceLoad& LoadOf(const ContainerInstance& instance) const;  // no string hashing: for hot loops
  // InstancesOf with each instance's load, same order and positions (GpuSlot::seq is the position): placement
  // iterates this instead of looking loads up.
  const std::vector<InstanceEntry>& EntriesOf(const std::string& cluster) const;
  // Dense id of a task group (InstanceLoad::group_id_counts); kNoGroupId when no task of it holds resources.
  static constexpr uint32_t kNoGroupId = UINT32_MAX;
  uint32_t GroupId(const std::string& group) const;
  // GroupCount: the task groups that have an id, i.e. at least one task holding resources. A group's id and its
  // group index entries are freed when its last task releases its resources (ids are reused), so both stay
  // bounded by the groups of the tasks that hold resources, however many distinct groups ever ran.
  size_t GroupCount() const { return group_ids_.size(); }
  // GroupIndexEntries: (cluster, group) entries in the group indexes, all clusters together.
  size_t GroupIndexEntries() const;
  // The cluster's GPUs ordered by remaining memory (best fit = lower_bound on the memory a task needs).
  // Kept current by PutInstance, ReserveTask, ReleaseTask and RebuildReservations.
  const std::set<GpuSlot>& GpuIndex(const std::string& cluster) const;
  // The cluster's instances ordered by remaining CPU units or memory (binpack(cpu|memory): lower_bound on what a
  // task needs). Kept current by the same calls as GpuIndex.
  const std::set<HostSlot>& HostIndex(const std::string& cluster, HostResource resource) const;
  // The cluster's instances holding at least one task of a group (GroupId): spread(instanceId) walks them by
  // ascending count. Kept current by ReserveTask, ReleaseTask and RebuildReservations.
  const GroupMembers& GroupIndex(const std::string& cluster, uint32_t group_id) const;

  // ---- tasks
  // Tasks are shared with whoever took them with SharedTask() (the server's read views), never copied for it:
  // a task someone else still holds is copied the first time it changes (copy on write), so the state and a
  // published view hold one copy of every task that did not change since. A Task* or const Task* taken before
  // a change may therefore show the task as it was: take it again after changing the task. The version it
  // showed stays alive until DropSuperseded().
  Task* FindTask(const std::string& arn);  // copies the task first when it is shared
  const Task* FindTask(const std::string& arn) const;
  // SharedTask: the task itself, shared (null when unknown). The state copies it before changing it again.
  std::shared_ptr<const Task> SharedTask(const std::string& arn) const;
  // Adds a task record without touching reservations (used when loading from the store; call
  // RebuildReservations() after loading everything).
  void PutTask(Task task);
  size_t TaskCount() const { return tasks_.size(); }
  size_t InstanceCount() const { return instances_.size(); }
  // ForEachTask calls `f(const Task&)` for every task, in no particular order.
  template <typename F>
  void ForEachTask(F&& f) const {
    for (const auto& entry : tasks_) f(*entry.second);
  }
  // DropSuperseded forgets the versions of tasks that copy on write replaced since the last call (kept so that
  // a pointer taken before a change never dangles). The owner calls it between operations.
  void DropSuperseded() { superseded_.clear(); }
  // Drops a STOPPED task from memory (retention expired). Refuses tasks that still hold resources.
  Status EraseStoppedTask(const std::string& arn);
  // StoppedTasks: (stopped_at, ARN) of every task whose last_status is STOPPED and whose stopped_at is set, each
  // once, earliest first: the retention purge reads the expired ones at its head and never walks the tasks that
  // did not stop (100,000 waiting ones, say). Kept by PutTask (the load, a follower), ReserveTask,
  // PlaceWaitingTask, SetTaskLastStatus and EraseStoppedTask, each filing a task by its record as it leaves it.
  // ListTasks' STOPPED order (ReadView::TaskOrderOf) cannot serve: it holds desiredStatus STOPPED (a task
  // still running until its agent reports) by createdAt (a task created long ago may have stopped a second ago).
  const std::set<std::pair<EpochMs, std::string>>& StoppedTasks() const { return stopped_; }
  // RefileStopped: a task changed in place, through FindTask, is filed again by its record (Transaction::
  // UpdateTask calls it, so that a stopped_at changed after the task stopped moves its entry, not adds one).
  void RefileStopped(const std::string& arn);

  // ReserveTask adds a placed task and holds its reservations on its instance. The task's
  // container_instance_arn, reserved and gpu_reservations must be filled (the placement decision).
  Status ReserveTask(Task task);
  // SetTaskLastStatus moves a task between PENDING and RUNNING (keeping the instance's pending/running
  // counters right); STOPPED also releases its reservations.
  void SetTaskLastStatus(const std::string& task_arn, TaskStatus last_status);
  // ReleaseTask returns a task's reservations once; false when it had none left to return.
  bool ReleaseTask(const std::string& task_arn);

  // Recomputes every instance's remaining CPU/memory, GPU modes and counters from the tasks that still hold
  // resources. Used after loading from the store; the result is exactly what Reserve/Release would produce.
  void RebuildReservations();

  // ---- fragmentation (scheduler/fragmentation.h): per cluster, the target workload of binpack(fragmentation) and
  // fgd and their cache of moves. FragmentsOf is null for a cluster that was never put.
  const ClusterFragments* FragmentsOf(const std::string& cluster) const;
  // SetTargetWorkload: the operator's workload for the cluster (null: learn it from RecordDemand again); cluster ""
  // sets it for every cluster, present and future.
  void SetTargetWorkload(const std::string& cluster, std::shared_ptr<const TargetWorkload> workload);
  // RecordDemand: one RunTask demand, into the cluster's bounded window of recent demands.
  void RecordDemand(const std::string& cluster, const WorkloadShape& shape);
  // TouchInstance: gives an instance changed in place (through FindInstance) a new stamp, so that cached moves of
  // it are recomputed. PutInstance, ReserveTask, ReleaseTask and RebuildReservations do it themselves.
  void TouchInstance(const std::string& arn);
  // StampsOf: InstanceLoad::stamp of the cluster's instances by registration position; LastStamp: the last stamp
  // given in any cluster (unchanged: no instance changed).
  const std::vector<uint64_t>& StampsOf(const std::string& cluster) const;
  uint64_t LastStamp() const { return stamps_; }

  // ---- services, keyed by ARN
  const Service* FindService(const std::string& arn) const;
  void PutService(Service service);  // adds or replaces
  // ForEachService calls `f(const Service&)` for every service, by ARN.
  template <typename F>
  void ForEachService(F&& f) const {
    for (const auto& entry : services_) f(entry.second);
  }
  size_t ServiceCount() const { return services_.size(); }
  // ServiceTasks: the tasks of group `group` ("service:<name>") in `cluster` that still hold their reservations
  // (placed and not yet released), by ARN. Kept by ReserveTask, ReleaseTask and PutTask for every group that
  // starts with "service:", so the service scheduler never scans the tasks.
  const std::set<std::string>& ServiceTasks(const std::string& cluster, const std::string& group) const;
  // StarvedServices: the ARNs of the cluster's services whose last reconcile could not place a task
  // (Service::starved); ServiceWakes: (next_launch_at, ARN) of the services waiting out a restart back-off,
  // earliest first. Both kept by PutService.
  const std::set<std::string>& StarvedServices(const std::string& cluster) const;
  // DaemonServices: the ARNs of the cluster's DAEMON services that are not INACTIVE (kept by PutService): an
  // instance that joins or leaves concerns each of them.
  const std::set<std::string>& DaemonServices(const std::string& cluster) const;
  const std::set<std::pair<EpochMs, std::string>>& ServiceWakes() const { return service_wakes_; }

  // ---- capacity providers, keyed by name (one namespace for the whole server, as ECS's per account)
  const CapacityProvider* FindCapacityProvider(const std::string& name) const;
  void PutCapacityProvider(CapacityProvider provider);  // adds or replaces
  template <typename F>
  void ForEachCapacityProvider(F&& f) const {
    for (const auto& entry : capacity_providers_) f(entry.second);
  }

  // ---- instances by capacity provider: the positions (EntriesOf) of the cluster's instances whose attribute
  // kCapacityProviderAttribute names `provider`, ascending; kept by PutInstance. A provider's tasks are placed
  // among these alone, so placing one costs the provider's instances, not the fleet's.
  const std::vector<uint32_t>& ProviderEntries(const std::string& cluster, const std::string& provider) const;

  // ---- GPU memory held by the tasks launched through each provider (placed and not yet released), in MiB:
  // in all and by team (kTeamTag; "" = no team). Shared GPU: the declared memory; dedicated: the GPU's total.
  // Kept by ReserveTask, ReleaseTask, PlaceWaitingTask and RebuildReservations; the quotas read it.
  struct ProviderUsage {
    MiB total = 0;
    std::map<std::string, MiB> by_team;
    MiB Team(const std::string& team) const {
      auto it = by_team.find(team);
      return it == by_team.end() ? 0 : it->second;
    }
  };
  const ProviderUsage& UsageOf(const std::string& provider) const;

  // ---- tasks waiting for capacity (PROVISIONING), per (cluster, provider), head first
  // A waiting task is a Task whose last_status is PROVISIONING: no instance, nothing reserved
  // (resources_released is true, so nothing is released twice). AddWaitingTask and PutTask (at load) put it in its
  // line; PlaceWaitingTask and SetTaskLastStatus(STOPPED) take it out. Finding a line's head is O(log n).
  struct WaitKey {
    int priority = 0;   // higher first
    int64_t seq = 0;    // then first come, first served (Task::wait_seq)
    std::string arn;
    bool operator<(const WaitKey& o) const {
      if (priority != o.priority) return priority > o.priority;
      if (seq != o.seq) return seq < o.seq;
      return arn < o.arn;
    }
  };
  using WaitLine = std::set<WaitKey>;
  // WaitLines: the cluster's non-empty lines by provider name.
  const std::map<std::string, WaitLine>& WaitLines(const std::string& cluster) const;
  size_t WaitingCount(const std::string& cluster) const;  // PROVISIONING tasks of the cluster, all providers
  size_t WaitingTotal() const { return waiting_total_; }
  // AllWaitLines: every cluster's non-empty lines, cluster -> provider -> line.
  const std::map<std::string, std::map<std::string, WaitLine>>& AllWaitLines() const { return wait_lines_; }
  // WaitStarts: (created_at, ARN) of every waiting task, oldest first: what the wait timeout looks at.
  const std::set<std::pair<EpochMs, std::string>>& WaitStarts() const { return wait_starts_; }
  // NextWaitSeq: the place in line of the next task acknowledged PROVISIONING (after every one ever loaded).
  int64_t NextWaitSeq() { return ++last_wait_seq_; }
  // AddWaitingTask adds a new PROVISIONING task (capacity_provider_name and wait_seq set, no instance).
  Status AddWaitingTask(Task task);
  // PlaceWaitingTask replaces a waiting task with `placed`, the same task with its placement decision filled
  // (container_instance_arn, reserved, gpu_reservations, last_status PENDING), and holds its reservations.
  Status PlaceWaitingTask(Task placed);

  // ---- clientToken idempotency
  const ClientTokenRecord* FindClientToken(const std::string& cluster, const std::string& token) const;
  // PutClientToken adds the record of (cluster, token) or replaces it whole (a load, a follower applying a batch).
  void PutClientToken(ClientTokenRecord record);
  // EraseClientToken forgets a record (its retention expired); false when there was none. `cluster` and `token`
  // must not be the record's own strings when the caller reads them afterwards: they go with it.
  bool EraseClientToken(const std::string& cluster, const std::string& token);
  // ForEachClientToken calls `f(const ClientTokenRecord&)` for every record, by (cluster, token).
  template <typename F>
  void ForEachClientToken(F&& f) const {
    for (const auto& entry : client_tokens_) f(entry.second);
  }
  size_t ClientTokenCount() const { return client_tokens_.size(); }
  // ClientTokensByAge: every record, each once, by created_at, then cluster and token, oldest first: the retention
  // purge reads the expired ones at its head and never walks the live ones (100,000 of a day's RunTasks, say).
  // Kept by PutClientToken (a record put again leaves its old entry) and EraseClientToken, the only calls that
  // change a record (FindClientToken hands out const ones); the load and a hot standby's apply go through them.
  // An entry points at its record in the state: valid until the record is erased (a put replaces it in place).
  struct OlderToken {
    bool operator()(const ClientTokenRecord* a, const ClientTokenRecord* b) const {
      return std::tie(a->created_at, a->cluster, a->token) < std::tie(b->created_at, b->cluster, b->token);
    }
  };
  using TokensByAge = std::set<const ClientTokenRecord*, OlderToken>;
  const TokensByAge& ClientTokensByAge() const { return tokens_by_age_; }

 private:
  struct InstanceSlot {
    std::unique_ptr<ContainerInstance> instance;
    InstanceLoad load;
    uint32_t seq = 0;
  };
  void ApplyReservation(const Task& task, int sign);
  // Adds (insert) or removes an instance's entries in the GPU and host indexes, keyed by its current values:
  // remove before changing what they are keyed by, add after.
  void IndexInstance(const InstanceSlot& slot, bool insert);
  void IndexGpus(const InstanceSlot& slot, bool insert);
  void IndexHost(const InstanceSlot& slot, bool insert);
  void IndexProvider(const InstanceSlot& slot, bool insert);  // ProviderEntries
  void CountProviderUsage(const Task& task, const ContainerInstance& instance, int sign);  // UsageOf

  std::map<std::string, Cluster> clusters_;
  std::map<std::string, std::map<int, TaskDefinition>> task_definitions_;  // family -> revision -> td
  std::unordered_map<std::string, InstanceSlot> instances_;                // arn -> instance
  std::unordered_map<std::string, std::vector<ContainerInstance*>> by_cluster_;
  std::unordered_map<std::string, std::vector<InstanceEntry>> entries_by_cluster_;  // parallel to by_cluster_
  // task group -> dense id, while tasks of the group hold resources (HoldGroup, UnholdGroup)
  std::unordered_map<std::string, uint32_t> group_ids_;
  std::vector<int64_t> group_holders_;    // group id -> tasks of the group holding resources; 0: the id is free
  std::vector<uint32_t> free_group_ids_;  // ids freed by UnholdGroup, reused before new ones are made
  uint32_t HoldGroup(const std::string& group);  // the group's id (made if needed), one more holder counted
  void UnholdGroup(const std::string& group, uint32_t id);  // one holder less; frees the id at the last
  std::unordered_map<const ContainerInstance*, const InstanceSlot*> by_pointer_;
  std::unordered_map<std::string, std::set<GpuSlot>> gpu_index_;  // cluster -> GPUs by remaining memory
  struct HostIndexes {
    std::set<HostSlot> cpu;     // instances by remaining CPU units
    std::set<HostSlot> memory;  // instances by remaining memory
  };
  std::unordered_map<std::string, HostIndexes> host_index_;  // cluster -> instances by remaining CPU / memory
  // cluster -> group id -> (count, seq) of the instances with tasks of that group
  std::unordered_map<std::string, std::unordered_map<uint32_t, GroupMembers>> group_index_;
  // Owned: the task for writing, copying it first when someone else holds it too.
  Task& Own(std::shared_ptr<Task>& task);

  std::unordered_map<std::string, std::shared_ptr<Task>> tasks_;
  std::vector<std::shared_ptr<Task>> superseded_;  // versions replaced by Own() since DropSuperseded()
  std::set<std::pair<EpochMs, std::string>> stopped_;  // (stopped_at, ARN) (StoppedTasks)
  // ARN (a view of the string in its stopped_ entry) -> the stopped_at it is filed under: a task leaves the entry
  // it was filed under even when its record changed in place since.
  std::unordered_map<std::string_view, EpochMs> stopped_filed_;
  // FileStopped files the task `arn` by `task`, its record now (null: it is gone): in stopped_ when STOPPED with a
  // stopped_at, else in no entry; an entry of an earlier record is dropped.
  void FileStopped(const std::string& arn, const Task* task);
  std::map<std::pair<std::string, std::string>, ClientTokenRecord> client_tokens_;
  TokensByAge tokens_by_age_;  // the records of client_tokens_ by created_at (ClientTokensByAge)
  std::map<std::string, Service> services_;  // ARN -> service
  std::map<std::string, CapacityProvider> capacity_providers_;  // name -> provider
  std::map<std::string, std::map<std::string, WaitLine>> wait_lines_;  // cluster -> provider -> line
  std::set<std::pair<EpochMs, std::string>> wait_starts_;            // (created_at, ARN) (WaitStarts)
  // cluster -> provider -> positions of its instances (ProviderEntries)
  std::unordered_map<std::string, std::map<std::string, std::vector<uint32_t>>> provider_entries_;
  std::map<std::string, ProviderUsage> provider_usage_;  // provider -> GPU memory held (UsageOf)
  size_t waiting_total_ = 0;
  int64_t last_wait_seq_ = 0;
  void IndexWaiting(const Task& task, bool insert);
  // (cluster, group) -> ARNs of the group's tasks holding reservations, for groups "service:*" (ServiceTasks)
  std::map<std::pair<std::string, std::string>, std::set<std::string>> service_tasks_;
  void IndexServiceTask(const Task& task, bool insert);
  std::map<std::string, std::set<std::string>> starved_services_;  // cluster -> ARNs (StarvedServices)
  std::map<std::string, std::set<std::string>> daemon_services_;   // cluster -> ARNs (DaemonServices)
  std::set<std::pair<EpochMs, std::string>> service_wakes_;        // (next_launch_at, ARN) (ServiceWakes)
  // cluster -> fragmentation state (shared_ptr: ClusterFragments is incomplete here)
  std::unordered_map<std::string, std::shared_ptr<ClusterFragments>> fragments_;
  uint64_t stamps_ = 0;  // the last InstanceLoad::stamp given
  std::unordered_map<std::string, std::vector<uint64_t>> stamps_by_cluster_;  // cluster -> stamp by position
  void Touch(InstanceSlot& slot);
  ClusterFragments& MutableFragments(const std::string& cluster);
};

// CapacityProviderOf: the provider an instance belongs to (its kCapacityProviderAttribute), or null.
const std::string* CapacityProviderOf(const ContainerInstance& instance);
// TeamOf: a task's team, its kTeamTag ("" when it has none).
std::string TeamOf(const std::vector<KeyValuePair>& tags);
// GpuMemoryOf: the GPU memory a placed task holds on `instance` (ProviderUsage's measure).
MiB GpuMemoryOf(const Task& task, const ContainerInstance& instance);

// DemandOf derives what a task needs from its definition and overrides (task-level cpu/memory win over the
// containers' sums; container overrides of cpu/memory apply). Assumes a validated definition.
TaskDemand DemandOf(const TaskDefinition& td, const TaskOverride& overrides = {});

// EffectiveRequirements: a container's resource requirements with its RunTask/StartTask override applied: a
// requirement in the override replaces the definition's of the same type (validation lets an override carry only
// a dedicated GPU `value` or an InferenceAccelerator). `o` may be null.
std::vector<ResourceRequirement> EffectiveRequirements(const ContainerDefinition& c, const ContainerOverride* o);
// OverrideFor: the override of the container named `name`, or null.
const ContainerOverride* OverrideFor(const TaskOverride& overrides, const std::string& name);

// Parses ECS task-level cpu ("1024", "1 vCPU", "0.5 vcpu") into CPU units and memory ("2048", "2 GB", "2GB")
// into MiB; nullopt when malformed.
std::optional<int64_t> ParseTaskCpu(const std::string& text);
std::optional<int64_t> ParseTaskMemory(const std::string& text);

}  // namespace gpupack
