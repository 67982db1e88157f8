// ArnContext and the reference resolvers: the string rules of the domain's ARNs (region and account, the
// cluster, task, container-instance and task-definition forms) and of the names and ids inside them. Pure: the
// engine resolves the references a request names with them and the ECS codec forms ARNs with them.
#pragma once

#include <string>

#include "base/status.h"

namespace gpupack {

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
  std::string ServiceArn(const std::string& cluster, const std::string& name) const {
    return Prefix() + "service/" + cluster + "/" + name;
  }
  std::string ContainerArn(const std::string& cluster, const std::string& task_id, const std::string& name) const {
    return Prefix() + "container/" + cluster + "/" + task_id + "/" + name;
  }
  std::string CapacityProviderArn(const std::string& name) const { return Prefix() + "capacity-provider/" + name; }
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

}  // namespace gpupack
