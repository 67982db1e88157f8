// The domain model: value types for clusters, task definitions, container instances, GPUs and tasks.
//
// Plain data, no behaviour beyond small derived helpers. Times are epoch milliseconds (0 = unset); the codec
// turns them into ECS's epoch seconds. Memory is MiB, CPU is ECS CPU units (1024 per vCPU).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpupack {

using MiB = int64_t;
using EpochMs = int64_t;

// ---- Statuses ---------------------------------------------------------------------------------------------
// Each status is an enum in memory; Name() gives ECS's spelling (what the codec answers and what the store
// writes) and Parse*() reads it back, nullopt for any other string.

// TaskStatus: Task::last_status, Task::desired_status and Container::last_status. PROVISIONING is only ever a
// task's last_status: a task launched through a capacity provider that waits for capacity (engine/operations/
// capacity_queue.cc); it holds nothing and has no instance. Agents never report it.
enum class TaskStatus { kPending, kRunning, kStopped, kProvisioning };
const char* Name(TaskStatus status);  // "PENDING" | "RUNNING" | "STOPPED" | "PROVISIONING"
std::optional<TaskStatus> ParseTaskStatus(std::string_view text);

// InstanceStatus: ContainerInstance::status. DRAINING takes no new tasks; INACTIVE is deregistered; REGISTERING
// is a new instance of a cluster that accepts instances manually (ClusterSettings), which takes no tasks until an
// administrator sets it ACTIVE. Last in the list: the values before it keep their numbers.
enum class InstanceStatus { kActive, kDraining, kInactive, kRegistering };
const char* Name(InstanceStatus status);  // "ACTIVE" | "DRAINING" | "INACTIVE" | "REGISTERING"
std::optional<InstanceStatus> ParseInstanceStatus(std::string_view text);

// LifecycleStatus: Cluster::status and TaskDefinition::status. INACTIVE is a deleted cluster or a deregistered
// revision, kept so that it can still be described.
enum class LifecycleStatus { kActive, kInactive };
const char* Name(LifecycleStatus status);  // "ACTIVE" | "INACTIVE"
std::optional<LifecycleStatus> ParseLifecycleStatus(std::string_view text);

// stop_codes: the ECS stop codes the server sets on Task::stop_code. Stop codes stay strings in the model: in
// ECS they are free text, and an agent may report one the server does not know.
namespace stop_codes {
inline constexpr char kTaskFailedToStart[] = "TaskFailedToStart";
inline constexpr char kEssentialContainerExited[] = "EssentialContainerExited";
inline constexpr char kUserInitiated[] = "UserInitiated";
inline constexpr char kInfrastructureHealth[] = "InfrastructureHealth";
inline constexpr char kServiceSchedulerInitiated[] = "ServiceSchedulerInitiated";
}  // namespace stop_codes


// ---- Task definitions -------------------------------------------------------------------------------------

// sharingStrategy.nvidiaMps of a GPU resource requirement.
struct MpsSharing {
  MiB memory_mib = 0;
  std::optional<int> max_compute_percent;  // 1..100; absent means 100 and no thread-percentage variable

  int EffectiveComputePercent() const { return max_compute_percent.value_or(100); }
  bool operator==(const MpsSharing&) const = default;
};

// containerDefinitions[].resourceRequirements[]: {"type": "GPU", "value": "1"} or
// {"type": "GPU", "sharingStrategy": {"nvidiaMps": {...}}}. `value` is kept as the client sent it.
struct ResourceRequirement {
  std::string type;                  // "GPU" or "InferenceAccelerator"
  std::optional<std::string> value;  // dedicated GPU count, as a string
  std::optional<MpsSharing> mps;     // sharingStrategy.nvidiaMps
  bool has_sharing_strategy = false; // a sharingStrategy object was present (even without nvidiaMps)
  bool operator==(const ResourceRequirement&) const = default;
};

struct KeyValuePair {
  std::string name;
  std::string value;
  bool operator==(const KeyValuePair&) const = default;
};

struct ContainerDefinition {
  std::string name;
  std::string image;
  std::vector<std::string> command;
  std::vector<std::string> entry_point;
  std::vector<KeyValuePair> environment;
  int64_t cpu = 0;                          // CPU units reserved for the container (0 = none)
  std::optional<int64_t> memory;            // hard limit, MiB
  std::optional<int64_t> memory_reservation;  // soft limit, MiB
  bool essential = true;
  std::vector<ResourceRequirement> resource_requirements;
  // Fields of ECS's ContainerDefinition that gpupack does not interpret (portMappings, logConfiguration, ...),
  // as a JSON object text, echoed back by DescribeTaskDefinition. Opaque to the scheduler.
  std::string extra_json;
  bool operator==(const ContainerDefinition&) const = default;
};

// A task-placement constraint: {"type": "distinctInstance"} or {"type": "memberOf", "expression": "..."}.
struct PlacementConstraint {
  std::string type;
  std::string expression;
  bool operator==(const PlacementConstraint&) const = default;
};

// A task-placement strategy: {"type": "binpack"|"spread"|"random", "field": "..."}.
struct PlacementStrategy {
  std::string type;
  std::string field;
  bool operator==(const PlacementStrategy&) const = default;
};

struct TaskDefinition {
  std::string family;
  int revision = 0;
  std::string arn;
  LifecycleStatus status = LifecycleStatus::kActive;
  std::vector<ContainerDefinition> containers;
  std::optional<std::string> cpu;     // task-level cpu as sent ("1024" or "1 vCPU")
  std::optional<std::string> memory;  // task-level memory as sent ("2048" or "2 GB")
  std::string network_mode;           // empty = not set
  std::vector<std::string> requires_compatibilities;
  std::vector<PlacementConstraint> placement_constraints;  // memberOf only (ECS)
  std::vector<KeyValuePair> tags;
  EpochMs registered_at = 0;
  EpochMs deregistered_at = 0;
  std::string extra_json;  // uninterpreted top-level fields (taskRoleArn, volumes, ...), JSON object text
  bool operator==(const TaskDefinition&) const = default;
};

// What a task needs from one container instance, derived from its definition (and overrides).
enum class GpuKind { kNone, kShared, kDedicated };

struct TaskDemand {
  int64_t cpu = 0;        // CPU units
  MiB memory = 0;         // host memory, MiB
  GpuKind gpu_kind = GpuKind::kNone;
  MiB gpu_memory = 0;     // shared: sum of nvidiaMps.memory over GPU containers (all on one GPU)
  int gpu_compute = 0;    // shared: sum of effective maxComputePercent over GPU containers
  int gpu_count = 0;      // dedicated: sum of `value` over containers
  bool operator==(const TaskDemand&) const = default;
};

// ---- Capacity providers -----------------------------------------------------------------------------------
// A capacity provider is a named pool of container instances (an instance joins one with the attribute
// kCapacityProviderAttribute, which `gpupack agent --capacity-provider NAME` registers). Tasks launched through a
// provider are placed only on its instances and wait in PROVISIONING while none has room (docs/operations.md).

// kCapacityProviderAttribute: the instance attribute that names the provider an instance belongs to.
inline constexpr char kCapacityProviderAttribute[] = "ecs.capacity-provider-name";
// kPriorityTag: the task tag (ours) that orders a provider's waiting tasks: an integer -1000..1000, higher first,
// 0 when absent; first come, first served within one priority.
inline constexpr char kPriorityTag[] = "gpupack:priority";
// kTeamTag: the task tag (ours) that names the team a task of a capacity provider counts against (its quota).
inline constexpr char kTeamTag[] = "gpupack:team";
// Quotas, as tags of the capacity provider (CreateCapacityProvider, TagResource): kQuotaTag caps the GPU memory
// (MiB) that all tasks launched through the provider may hold at once, kQuotaTag + ":" + TEAM that of one team's
// tasks (docs/operations.md). A task that would pass a quota waits in PROVISIONING.
inline constexpr char kQuotaTag[] = "gpupack:quota-gpu-memory";

// CapacityProviderStatus: ACTIVE, or INACTIVE once deleted (kept describable, as ECS keeps it for a while).
enum class CapacityProviderStatus { kActive, kInactive };
const char* Name(CapacityProviderStatus status);  // "ACTIVE" | "INACTIVE"
std::optional<CapacityProviderStatus> ParseCapacityProviderStatus(std::string_view text);

struct CapacityProvider {
  std::string name;
  std::string arn;
  CapacityProviderStatus status = CapacityProviderStatus::kActive;
  std::string update_status;  // ECS's updateStatus: "" | "DELETE_COMPLETE" | "UPDATE_COMPLETE"
  std::vector<KeyValuePair> tags;
  EpochMs created_at = 0;
  int64_t version = 1;
  bool operator==(const CapacityProvider&) const = default;
};

// One item of a capacityProviderStrategy: tasks go to `provider`; the first `base` tasks of a request to the one
// item with a base, the rest in proportion to `weight`.
struct CapacityProviderStrategyItem {
  std::string provider;
  int weight = 0;  // 0..1000
  int base = 0;    // 0..100000
  bool operator==(const CapacityProviderStrategyItem&) const = default;
};

// ---- Clusters ---------------------------------------------------------------------------------------------

struct ClusterSettings {
  // Opt-in beyond ECS: the sum of maxComputePercent on one GPU stays <= 100 (RESOURCE:GPU_COMPUTE).
  bool compute_aware_placement = false;
  // Opt-in (gpupack.instanceAcceptance manual): a new container instance is REGISTERING, out of placement, until
  // an administrator accepts it (UpdateContainerInstancesState ACTIVE), so a host nobody expected draws no tasks.
  bool manual_instance_acceptance = false;
  bool operator==(const ClusterSettings&) const = default;
};

struct Cluster {
  std::string name;
  std::string arn;
  LifecycleStatus status = LifecycleStatus::kActive;
  ClusterSettings settings;
  std::vector<KeyValuePair> tags;
  EpochMs created_at = 0;
  // PutClusterCapacityProviders: the providers a strategy may name, and the strategy of a RunTask or
  // CreateService that gives neither a launchType nor a strategy.
  std::vector<std::string> capacity_providers;
  std::vector<CapacityProviderStrategyItem> default_strategy;
  bool operator==(const Cluster&) const = default;
};

// ClusterCounts: what DescribeClusters counts over a cluster's instances that are not INACTIVE.
struct ClusterCounts {
  int registered_instances = 0;
  int running_tasks = 0;
  int pending_tasks = 0;
  int active_services = 0;
  int draining_services = 0;
};

// ---- Container instances and GPUs -------------------------------------------------------------------------

enum class GpuMode { kIdle, kMps, kDedicated };

// One physical GPU of a container instance and what placed tasks declared on it.
struct Gpu {
  std::string id;  // "GPU-<uuid>"
  MiB total_memory_mib = 0;
  MiB remaining_memory_mib = 0;  // total minus the memory declared by non-STOPPED shared tasks on it
  GpuMode mode = GpuMode::kIdle;
  int container_count = 0;       // GPU containers of non-STOPPED tasks on it
  int compute_used_percent = 0;  // sum of effective maxComputePercent of shared containers on it
  bool held = false;             // the agent holds it after a fault; nothing is placed on it
  bool operator==(const Gpu&) const = default;
};

struct Resources {
  int64_t cpu = 0;
  MiB memory = 0;
  bool operator==(const Resources&) const = default;
};

struct Attribute {
  std::string name;
  std::optional<std::string> value;
  bool operator==(const Attribute&) const = default;
};

struct ContainerInstance {
  std::string arn;
  std::string id;  // the last part of the ARN
  std::string cluster;  // cluster name
  std::string ec2_instance_id;
  std::string instance_type;
  InstanceStatus status = InstanceStatus::kActive;
  std::string status_reason;
  bool agent_connected = true;
  bool impaired = false;          // the agent reports its MPS daemon unhealthy; nothing is placed
  std::string agent_version;
  Resources registered;
  Resources remaining;
  std::vector<Gpu> gpus;
  std::vector<Attribute> attributes;  // sorted by name, unique
  int running_tasks_count = 0;
  int pending_tasks_count = 0;
  EpochMs registered_at = 0;
  // registered_by: the agent-role access key that registered the instance ("" when an admin key or an unsigned
  // caller did). With --credentials an agent key acts only for the instances it registered (docs/security.md).
  std::string registered_by;
  int64_t version = 1;
  bool operator==(const ContainerInstance&) const = default;

  const Attribute* FindAttribute(const std::string& name) const {
    for (const auto& a : attributes)
      if (a.name == name) return &a;
    return nullptr;
  }
};

// ---- Tasks ------------------------------------------------------------------------------------------------

struct ContainerOverride {
  std::string name;
  std::optional<std::vector<std::string>> command;
  std::vector<KeyValuePair> environment;
  std::optional<int64_t> cpu;
  std::optional<int64_t> memory;
  std::optional<int64_t> memory_reservation;
  std::vector<ResourceRequirement> resource_requirements;  // a sharingStrategy here is refused
  bool operator==(const ContainerOverride&) const = default;
};

struct TaskOverride {
  std::vector<ContainerOverride> container_overrides;
  std::optional<std::string> cpu;
  std::optional<std::string> memory;
  bool operator==(const TaskOverride&) const = default;
};

struct Container {
  std::string name;
  std::string container_arn;
  std::string image;
  TaskStatus last_status = TaskStatus::kPending;
  std::optional<int> exit_code;
  std::string reason;
  bool essential = true;
  std::vector<std::string> gpu_ids;      // GPUs assigned to this container
  std::optional<MpsSharing> mps;         // gpuSharingStrategy.nvidiaMps for a shared container
  bool operator==(const Container&) const = default;
};

// Memory and compute a task holds on one GPU; released exactly once when the task stops.
struct GpuReservation {
  std::string gpu_id;
  MiB memory_mib = 0;        // shared: declared memory; dedicated: 0 (the whole GPU)
  int compute_percent = 0;   // shared: sum of effective maxComputePercent
  int containers = 0;        // GPU containers of the task on this GPU
  bool dedicated = false;
  bool operator==(const GpuReservation&) const = default;
};

struct Task {
  std::string arn;
  std::string id;
  std::string cluster;  // cluster name
  std::string task_definition_arn;
  std::string container_instance_arn;
  std::string group;
  std::string started_by;
  std::string launch_type = "EC2";
  TaskStatus last_status = TaskStatus::kPending;
  TaskStatus desired_status = TaskStatus::kRunning;
  std::string stop_code;                  // an ECS stop code (stop_codes names the server's own), "" = none
  std::string stopped_reason;
  EpochMs created_at = 0;
  EpochMs started_at = 0;
  EpochMs stopping_at = 0;
  EpochMs stopped_at = 0;
  std::vector<Container> containers;
  TaskOverride overrides;
  std::vector<KeyValuePair> tags;
  Resources reserved;                     // host CPU and memory held on the instance
  std::vector<GpuReservation> gpu_reservations;
  bool resources_released = false;        // set once, when the task's reservations were returned
  std::string client_token;
  // capacity_provider_name: the provider the task was launched through ("" = none); placed only on its instances.
  std::string capacity_provider_name;
  // wait_seq: the task's place in its provider's line, given when it was acknowledged PROVISIONING (FIFO within
  // a priority); 0 = it never waited. Kept after it is placed, so a restart rebuilds the same order.
  int64_t wait_seq = 0;
  int priority = 0;  // kPriorityTag, for the order of a provider's waiting tasks
  // A waiting task's RunTask placementConstraints and placementStrategy, applied when it is placed.
  std::vector<PlacementConstraint> placement_constraints;
  std::vector<PlacementStrategy> placement_strategy;
  int64_t version = 1;
  bool operator==(const Task&) const = default;
};

// ---- Services ---------------------------------------------------------------------------------------------
// A service keeps desiredCount copies of a task definition running (engine/operations/service_scheduler.cc). Its
// tasks carry group "service:<name>" and startedBy the id of the deployment that started them.

// ServiceStatus: ACTIVE; DRAINING after DeleteService until its last task stopped; then INACTIVE.
enum class ServiceStatus { kActive, kDraining, kInactive };
const char* Name(ServiceStatus status);  // "ACTIVE" | "DRAINING" | "INACTIVE"
std::optional<ServiceStatus> ParseServiceStatus(std::string_view text);

// RolloutState: a deployment's rolloutState.
enum class RolloutState { kInProgress, kCompleted, kFailed };
const char* Name(RolloutState state);  // "IN_PROGRESS" | "COMPLETED" | "FAILED"
std::optional<RolloutState> ParseRolloutState(std::string_view text);

// deploymentConfiguration: how many tasks a deployment or a drain may stop and start at once.
struct DeploymentConfiguration {
  int minimum_healthy_percent = 100;  // RUNNING tasks kept, percent of desiredCount (rounded up)
  int maximum_percent = 200;          // tasks RUNNING or PENDING at most, percent of desiredCount (rounded down)
  bool circuit_breaker = false;       // deploymentCircuitBreaker.enable
  bool rollback = false;              // deploymentCircuitBreaker.rollback
  bool operator==(const DeploymentConfiguration&) const = default;
};

// One deployment of a service: the PRIMARY one is what the service converges on; ACTIVE ones are older ones
// whose tasks are being replaced. Counts are kept by the service scheduler.
struct ServiceDeployment {
  std::string id;                       // "ecs-svc/<19 digits>": the startedBy of its tasks
  bool primary = true;                  // status PRIMARY, else ACTIVE
  std::string task_definition_arn;
  int desired_count = 0;
  int pending_count = 0;
  int running_count = 0;
  int failed_tasks = 0;
  RolloutState rollout_state = RolloutState::kInProgress;
  std::string rollout_state_reason;
  EpochMs created_at = 0;
  EpochMs updated_at = 0;
  bool operator==(const ServiceDeployment&) const = default;
};

struct ServiceEvent {
  std::string id;
  EpochMs created_at = 0;
  std::string message;
  bool operator==(const ServiceEvent&) const = default;
};

struct Service {
  std::string arn;
  std::string name;
  std::string cluster;  // cluster name
  ServiceStatus status = ServiceStatus::kActive;
  std::string task_definition_arn;  // the PRIMARY deployment's
  std::string stable_task_definition_arn;  // the last COMPLETED deployment's: what a rollback returns to
  int desired_count = 0;
  bool daemon = false;              // schedulingStrategy DAEMON (one task per instance), else REPLICA
  std::vector<PlacementConstraint> placement_constraints;
  std::vector<PlacementStrategy> placement_strategy;
  std::vector<CapacityProviderStrategyItem> capacity_provider_strategy;  // its tasks go to these providers
  DeploymentConfiguration deployment_configuration;
  std::vector<ServiceDeployment> deployments;  // PRIMARY first, then ACTIVE ones, newest first
  std::vector<ServiceEvent> events;            // newest first, at most kMaxServiceEvents
  std::vector<KeyValuePair> tags;
  std::string client_token;
  int running_count = 0;
  int pending_count = 0;
  bool steady = false;          // the last reconcile found desiredCount RUNNING and nothing else to do
  bool starved = false;         // the last reconcile could not place a task it wanted: retried when capacity frees
  int failure_streak = 0;       // tasks that stopped on their own, each within kFailureWindowMs of the last
  EpochMs last_failure_at = 0;
  EpochMs next_launch_at = 0;   // no task is started before this (restart back-off); 0 = none
  EpochMs created_at = 0;
  EpochMs updated_at = 0;
  int64_t version = 1;
  bool operator==(const Service&) const = default;

  static constexpr size_t kMaxServiceEvents = 100;
  const ServiceDeployment* Primary() const { return deployments.empty() ? nullptr : &deployments.front(); }
};

// ServiceGroup: the task group of a service's tasks.
inline std::string ServiceGroup(const std::string& service_name) { return "service:" + service_name; }

const char* GpuModeName(GpuMode mode);  // "IDLE" | "NVIDIA_MPS" | "DEDICATED"

}  // namespace gpupack
