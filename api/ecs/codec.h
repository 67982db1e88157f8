// The ECS JSON 1.1 codec: ECS request/response shapes <-> the domain model.
//
// Parsing never throws to its caller: every function returns a Result whose error names the field and what
// was wrong ("taskDefinition.containerDefinitions[1].cpu: expected an integer, got a string"). Rendering is
// total. Timestamps (epoch seconds as JSON numbers) are formed here; ARNs by ArnContext (scheduler/arn.h).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/arn.h"
#include "scheduler/cluster_state.h"
#include "scheduler/model.h"
#include "scheduler/placement.h"
#include "base/status.h"

namespace gpupack::api {

using Json = nlohmann::json;

// ---- requests

Result<TaskDefinition> ParseRegisterTaskDefinition(const Json& body);
Result<TaskOverride> ParseTaskOverride(const Json& overrides, const std::string& path);
Result<std::vector<PlacementConstraint>> ParsePlacementConstraints(const Json& body, const std::string& key);
Result<std::vector<PlacementStrategy>> ParsePlacementStrategies(const Json& body, const std::string& key);
Result<std::vector<KeyValuePair>> ParseTags(const Json& body);
Result<std::vector<Attribute>> ParseAttributes(const Json& list, const std::string& path);

// ---- responses

Json ToJson(const ArnContext& ctx, const Cluster& cluster, const ClusterCounts& counts);
Json ToJson(const TaskDefinition& td);
Json ToJson(const ArnContext& ctx, const Task& task);
Json ToJson(const TaskOverride& overrides);  // a task's "overrides", as DescribeTasks answers it
Json ToJson(const ContainerInstance& instance);
Json ToJson(const PlacementFailure& failure);
// A service as DescribeServices answers it; its tags only when `tags` (include: TAGS).
Json ToJson(const ArnContext& ctx, const Service& service, bool tags);
Json ToJson(const std::vector<CapacityProviderStrategyItem>& strategy);  // capacityProviderStrategy
Json ToJson(const CapacityProvider& provider, bool tags);
Json ToJson(const std::vector<KeyValuePair>& tags, bool as_tags);

// Epoch milliseconds -> ECS epoch seconds (a JSON number with millisecond precision).
Json EpochSeconds(EpochMs ms);

}  // namespace gpupack::api
