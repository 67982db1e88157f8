// Resolving references (names, short ids, ARNs) against a state: the working ClusterState for writes, a
// ReadView for reads. Both offer the same lookups, so each rule is written once.
#pragma once

#include <string>

#include "scheduler/arn.h"
#include "base/status.h"

namespace gpupack::api {

// ActiveCluster: the ACTIVE cluster `ref` names (empty = "default"), else ClusterNotFoundException.
template <typename State>
Result<const Cluster*> ActiveCluster(const State& state, const ArnContext& arn, const std::string& ref) {
  GP_ASSIGN(name, ClusterNameFrom(arn, ref));
  const Cluster* c = state.FindCluster(name);
  if (!c || c->status != LifecycleStatus::kActive) return Status::ClusterNotFound("Cluster not found: " + name);
  return c;
}

// ResolveTaskDefinition: "family" (latest ACTIVE revision), "family:revision" or an ARN.
template <typename State>
Result<const TaskDefinition*> ResolveTaskDefinition(const State& state, const ArnContext& arn, const std::string& ref) {
  GP_ASSIGN(r, TaskDefinitionRefFrom(arn, ref));
  const TaskDefinition* td = r.revision ? state.FindTaskDefinition(r.family, r.revision) : state.LatestActiveRevision(r.family);
  if (!td) return Status::Client("Unable to describe task definition '" + ref.substr(0, 300) + "': not found");
  return td;
}

template <typename State>
Result<const Task*> ResolveTask(const State& state, const ArnContext& arn, const std::string& cluster,
                                const std::string& ref) {
  GP_ASSIGN(id, ResourceIdFrom(arn, "task", ref, cluster));
  const Task* t = state.FindTask(arn.TaskArn(cluster, id));
  if (!t) return Status::InvalidParameter("The referenced task was not found: " + ref.substr(0, 300));
  return t;
}

// ResolveInstance: a registered (not INACTIVE) container instance of `cluster`.
template <typename State>
Result<const ContainerInstance*> ResolveInstance(const State& state, const ArnContext& arn, const std::string& cluster,
                                                 const std::string& ref) {
  GP_ASSIGN(id, ResourceIdFrom(arn, "container-instance", ref, cluster));
  const ContainerInstance* inst = state.FindInstance(arn.InstanceArn(cluster, id));
  if (!inst || inst->status == InstanceStatus::kInactive)
    return Status::InvalidParameter("The referenced container instance was not found: " + ref.substr(0, 300));
  return inst;
}

}  // namespace gpupack::api
