// Container instances: RegisterContainerInstance, DeregisterContainerInstance, DescribeContainerInstances,
// ListContainerInstances, UpdateContainerInstancesState.
#include <algorithm>

#include "engine/operations/operations.h"
#include "engine/operations/resolve.h"
#include "scheduler/query.h"

namespace gpupack::api {

void SortAttributes(std::vector<Attribute>& attrs) {
  std::stable_sort(attrs.begin(), attrs.end(), [](const Attribute& a, const Attribute& b) { return a.name < b.name; });
  std::vector<Attribute> unique;
  for (auto& a : attrs) {
    if (!unique.empty() && unique.back().name == a.name) unique.back() = std::move(a);
    else unique.push_back(std::move(a));
  }
  attrs = std::move(unique);
}

Status CheckAttributeCount(const std::vector<Attribute>& attrs, const std::string& instance_id) {
  if (attrs.size() <= kMaxInstanceAttributes) return Status::Ok();
  return Status::InvalidParameter("container instance " + instance_id.substr(0, 64) + " would hold " +
                                  std::to_string(attrs.size()) + " attributes; at most " +
                                  std::to_string(kMaxInstanceAttributes) +
                                  " are kept per instance (remove some with DeleteAttributes)");
}

namespace {

std::shared_ptr<const ContainerInstance> Copy(const ClusterState& state, const std::string& arn) {
  return std::make_shared<const ContainerInstance>(*state.FindInstance(arn));
}

// InstanceOfKey: the instance an agent key registered that is not deregistered (at most one), or null. A walk of
// the instances, paid only by a registration of a new instance with an agent key.
const ContainerInstance* InstanceOfKey(const ClusterState& state, const std::string& agent_key) {
  const ContainerInstance* found = nullptr;
  state.ForEachInstance([&](const ContainerInstance& inst) {
    if (found == nullptr && inst.status != InstanceStatus::kInactive && inst.registered_by == agent_key)
      found = &inst;
  });
  return found;
}

// BoundInstance: for a registration of a new instance with an agent key, the instance the key already holds.
// The same host (instanceId) in the same cluster registering again (an agent that lost its --state-dir) gets
// that instance back; any other is refused: an agent key registers one container instance, so a key copied off
// a host cannot add a look-alike host that would draw other people's tasks (docs/security.md).
Result<const ContainerInstance*> BoundInstance(const ClusterState& state, const RegisterContainerInstanceRequest& in,
                                               const std::string& cluster) {
  if (!in.agent_key) return static_cast<const ContainerInstance*>(nullptr);
  const ContainerInstance* bound = InstanceOfKey(state, *in.agent_key);
  if (bound == nullptr) return bound;
  if (bound->cluster == cluster && !in.ec2_instance_id.empty() && bound->ec2_instance_id == in.ec2_instance_id)
    return bound;
  return Status(ErrorCode::kAccessDenied,
                "User: " + in.agent_key->substr(0, 128) + " (gpupack_role agent) is not authorized to perform: "
                "ecs:RegisterContainerInstance for host '" + in.ec2_instance_id.substr(0, 64) +
                "': this agent key is bound to container instance " + bound->arn + " (host '" +
                bound->ec2_instance_id + "'), and an agent key registers one container instance. Give each "
                "host its own key (gpupack keys issue-agent --host NAME), or deregister " + bound->id + " first");
}

// CheckBoundHost: a key whose profile names its host (gpupack_host) registers that host only, from its first use
// on: a key copied off a host before its agent ever ran cannot bring up a look-alike under another name. The
// host is the registration's instanceId (the agent's --name), which is also what BoundInstance compares.
Status CheckBoundHost(const RegisterContainerInstanceRequest& in) {
  if (!in.agent_key || in.agent_host.empty() || in.ec2_instance_id == in.agent_host) return Status::Ok();
  return Status(ErrorCode::kAccessDenied,
                "User: " + in.agent_key->substr(0, 128) + " (gpupack_role agent) is not authorized to perform: "
                "ecs:RegisterContainerInstance for host '" + in.ec2_instance_id.substr(0, 64) +
                "': this agent key is bound to host '" + in.agent_host + "' (gpupack_host in the server's "
                "credentials file), and registers that host only. Give each host its own key (gpupack keys "
                "issue-agent --host NAME), or run this host's agent with --name " + in.agent_host);
}

}  // namespace

// RegisterContainerInstance: a new instance, or (containerInstanceArn given) a re-registration that keeps the
// instance's tasks, its agent connection and its fault holds.
Status CheckAgentKey(const ContainerInstance& inst, const AgentKey& agent_key, std::string_view action) {
  if (!agent_key || inst.registered_by == *agent_key) return Status::Ok();
  return Status(ErrorCode::kAccessDenied,
                "User: " + agent_key->substr(0, 128) + " (gpupack_role agent) is not authorized to perform: " +
                    std::string(action) + " on resource: " + inst.arn +
                    " (an agent key acts only for the container instances it registered)");
}

Status RegisterContainerInstance(const RegisterContainerInstanceRequest& in, Transaction& txn, InstanceResult& out) {
  const ClusterState& state = txn.state();
  GP_ASSIGN(cluster, ActiveCluster(state, txn.arn(), in.cluster));
  GP_TRY(CheckBoundHost(in));
  ContainerInstance inst;
  const ContainerInstance* existing = nullptr;
  const ContainerInstance* bound = nullptr;
  if (!in.container_instance_arn) {
    GP_ASSIGN(b, BoundInstance(state, in, cluster->name));
    bound = b;
  }
  if (in.container_instance_arn) {
    GP_ASSIGN(id, ResourceIdFrom(txn.arn(), "container-instance", *in.container_instance_arn, cluster->name));
    existing = state.FindInstance(txn.arn().InstanceArn(cluster->name, id));
    if (!existing) return Status::InvalidParameter("containerInstanceArn names no instance of this cluster");
    GP_TRY(CheckAgentKey(*existing, in.agent_key, "ecs:RegisterContainerInstance"));
    // A deregistered instance does not come back by itself: its tasks were stopped and its GPUs given up.
    if (existing->status == InstanceStatus::kInactive)
      return Status(ErrorCode::kInstanceDeregistered,
                    "container instance " + id + " was deregistered and cannot register again; register it as a "
                    "new instance (for gpupack agent: remove the instance record in its --state-dir)");
    inst = *existing;
  } else if (bound != nullptr) {
    existing = bound;  // the same host again: its instance, as if it had named it
    inst = *existing;
  } else {
    inst.id = txn.NewId();
    inst.arn = txn.arn().InstanceArn(cluster->name, inst.id);
    inst.cluster = cluster->name;
    inst.registered_at = txn.now();
    inst.registered_by = in.agent_key.value_or("");
  }
  std::vector<Attribute> attrs = in.attributes;
  if (in.agent_version) inst.agent_version = *in.agent_version;
  if (!in.ec2_instance_id.empty()) inst.ec2_instance_id = in.ec2_instance_id;
  if (!in.instance_type.empty()) inst.instance_type = in.instance_type;
  if (inst.ec2_instance_id.empty()) inst.ec2_instance_id = "i-" + inst.id.substr(0, 17);
  if (!inst.instance_type.empty()) attrs.push_back({"ecs.instance-type", inst.instance_type});
  SortAttributes(attrs);
  GP_TRY(CheckAttributeCount(attrs, inst.id));
  // Re-registration keeps the tasks: GPUs that still hold reservations must still be there, a shared one still
  // large enough for the memory its tasks declared, and the host's CPU and memory at least what its tasks
  // reserved (else remaining resources would go negative, and stay so after a restart).
  if (existing) {
    const Resources held{existing->registered.cpu - existing->remaining.cpu,
                         existing->registered.memory - existing->remaining.memory};
    if (in.total.cpu < held.cpu)
      return Status::InvalidParameter("container instance " + existing->id + " has " + std::to_string(held.cpu) +
                                      " CPU units reserved by its tasks and cannot shrink to " +
                                      std::to_string(in.total.cpu) + " on re-registration; stop tasks first");
    if (in.total.memory < held.memory)
      return Status::InvalidParameter("container instance " + existing->id + " has " +
                                      std::to_string(held.memory) + " MiB of memory reserved by its tasks and "
                                      "cannot shrink to " + std::to_string(in.total.memory) +
                                      " MiB on re-registration; stop tasks first");
    for (const auto& g : existing->gpus) {
      const bool still_there =
          std::any_of(in.gpus.begin(), in.gpus.end(), [&g](const Gpu& now) { return now.id == g.id; });
      if (g.container_count > 0 && !still_there)
        return Status::InvalidParameter("GPU " + g.id + " holds running tasks and cannot disappear on re-registration");
      const MiB held = g.total_memory_mib - g.remaining_memory_mib;
      for (const auto& now : in.gpus)
        if (g.mode == GpuMode::kMps && now.id == g.id && now.total_memory_mib < held)
          return Status::InvalidParameter("GPU " + g.id + " holds " + std::to_string(held) +
                                          " MiB declared by running tasks and cannot shrink to " +
                                          std::to_string(now.total_memory_mib) + " MiB on re-registration");
    }
  }
  inst.registered = in.total;
  inst.remaining = in.total;
  inst.gpus = in.gpus;
  inst.attributes = std::move(attrs);
  // A new instance of a cluster that accepts instances manually waits, REGISTERING, for an administrator; one
  // registering again stays so (re-registering must not accept it), any other becomes ACTIVE as before.
  if (!existing)
    inst.status = cluster->settings.manual_instance_acceptance ? InstanceStatus::kRegistering : InstanceStatus::kActive;
  else if (existing->status != InstanceStatus::kRegistering)
    inst.status = InstanceStatus::kActive;
  if (existing) {
    for (auto& g : inst.gpus)
      for (const auto& old : existing->gpus)
        if (old.id == g.id) g.held = old.held;
  } else {
    inst.agent_connected = false;  // until a gpupack agent opens its channel and says hello
  }
  const std::string arn = inst.arn;
  txn.PutInstance(std::move(inst), existing != nullptr);
  out.instance = Copy(state, arn);
  return Status::Ok();
}

// DeregisterContainerInstance: refused while tasks run unless `force`, which stops them.
Status DeregisterContainerInstance(const DeregisterContainerInstanceRequest& in, Transaction& txn,
                                   InstanceResult& out) {
  GP_ASSIGN(cluster, ActiveCluster(txn.state(), txn.arn(), in.cluster));
  GP_ASSIGN(inst, ResolveInstance(txn.state(), txn.arn(), cluster->name, in.container_instance));
  GP_TRY(CheckAgentKey(*inst, in.agent_key, "ecs:DeregisterContainerInstance"));
  const std::string arn = inst->arn;
  const std::vector<std::string> task_arns = txn.state().LoadOf(arn).task_arns;
  if (!task_arns.empty() && !in.force)
    return Status::InvalidParameter("container instance has " + std::to_string(task_arns.size()) +
                                    " task(s) that are not stopped; stop them or deregister with force");
  // The agent, if its channel is open, is told to stop each task's containers: the tasks read STOPPED at once
  // (the instance is gone), and their processes must not outlive that.
  const bool tell_agent = UsesChannel(*inst) && inst->agent_connected;
  for (const auto& task_arn : task_arns) {
    txn.UpdateTask(task_arn, [](Task& t) {
      t.stop_code = stop_codes::kInfrastructureHealth;
      t.stopped_reason = "container instance deregistered";
    });
    FinishStop(task_arn, txn);
    if (tell_agent) txn.Push(arn, protocol::Stop{0, {task_arn, "container instance deregistered"}});
  }
  txn.UpdateInstance(arn, [](ContainerInstance& i) {
    i.status = InstanceStatus::kInactive;
    i.agent_connected = false;
  });
  out.instance = Copy(txn.state(), arn);
  return Status::Ok();
}

Status DescribeContainerInstances(const DescribeContainerInstancesRequest& in, const ReadContext& ctx,
                                  InstancesResult& out) {
  GP_ASSIGN(cluster, ActiveCluster(ctx.view, ctx.arn, in.cluster));
  for (const auto& ref : in.container_instances) {
    auto id = ResourceIdFrom(ctx.arn, "container-instance", ref);
    auto inst = id.ok() ? ctx.view.InstancePtr(ctx.arn.InstanceArn(cluster->name, *id)) : nullptr;
    if (inst) out.instances.push_back(std::move(inst));
    else out.failures.push_back({ref, "MISSING", ""});
  }
  return Status::Ok();
}

// ListContainerInstances: registration order; `filter` in the cluster query language.
Status ListContainerInstances(const ListContainerInstancesRequest& in, const ReadContext& ctx, ListPage& out) {
  GP_ASSIGN(cluster, ActiveCluster(ctx.view, ctx.arn, in.cluster));
  query::ExpressionPtr expr;
  if (in.filter && !in.filter->empty()) {
    GP_ASSIGN(e, query::Parse(*in.filter));
    expr = e;
  }
  std::vector<std::string> arns;
  for (const InstanceRecord* rec : ctx.view.InstancesOf(cluster->name)) {
    const ContainerInstance& inst = rec->instance;
    if (inst.status == InstanceStatus::kInactive) continue;
    if (in.status_matches_none || (in.status && inst.status != *in.status)) continue;
    if (expr && !query::Evaluate(*expr, inst, rec->load)) continue;
    arns.push_back(inst.arn);
  }
  out = PageOf("containerInstanceArns", std::move(arns), in.page.begin, in.page.limit);
  return Status::Ok();
}

// UpdateContainerInstancesState: ACTIVE <-> DRAINING, and ACTIVE accepts a REGISTERING instance (the role check
// keeps it to admin keys); unknown instances come back as MISSING failures.
Status UpdateContainerInstancesState(const UpdateContainerInstancesStateRequest& in, Transaction& txn,
                                     InstancesResult& out) {
  GP_ASSIGN(cluster, ActiveCluster(txn.state(), txn.arn(), in.cluster));
  for (const auto& ref : in.container_instances) {
    auto inst = ResolveInstance(txn.state(), txn.arn(), cluster->name, ref);
    if (!inst.ok()) {
      out.failures.push_back({ref, "MISSING", ""});
      continue;
    }
    const std::string arn = (*inst)->arn;
    if ((*inst)->status != in.status)
      txn.UpdateInstance(arn, [&in](ContainerInstance& i) { i.status = in.status; });
    out.instances.push_back(Copy(txn.state(), arn));
  }
  return Status::Ok();
}

}  // namespace gpupack::api
