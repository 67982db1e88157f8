#include "engine/core/follow.h"

#include <memory>
#include <vector>

#include "scheduler/holdings.h"

namespace gpupack::api {
namespace {

// AtBaseline: the instance as a load rebuilds it before any reservation (ClusterState::RebuildReservations).
ContainerInstance AtBaseline(ContainerInstance inst) {
  ResetHoldings(inst);
  return inst;
}

// Unhold: the task stops holding anything and leaves every index (its record stays, released).
void Unhold(ClusterState& state, const Task& old) {
  if (!old.resources_released) state.ReleaseTask(old.arn);
  if (old.last_status == TaskStatus::kProvisioning) {  // leave the line of waiting tasks
    Task gone = old;
    gone.resources_released = true;
    gone.last_status = TaskStatus::kStopped;
    state.PutTask(std::move(gone));
  }
}

// PutInstance stores the instance and holds again, on its new record, what its tasks held on the old one.
Status PutInstance(ClusterState& state, const ContainerInstance& inst) {
  if (!state.FindInstance(inst.arn)) {
    state.PutInstance(AtBaseline(inst));
    return Status::Ok();
  }
  std::vector<Task> held;
  for (const std::string& arn : state.LoadOf(inst.arn).task_arns)
    if (std::shared_ptr<const Task> t = state.SharedTask(arn)) held.push_back(*t);
  for (const Task& t : held) state.ReleaseTask(t.arn);
  state.PutInstance(AtBaseline(inst));
  for (Task& t : held) {
    if (Status s = state.EraseStoppedTask(t.arn); !s.ok()) return s;
    if (Status s = state.ReserveTask(std::move(t)); !s.ok()) return s;
  }
  return Status::Ok();
}

Status PutTask(ClusterState& state, const Task& task, FollowedChanges& touched) {
  if (std::shared_ptr<const Task> old = state.SharedTask(task.arn)) {
    if (!old->resources_released) touched.TouchInstance(old->container_instance_arn);
    Unhold(state, *old);
    if (!task.resources_released) {
      if (Status s = state.EraseStoppedTask(task.arn); !s.ok()) return s;
    }
  }
  if (task.resources_released) {
    state.PutTask(task);
  } else {
    if (Status s = state.ReserveTask(task); !s.ok()) return s;
    touched.TouchInstance(task.container_instance_arn);
  }
  return Status::Ok();
}

}  // namespace

Status ApplyCommitted(ClusterState& state, const WriteBatch& batch, FollowedChanges& touched) {
  if (batch.replaces_everything()) return Status::Server("the change replaces the whole state");
  if (!batch.deleted_instances().empty()) return Status::Server("the change deletes container instances");
  ++touched.batches;
  for (const Cluster& c : batch.clusters()) {
    state.PutCluster(c);
    touched.clusters.insert(c.name);
  }
  for (const TaskDefinition& td : batch.task_definitions()) {
    state.PutTaskDefinition(td);
    touched.task_definitions.insert({td.family, td.revision});
  }
  for (const ContainerInstance& inst : batch.instances()) {
    if (Status s = PutInstance(state, inst); !s.ok()) return s;
    touched.TouchInstance(inst.arn);
  }
  for (const Task& t : batch.tasks()) {
    if (Status s = PutTask(state, t, touched); !s.ok()) return s;
    touched.tasks.insert(t.arn);
  }
  for (const std::string& arn : batch.deleted_tasks()) {
    if (std::shared_ptr<const Task> old = state.SharedTask(arn)) {
      if (!old->resources_released) touched.TouchInstance(old->container_instance_arn);
      Unhold(state, *old);
      if (Status s = state.EraseStoppedTask(arn); !s.ok()) return s;
    }
    touched.tasks.insert(arn);
  }
  for (const ClientTokenRecord& ct : batch.client_tokens()) state.PutClientToken(ct);
  for (const auto& [cluster, token] : batch.deleted_client_tokens()) state.EraseClientToken(cluster, token);
  for (const Service& svc : batch.services()) {
    state.PutService(svc);
    touched.services.insert(svc.arn);
  }
  for (const CapacityProvider& p : batch.capacity_providers()) {
    state.PutCapacityProvider(p);
    touched.capacity_providers.insert(p.name);
  }
  return Status::Ok();
}

ViewDelta DeltaOf(const ClusterState& state, const FollowedChanges& touched) {
  ViewDelta delta;
  for (const auto& name : touched.clusters)
    if (const Cluster* c = state.FindCluster(name)) delta.clusters.push_back(*c);
  for (const auto& [family, revision] : touched.task_definitions)
    if (const TaskDefinition* td = state.FindTaskDefinition(family, revision))
      delta.task_definitions.push_back(std::make_shared<const TaskDefinition>(*td));
  for (const auto& arn : touched.instances)
    if (const ContainerInstance* inst = state.FindInstance(arn)) {
      auto rec = std::make_shared<InstanceRecord>();
      rec->instance = *inst;
      rec->load.group_counts = state.LoadOf(*inst).group_counts;
      delta.instances.push_back(std::move(rec));
    }
  for (const auto& arn : touched.tasks) {
    if (auto t = state.SharedTask(arn)) delta.tasks.push_back(std::move(t));
    else delta.erased_tasks.push_back(arn);
  }
  for (const auto& arn : touched.services)
    if (const Service* svc = state.FindService(arn)) delta.services.push_back(std::make_shared<const Service>(*svc));
  for (const auto& name : touched.capacity_providers)
    if (const CapacityProvider* p = state.FindCapacityProvider(name)) delta.capacity_providers.push_back(*p);
  return delta;
}

}  // namespace gpupack::api
