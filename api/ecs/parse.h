// Parse: the JSON 1.1 body of each ECS operation into its typed request (engine/core/requests.h). Errors name the
// field; what needs the cluster's state is left to the operation.
#pragma once

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/core/requests.h"

namespace gpupack::api {

using Json = nlohmann::json;

Result<CreateClusterRequest> ParseCreateCluster(const Json& in);
Result<DeleteClusterRequest> ParseDeleteCluster(const Json& in);
Result<UpdateClusterSettingsRequest> ParseUpdateClusterSettings(const Json& in);
Result<DescribeClustersRequest> ParseDescribeClusters(const Json& in);
Result<ListClustersRequest> ParseListClusters(const Json& in);
Result<RegisterTaskDefinitionRequest> ParseRegisterTaskDefinitionRequest(const Json& in);
Result<DeregisterTaskDefinitionRequest> ParseDeregisterTaskDefinition(const Json& in);
Result<DescribeTaskDefinitionRequest> ParseDescribeTaskDefinition(const Json& in);
Result<ListTaskDefinitionsRequest> ParseListTaskDefinitions(const Json& in);
Result<ListTaskDefinitionFamiliesRequest> ParseListTaskDefinitionFamilies(const Json& in);
Result<RunTaskRequest> ParseRunTask(const Json& in);
Result<StartTaskRequest> ParseStartTask(const Json& in);
Result<StopTaskRequest> ParseStopTask(const Json& in);
Result<DescribeTasksRequest> ParseDescribeTasks(const Json& in);
Result<ListTasksRequest> ParseListTasks(const Json& in);
Result<ExplainPlacementRequest> ParseExplainPlacement(const Json& in);
Result<SubmitTaskStateChangeRequest> ParseSubmitTaskStateChange(const Json& in);
Result<SubmitContainerStateChangeRequest> ParseSubmitContainerStateChange(const Json& in);
Result<RegisterContainerInstanceRequest> ParseRegisterContainerInstance(const Json& in);
Result<DeregisterContainerInstanceRequest> ParseDeregisterContainerInstance(const Json& in);
Result<DescribeContainerInstancesRequest> ParseDescribeContainerInstances(const Json& in);
Result<ListContainerInstancesRequest> ParseListContainerInstances(const Json& in);
Result<UpdateContainerInstancesStateRequest> ParseUpdateContainerInstancesState(const Json& in);
Result<PutAttributesRequest> ParsePutAttributes(const Json& in);
Result<DeleteAttributesRequest> ParseDeleteAttributes(const Json& in);
Result<ListAttributesRequest> ParseListAttributes(const Json& in);
Result<CreateServiceRequest> ParseCreateService(const Json& in);
Result<UpdateServiceRequest> ParseUpdateService(const Json& in);
Result<DeleteServiceRequest> ParseDeleteService(const Json& in);
Result<DescribeServicesRequest> ParseDescribeServices(const Json& in);
Result<ListServicesRequest> ParseListServices(const Json& in);
// capacity providers (parse_capacity.cc); ParseCapacityProviderStrategy reads the strategy list `key` of `in`.
Result<std::vector<CapacityProviderStrategyItem>> ParseCapacityProviderStrategy(const Json& in, const char* key);
Result<CreateCapacityProviderRequest> ParseCreateCapacityProvider(const Json& in);
Result<UpdateCapacityProviderRequest> ParseUpdateCapacityProvider(const Json& in);
Result<DeleteCapacityProviderRequest> ParseDeleteCapacityProvider(const Json& in);
Result<DescribeCapacityProvidersRequest> ParseDescribeCapacityProviders(const Json& in);
Result<PutClusterCapacityProvidersRequest> ParsePutClusterCapacityProviders(const Json& in);

}  // namespace gpupack::api
