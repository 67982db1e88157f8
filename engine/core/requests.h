// Typed requests: one struct per ECS operation, parsed from the JSON 1.1 body by the ECS front end
// (api/ecs/parse.h).
//
// Parsing checks what the body alone decides (types, required fields, ECS's length and count limits) and
// leaves whatever needs the cluster's state (does the cluster exist, which task a reference names) to the
// operation. References (clusters, tasks, instances, task definitions) stay as the caller wrote them: name,
// short id or ARN. Whether an operation writes is a property of its request type (kAccess): the router sends a
// write through the applier and a read to the published read view.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack::api {

enum class Access { kRead, kWrite };

// AgentKey: the agent-role access key making an agent's call (RegisterContainerInstance, state changes,
// DeregisterContainerInstance), when the server runs with --credentials; none for an admin key or without
// credentials. Such a key acts only for the instances it registered (ContainerInstance::registered_by).
using AgentKey = std::optional<std::string>;

// Caller: who makes a call, as the router hands it to the requests that need it (never from the body): the agent
// key, and the host that key is bound to (gpupack_host; empty: the first host that registers with it).
struct Caller {
  AgentKey agent_key;
  std::string agent_host;
};

// Page: maxResults and nextToken of a List call (1..100, default 100; tokens this server issued).
struct PageRequest {
  size_t limit = 100;
  size_t begin = 0;  // the offset nextToken names
};

// ---- clusters

struct CreateClusterRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string cluster_name;  // as sent; "default" when absent
  std::vector<KeyValuePair> tags;
  std::optional<bool> compute_aware;  // settings: gpupack.computeAwarePlacement
  std::optional<bool> manual_instance_acceptance;  // settings: gpupack.instanceAcceptance manual
};
struct DeleteClusterRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string cluster;
};
struct UpdateClusterSettingsRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string cluster;
  std::optional<bool> compute_aware;
  std::optional<bool> manual_instance_acceptance;
};
struct DescribeClustersRequest {
  static constexpr Access kAccess = Access::kRead;
  std::vector<std::string> clusters;  // at least "default"
  bool statistics = false;            // include: STATISTICS (the other ECS values add nothing here)
};
struct ListClustersRequest {
  static constexpr Access kAccess = Access::kRead;
  PageRequest page;
};

// ---- task definitions

struct RegisterTaskDefinitionRequest {
  static constexpr Access kAccess = Access::kWrite;
  TaskDefinition definition;  // family, containers, ...; revision and ARN are the operation's
};
struct DeregisterTaskDefinitionRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string task_definition;
};
struct DescribeTaskDefinitionRequest {
  static constexpr Access kAccess = Access::kRead;
  std::string task_definition;
};
struct ListTaskDefinitionsRequest {
  static constexpr Access kAccess = Access::kRead;
  std::optional<std::string> family_prefix;
  // status: the revisions listed; nullopt for ECS's DELETE_IN_PROGRESS, which no revision here is ever in.
  std::optional<LifecycleStatus> status = LifecycleStatus::kActive;
  bool descending = false;
  PageRequest page;
};
struct ListTaskDefinitionFamiliesRequest {
  static constexpr Access kAccess = Access::kRead;
  std::optional<std::string> family_prefix;
  std::optional<LifecycleStatus> status = LifecycleStatus::kActive;  // nullopt: ALL
  PageRequest page;
};

// ---- tasks

// PlacementPolicy: the server's placement settings (`gpupack server --default-strategy`,
// `--place-on-disconnected`). The router copies them into every RunTask, StartTask and ExplainPlacement request
// after parsing; they never come from a body.
struct PlacementPolicy {
  // shared_gpu_default: the strategies of a task that shares a GPU (sharingStrategy) and names none; binpack on
  // GPU memory unless the server is told otherwise. Other tasks without strategies are placed at random, as ECS
  // places them.
  std::vector<PlacementStrategy> shared_gpu_default = {{"binpack", "gpuMemory"}};
  // place_on_disconnected: place on instances whose agent is not connected (benchmarks, simulations).
  bool place_on_disconnected = false;
  // Tasks launched through a capacity provider that wait for capacity (PROVISIONING), per cluster at most this
  // many (`gpupack server --max-provisioning-tasks`, ECS's quota of 500), each at most this long
  // (`--provisioning-timeout`, then STOPPED with TaskFailedToStart).
  size_t max_provisioning_per_cluster = 500;
  EpochMs provisioning_timeout_ms = 30 * 60'000;
  // Backfill: a task behind its line's head may start first when it fits; once the head has waited this long
  // the instance where it will fit soonest is held for it (`--backfill-reservation-after`, docs/operations.md).
  EpochMs reservation_after_ms = 5 * 60'000;
};

// RunTask and StartTask: StartTask names the instances and has no count.
struct PlaceTasksRequest {
  std::string cluster;
  std::string task_definition;
  int64_t count = 1;
  std::optional<std::string> group;
  std::optional<std::string> started_by;
  std::optional<std::string> client_token;
  std::vector<KeyValuePair> tags;
  TaskOverride overrides;
  std::vector<PlacementConstraint> constraints;
  std::vector<PlacementStrategy> strategies;
  std::vector<std::string> container_instances;  // StartTask only
  // capacityProviderStrategy (RunTask only; empty = none given) and whether a launchType was given (the two are
  // mutually exclusive; neither means the cluster's default strategy).
  std::vector<CapacityProviderStrategyItem> capacity_provider_strategy;
  bool launch_type_given = false;
  // queue: a task of a provider that cannot be placed now waits in PROVISIONING (RunTask); false for the service
  // scheduler, whose replicas are retried by the service itself when capacity frees.
  bool queue = true;
  std::string fingerprint;  // the request as sent: a repeated clientToken must carry the same request
  PlacementPolicy policy;   // the server's, set by the router
};
struct RunTaskRequest : PlaceTasksRequest {
  static constexpr Access kAccess = Access::kWrite;
};
struct StartTaskRequest : PlaceTasksRequest {
  static constexpr Access kAccess = Access::kWrite;
};
struct StopTaskRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string cluster;
  std::string task;
  std::optional<std::string> reason;
};
struct DescribeTasksRequest {
  static constexpr Access kAccess = Access::kRead;
  std::string cluster;
  std::vector<std::string> tasks;
};
struct ListTasksRequest {
  static constexpr Access kAccess = Access::kRead;
  std::string cluster;
  std::optional<std::string> container_instance;
  std::optional<std::string> family;
  std::optional<std::string> started_by;
  std::optional<std::string> service_name;  // the tasks of this service (group "service:<name>")
  // desired_status: STOPPED lists the tasks desired STOPPED; RUNNING and PENDING both list the others (ECS's
  // PENDING and RUNNING tasks both have desiredStatus RUNNING).
  TaskStatus desired_status = TaskStatus::kRunning;
  PageRequest page;
};
// ---- services

// DeploymentConfigurationChange: the members of a deploymentConfiguration a request gave; the others keep their
// value (UpdateService) or their default (CreateService: 100/200 for REPLICA, 0/100 for DAEMON).
struct DeploymentConfigurationChange {
  std::optional<int> minimum_healthy_percent;
  std::optional<int> maximum_percent;
  std::optional<bool> circuit_breaker;
  std::optional<bool> rollback;
  DeploymentConfiguration ApplyTo(DeploymentConfiguration c) const {
    if (minimum_healthy_percent) c.minimum_healthy_percent = *minimum_healthy_percent;
    if (maximum_percent) c.maximum_percent = *maximum_percent;
    if (circuit_breaker) c.circuit_breaker = *circuit_breaker;
    if (rollback) c.rollback = *rollback;
    return c;
  }
};

// CreateService: ECS's fields gpupack honours; the parser refuses by name those it does not (load balancers,
// service registries, service connect, capacity providers, a deployment controller other than ECS, ...).
struct CreateServiceRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string cluster;
  std::string service_name;
  std::string task_definition;
  std::optional<int> desired_count;  // required for REPLICA; DAEMON takes none
  bool daemon = false;               // schedulingStrategy DAEMON
  std::vector<PlacementConstraint> constraints;
  std::vector<PlacementStrategy> strategies;
  std::vector<CapacityProviderStrategyItem> capacity_provider_strategy;
  bool launch_type_given = false;
  DeploymentConfigurationChange deployment_configuration;
  std::optional<std::string> client_token;
  std::vector<KeyValuePair> tags;
  PlacementPolicy policy;  // the server's, set by the router
};
struct UpdateServiceRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string cluster;
  std::string service;
  std::optional<int> desired_count;
  std::optional<std::string> task_definition;
  std::optional<std::vector<PlacementConstraint>> constraints;
  std::optional<std::vector<PlacementStrategy>> strategies;
  DeploymentConfigurationChange deployment_configuration;
  bool force_new_deployment = false;
};
struct DeleteServiceRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string cluster;
  std::string service;
  bool force = false;
};
struct DescribeServicesRequest {
  static constexpr Access kAccess = Access::kRead;
  std::string cluster;
  std::vector<std::string> services;  // 1..10 names or ARNs
  bool tags = false;                  // include: TAGS
};
struct ListServicesRequest {
  static constexpr Access kAccess = Access::kRead;
  std::string cluster;
  std::optional<bool> daemon;  // schedulingStrategy filter
  PageRequest page;            // maxResults 1..100, default 10 (ECS's)
};

// ---- capacity providers

struct CreateCapacityProviderRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string name;
  std::vector<KeyValuePair> tags;
};
// UpdateCapacityProvider: gpupack's providers have no Auto Scaling group settings to change; the call names the
// provider and answers it (autoScalingGroupProvider is refused by name by the parser).
struct UpdateCapacityProviderRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string name;  // name or ARN
};
struct DeleteCapacityProviderRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string capacity_provider;  // name or ARN
};
struct DescribeCapacityProvidersRequest {
  static constexpr Access kAccess = Access::kRead;
  std::vector<std::string> capacity_providers;  // names or ARNs; empty = all
  bool tags = false;                            // include: TAGS
  PageRequest page;                             // maxResults 1..10, default 10 (when none are named)
};
struct PutClusterCapacityProvidersRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string cluster;
  std::vector<std::string> capacity_providers;  // names
  std::vector<CapacityProviderStrategyItem> default_strategy;
};

// ExplainPlacement (ours): RunTask's placement without placing. It reads the applier's latest state (the
// placement code needs the whole cluster state), so it runs serialized with the writes but writes nothing.
struct ExplainPlacementRequest {
  static constexpr Access kAccess = Access::kRead;
  std::string cluster;
  std::string task_definition;
  TaskOverride overrides;
  std::vector<PlacementConstraint> constraints;
  std::vector<PlacementStrategy> strategies;
  std::optional<std::string> group;
  uint64_t seed = 0;
  PlacementPolicy policy;  // the server's, set by the router
};

// A task's state as an agent reports it, through the channel or through ECS's SubmitTaskStateChange. Both
// paths end in one ApplyTaskReport (engine/operations/task_reports.cc).
struct ContainerStateReport {
  std::optional<std::string> name;
  std::optional<TaskStatus> status;
  std::optional<int64_t> exit_code;
  std::optional<std::string> reason;
};
struct TaskStateReport {
  TaskStatus status = TaskStatus::kPending;
  std::optional<std::string> reason;
  std::optional<std::string> stop_code;
  bool has_containers = false;  // a containers list was sent (even empty): the task record is written
  std::vector<ContainerStateReport> containers;
};
struct SubmitTaskStateChangeRequest {
  static constexpr Access kAccess = Access::kWrite;
  AgentKey agent_key;  // set by the router from the caller, never from the body
  std::string cluster;
  std::string task;
  TaskStateReport report;
};
struct SubmitContainerStateChangeRequest {
  static constexpr Access kAccess = Access::kWrite;
  AgentKey agent_key;  // set by the router from the caller, never from the body
  std::string cluster;
  std::string task;
  std::string container_name;
  std::optional<TaskStatus> status;
  std::optional<int64_t> exit_code;
  std::optional<std::string> reason;
};

// ---- container instances

struct RegisterContainerInstanceRequest {
  static constexpr Access kAccess = Access::kWrite;
  AgentKey agent_key;      // set by the router from the caller, never from the body
  std::string agent_host;  // likewise: the one host agent_key may register, when its profile names one
  std::string cluster;
  std::optional<std::string> container_instance_arn;  // re-registration
  Resources total;
  std::vector<Gpu> gpus;  // platformDevices of type GPU
  std::vector<Attribute> attributes;
  std::optional<std::string> agent_version;  // versionInfo.agentVersion ("" when versionInfo has none)
  std::string ec2_instance_id;  // from instanceIdentityDocument
  std::string instance_type;
};
struct DeregisterContainerInstanceRequest {
  static constexpr Access kAccess = Access::kWrite;
  AgentKey agent_key;  // set by the router from the caller, never from the body
  std::string cluster;
  std::string container_instance;
  bool force = false;
};
struct DescribeContainerInstancesRequest {
  static constexpr Access kAccess = Access::kRead;
  std::string cluster;
  std::vector<std::string> container_instances;
};
struct ListContainerInstancesRequest {
  static constexpr Access kAccess = Access::kRead;
  std::string cluster;
  std::optional<std::string> filter;
  // status: only instances in this status (ACTIVE, DRAINING or REGISTERING). ECS's DEREGISTERING and
  // REGISTRATION_FAILED are accepted and set status_matches_none instead: no instance here is ever in them.
  std::optional<InstanceStatus> status;
  bool status_matches_none = false;
  PageRequest page;
};
struct UpdateContainerInstancesStateRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string cluster;
  std::vector<std::string> container_instances;
  InstanceStatus status = InstanceStatus::kActive;  // ACTIVE (which also accepts a REGISTERING one) or DRAINING
};

// ---- attributes

struct AttributeTarget {
  Attribute attribute;
  std::string target_id;  // an instance id or ARN
};
struct PutAttributesRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string cluster;
  std::vector<AttributeTarget> attributes;
};
struct DeleteAttributesRequest {
  static constexpr Access kAccess = Access::kWrite;
  std::string cluster;
  std::vector<AttributeTarget> attributes;
};
struct ListAttributesRequest {
  static constexpr Access kAccess = Access::kRead;
  std::string cluster;
  std::optional<std::string> attribute_name;
  std::optional<std::string> attribute_value;
  PageRequest page;
};

}  // namespace gpupack::api
