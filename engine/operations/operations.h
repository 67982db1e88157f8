// The ECS operations, one file per resource (clusters.cc, task_definitions.cc, tasks.cc,
// container_instances.cc, attributes.cc) plus the agents' reports (task_reports.cc). Each holds ECS's rules for
// its resource and nothing else: no JSON, no locks, no storage.
//
//   write:  Status Op(const XRequest&, Transaction&, Result&)   run by the applier, serialized
//   read:   Status Op(const XRequest&, const ReadContext&, Result&)  on a published read view, any thread
//
// api/ecs/router.cc maps each X-Amz-Target to one of these with its parser and renderer.
#pragma once

#include "scheduler/arn.h"
#include "engine/core/read_view.h"
#include "engine/core/requests.h"
#include "engine/core/results.h"
#include "engine/core/transaction.h"

namespace gpupack::api {

// ReadContext: what a read operation may look at.
struct ReadContext {
  const ReadView& view;
  const ArnContext& arn;
};

// ---- clusters
Status CreateCluster(const CreateClusterRequest& in, Transaction& txn, ClusterResult& out);
Status DeleteCluster(const DeleteClusterRequest& in, Transaction& txn, ClusterResult& out);
Status UpdateClusterSettings(const UpdateClusterSettingsRequest& in, Transaction& txn, ClusterResult& out);
Status DescribeClusters(const DescribeClustersRequest& in, const ReadContext& ctx, ClustersResult& out);
Status ListClusters(const ListClustersRequest& in, const ReadContext& ctx, ListPage& out);

// ---- task definitions
Status RegisterTaskDefinition(const RegisterTaskDefinitionRequest& in, Transaction& txn, TaskDefinitionResult& out);
Status DeregisterTaskDefinition(const DeregisterTaskDefinitionRequest& in, Transaction& txn,
                                TaskDefinitionResult& out);
Status DescribeTaskDefinition(const DescribeTaskDefinitionRequest& in, const ReadContext& ctx,
                              TaskDefinitionResult& out);
Status ListTaskDefinitions(const ListTaskDefinitionsRequest& in, const ReadContext& ctx, ListPage& out);
Status ListTaskDefinitionFamilies(const ListTaskDefinitionFamiliesRequest& in, const ReadContext& ctx, ListPage& out);

// ---- tasks
Status RunTask(const RunTaskRequest& in, Transaction& txn, TasksResult& out);
Status StartTask(const StartTaskRequest& in, Transaction& txn, TasksResult& out);
Status StopTask(const StopTaskRequest& in, Transaction& txn, TaskResult& out);
Status DescribeTasks(const DescribeTasksRequest& in, const ReadContext& ctx, TasksResult& out);
Status ListTasks(const ListTasksRequest& in, const ReadContext& ctx, ListPage& out);
// ExplainPlacement reads the applier's working state (see ExplainPlacementRequest).
Status ExplainPlacement(const ExplainPlacementRequest& in, const ClusterState& state, const ArnContext& arn,
                        ExplainResult& out);
// PlacementRequestFor: the placement request of a RunTask, StartTask, ExplainPlacement or waiting task, with the
// server's placement policy.
PlacementRequest PlacementRequestFor(const Cluster& cluster, const TaskDefinition& td, const TaskOverride& overrides,
                                     const std::vector<PlacementConstraint>& constraints,
                                     const std::vector<PlacementStrategy>& strategies,
                                     const std::optional<std::string>& group, uint64_t seed,
                                     const PlacementPolicy& policy, const std::string& capacity_provider = "",
                                     const std::string& held_instance = "");
// kClientTokenRetentionMs: how long a RunTask/StartTask clientToken is remembered (docs/api.md): a repeat within
// it answers the first request's tasks, later the token is new again.
inline constexpr EpochMs kClientTokenRetentionMs = 24 * 3'600'000;

// PurgeExpired forgets STOPPED tasks older than `retention_ms` and clientToken records older than
// kClientTokenRetentionMs, in the state and in the store (run by the applier at most once a minute). The tasks
// come from ClusterState::StoppedTasks and the records from ClusterState::ClientTokensByAge: it reads the expired
// ones, not every task or record.
void PurgeExpired(Transaction& txn, EpochMs retention_ms);

// ---- task state reports (agents)
// ApplyTaskReport applies what an agent reports about a task on `instance_arn` ("" = any instance): the
// ECS SubmitTaskStateChange call and the channel's state reports and hellos all end here.
Status ApplyTaskReport(const std::string& task_arn, const TaskStateReport& report, Transaction& txn);
Status SubmitTaskStateChange(const SubmitTaskStateChangeRequest& in, Transaction& txn, AckResult& out);
Status SubmitContainerStateChange(const SubmitContainerStateChangeRequest& in, Transaction& txn, AckResult& out);
// StopTaskRecord marks a task for stopping: a PENDING task that no connected agent holds stops at once;
// otherwise its agent is asked and reports STOPPED when the containers are gone.
void StopTaskRecord(const std::string& task_arn, const std::string& stop_code, const std::string& reason,
                    Transaction& txn);
// FinishStop records a task STOPPED now and releases what it held.
void FinishStop(const std::string& task_arn, Transaction& txn);
// AssignmentFor: what an agent needs to start `task` (command, environment, limits and GPUs per container).
protocol::Assignment AssignmentFor(const Task& task, const ClusterState& state, const ArnContext& arn);

// ---- container instances
// CheckAgentKey: an agent key acts only for the instances it registered; AccessDeniedException naming `action`
// (as AWS words it) otherwise. No key (an admin key, or a server without --credentials) may act for any.
Status CheckAgentKey(const ContainerInstance& inst, const AgentKey& agent_key, std::string_view action);
Status RegisterContainerInstance(const RegisterContainerInstanceRequest& in, Transaction& txn, InstanceResult& out);
Status DeregisterContainerInstance(const DeregisterContainerInstanceRequest& in, Transaction& txn,
                                   InstanceResult& out);
Status DescribeContainerInstances(const DescribeContainerInstancesRequest& in, const ReadContext& ctx,
                                  InstancesResult& out);
Status ListContainerInstances(const ListContainerInstancesRequest& in, const ReadContext& ctx, ListPage& out);
Status UpdateContainerInstancesState(const UpdateContainerInstancesStateRequest& in, Transaction& txn,
                                     InstancesResult& out);
// SortAttributes: by name, one per name (the last one given wins): how an instance keeps its attributes.
void SortAttributes(std::vector<Attribute>& attrs);
// kMaxInstanceAttributes: what one container instance may hold (ECS's 10 custom attributes per resource, its
// own ecs.* ones and an agent's), so no instance, and no answer that lists it, grows without bound.
inline constexpr size_t kMaxInstanceAttributes = 100;
// CheckAttributeCount: InvalidParameterException when `attrs` (sorted, unique) pass kMaxInstanceAttributes.
Status CheckAttributeCount(const std::vector<Attribute>& attrs, const std::string& instance_id);
// UsesChannel: the instance's agent holds a channel (it registered the channel attribute).
bool UsesChannel(const ContainerInstance& instance);

// ---- services (services.cc: the API; service_scheduler.cc: what keeps them running)
Status CreateService(const CreateServiceRequest& in, Transaction& txn, ServiceResult& out);
Status UpdateService(const UpdateServiceRequest& in, Transaction& txn, ServiceResult& out);
Status DeleteService(const DeleteServiceRequest& in, Transaction& txn, ServiceResult& out);
Status DescribeServices(const DescribeServicesRequest& in, const ReadContext& ctx, ServicesResult& out);
Status ListServices(const ListServicesRequest& in, const ReadContext& ctx, ListPage& out);
// NewDeployment: a PRIMARY deployment of `task_definition_arn`, IN_PROGRESS, with a new "ecs-svc/<19 digits>" id.
ServiceDeployment NewDeployment(Transaction& txn, const std::string& task_definition_arn, int desired_count);
// ReconcileServices: the service scheduler. The applier runs it after every write operation, in the same
// transaction: it starts and stops the tasks of the services the write concerns (service_scheduler.cc says
// which) with `policy` for placement.
void ReconcileServices(Transaction& txn, const PlacementPolicy& policy);
// WakeServices marks the services whose restart back-off has ended (the applier runs it before each write and
// when the earliest back-off ends); MarkAllServices marks every service that is not INACTIVE (after a load, so
// a restarted or newly elected server picks up where the last one stopped).
void WakeServices(Transaction& txn);
void MarkAllServices(Transaction& txn);

// ---- capacity providers (capacity_providers.cc: the API; capacity_queue.cc: the tasks waiting for capacity)
Status CreateCapacityProvider(const CreateCapacityProviderRequest& in, Transaction& txn, CapacityProviderResult& out);
Status UpdateCapacityProvider(const UpdateCapacityProviderRequest& in, Transaction& txn, CapacityProviderResult& out);
Status DeleteCapacityProvider(const DeleteCapacityProviderRequest& in, Transaction& txn, CapacityProviderResult& out);
Status DescribeCapacityProviders(const DescribeCapacityProvidersRequest& in, const ReadContext& ctx,
                                 CapacityProvidersResult& out);
Status PutClusterCapacityProviders(const PutClusterCapacityProvidersRequest& in, Transaction& txn,
                                   ClusterResult& out);
// StrategyFor: the capacity provider strategy a RunTask or a CreateService uses: `given`, else none when a
// launchType was given, else the cluster's default; checked against the cluster (ECS's rules and messages).
Result<std::vector<CapacityProviderStrategyItem>> StrategyFor(const ClusterState& state, const Cluster& cluster,
                                                              const std::vector<CapacityProviderStrategyItem>& given,
                                                              bool launch_type_given);
// ProvidersForTasks: the provider of each of `count` tasks of one request: the item with a base takes the first
// `base` tasks, the rest go by weight (smooth weighted round robin: each provider's share is its weight over
// the sum, in an interleaved order). `strategy` is checked (StrategyFor).
std::vector<std::string> ProvidersForTasks(const std::vector<CapacityProviderStrategyItem>& strategy, int64_t count);
// PriorityOf: a task's kPriorityTag (0 when absent), or InvalidParameterException for a value that is not an
// integer in -1000..1000.
Result<int> PriorityOf(const std::vector<KeyValuePair>& tags);
// PlaceWaitingTasks: the queue. The applier runs it after every write, in the same transaction: for each cluster
// where the write may have freed capacity (a task released its reservations, an instance record changed), it
// places each line's waiting tasks from the head until one does not fit, then backfills behind the head
// (capacity_queue.cc says how far, and what a head's reservation holds back).
void PlaceWaitingTasks(Transaction& txn, const PlacementPolicy& policy);
// HeldInstance: the instance held for the head of `provider`'s line in `cluster` ("" = none): once the head has
// waited policy.reservation_after_ms (and its team is within its quotas), the provider's instance where it will
// fit soonest. No task of the provider but the head is placed there.
std::string HeldInstance(const ClusterState& state, const ArnContext& arn, const std::string& cluster,
                         const std::string& provider, EpochMs now, const PlacementPolicy& policy);
// kQuotaReason: failures[].reason of a task through a provider that fit an instance but would pass a quota (a
// service's task; RunTask's wait instead).
inline constexpr char kQuotaReason[] = "QUOTA:GPU_MEMORY";
// QuotaOf: a quota tag's value (MiB of GPU memory), or InvalidParameterException.
Result<MiB> QuotaOf(const KeyValuePair& tag);
// QuotaExcess: why `more` MiB of GPU memory more for a task of `team` through `provider` would pass one of the
// provider's quotas (kQuotaTag, kQuotaTag:TEAM), in words; "" when it stays within them.
std::string QuotaExcess(const ClusterState& state, const std::string& provider, const std::string& team, MiB more);
// QuotaExcessOf: the same for a provider record and the GPU memory its tasks hold (the console's read view).
std::string QuotaExcessOf(const CapacityProvider& provider, const ClusterState::ProviderUsage& usage,
                          const std::string& team, MiB more);
// SoonestFitScore: how close `instance` is to taking a task of demand `d` (HeldInstance's rule; higher = sooner):
// shared GPU: the most remaining memory on one GPU that can share and could ever hold it; dedicated: its idle
// GPUs; no GPU: its free memory. -1 when it takes no tasks or could never hold the task.
int64_t SoonestFitScore(const ContainerInstance& instance, const TaskDemand& d, bool place_on_disconnected);
// ShapeKey: what decides whether a waiting task fits (definition, demand, group, team, constraints): two tasks of
// one key fit, or do not, in the same places.
std::string ShapeKey(const Task& task, const TaskDemand& demand);
// ExpireWaitingTasks: waiting tasks older than policy.provisioning_timeout_ms stop (TaskFailedToStart). The
// applier runs it before each write and when the oldest waiting task's time is up.
void ExpireWaitingTasks(Transaction& txn, const PlacementPolicy& policy);

// ---- attributes
Status PutAttributes(const PutAttributesRequest& in, Transaction& txn, AttributesResult& out);
Status DeleteAttributes(const DeleteAttributesRequest& in, Transaction& txn, AttributesResult& out);
Status ListAttributes(const ListAttributesRequest& in, const ReadContext& ctx, AttributesResult& out);

}  // namespace gpupack::api
