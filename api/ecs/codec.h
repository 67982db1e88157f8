// The ECS JSON 1.1 codec: ECS request/response shapes <-> the domain model.
//
// Parsing never throws to its caller: every function returns a Result whose error names the field and what
// was wrong ("taskDefinition.containerDefinitions[1].cpu: expected an integer, got a string"). Rendering is
// total. ARNs and timestamps (epoch seconds as JSON numbers) are formed here and nowhere else.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/cluster_state.h"
#include "scheduler/model.h"
#include "scheduler/placement.h"
#include "base/status.h"

namespace gpupack::api {

using Json = nlohmann::json;

// Region and account the server speaks for; every ARN carries them.
struct ArnContext {
  std::string region = "us-east-1";
  std::string account = "000000000000";

  std::string Prefix() const { return "arn:aws:ecs:" + region + ":" + account + ":"; }
  std::string ClusterArn(const std::string& name) const { return Prefix() + "cluster/" + name; }
  std::string InstanceArn(const std::string& cluster, const std::string& id) const {
    return Prefix() + "container-instance/" + cluster + "/" + id;
  }
  std::string TaskArn(const std::string& cluster, const std::string& id) const {
    return Prefix() + "task/" + cluster + "/" + id;
  }
  std::string TaskDefinitionArn(const std::string& family, int revision) const {
    return Prefix() + "task-definition/" + family + ":" + std::to_string(revision);
  }
  std::string ContainerArn(const std::string& cluster, const std::string& task_id, const std::string& name) const {
    return Prefix() + "container/" + cluster + "/" + task_id + "/" + name;
  }
};

// Resolves the `cluster` parameter (name or ARN; empty = "default") to a name. Refuses ARNs of another
// region or account and malformed names (InvalidParameterException).
Result<std::string> ClusterNameFrom(const ArnContext& ctx, const std::string& name_or_arn);

// Resolves a task or container-instance reference (id or ARN, old-style ARNs without the cluster too) to its
// id. `kind` is "task" or "container-instance". With `cluster` given, an ARN that names another cluster is
// refused (InvalidParameterException) rather than read as the same id in `cluster`.
Result<std::string> ResourceIdFrom(const ArnContext& ctx, const std::string& kind, const std::string& ref,
                                   const std::string& cluster = "");

// Resolves "family", "family:revision" or a task-definition ARN.
struct TaskDefinitionRef {
  std::string family;
  int revision = 0;  // 0 = latest ACTIVE
};
Result<TaskDefinitionRef> TaskDefinitionRefFrom(const ArnContext& ctx, const std::string& ref);

// ---- requests

Result<TaskDefinition> ParseRegisterTaskDefinition(const Json& body);
Result<TaskOverride> ParseTaskOverride(const Json& overrides, const std::string& path);
Result<std::vector<PlacementConstraint>> ParsePlacementConstraints(const Json& body, const std::string& key);
Result<std::vector<PlacementStrategy>> ParsePlacementStrategies(const Json& body, const std::string& key);
Result<std::vector<KeyValuePair>> ParseTags(const Json& body);
Result<std::vector<Attribute>> ParseAttributes(const Json& list, const std::string& path);

// ---- responses

// ClusterCounts: what DescribeClusters counts over a cluster's instances that are not INACTIVE.
struct ClusterCounts {
  int registered_instances = 0;
  int running_tasks = 0;
  int pending_tasks = 0;
};

Json ToJson(const ArnContext& ctx, const Cluster& cluster, const ClusterCounts& counts);
Json ToJson(const TaskDefinition& td);
Json ToJson(const ArnContext& ctx, const Task& task);
Json ToJson(const ContainerInstance& instance);
Json ToJson(const PlacementFailure& failure);
Json ToJson(const std::vector<KeyValuePair>& tags, bool as_tags);

// Epoch milliseconds -> ECS epoch seconds (a JSON number with millisecond precision).
Json EpochSeconds(EpochMs ms);

// ---- typed field access (used by the operation handlers)
//
// Each getter checks the type of body[key] when present and returns the error "<path>: expected <type>".
Result<std::optional<std::string>> OptString(const Json& body, const std::string& key);
Result<std::optional<int64_t>> OptInt(const Json& body, const std::string& key);
Result<std::optional<bool>> OptBool(const Json& body, const std::string& key);
Result<std::vector<std::string>> OptStringList(const Json& body, const std::string& key);

}  // namespace gpupack::api
