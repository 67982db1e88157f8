// Task state as agents report it (SubmitTaskStateChange, SubmitContainerStateChange, the channel's reports),
// stopping tasks, and what an agent is told to run.
#include "engine/operations/operations.h"
#include "engine/operations/resolve.h"

namespace gpupack::api {

bool UsesChannel(const ContainerInstance& instance) {
  return instance.FindAttribute(protocol::kChannelAttribute) != nullptr;
}

void FinishStop(const std::string& task_arn, Transaction& txn) {
  const EpochMs now = txn.now();
  txn.UpdateTask(task_arn, [now](Task& t) {
    t.desired_status = TaskStatus::kStopped;
    if (!t.stopping_at) t.stopping_at = now;
    t.stopped_at = now;
    for (auto& c : t.containers) c.last_status = TaskStatus::kStopped;
  });
  txn.SetTaskStatus(task_arn, TaskStatus::kStopped);  // releases reservations exactly once
}

void StopTaskRecord(const std::string& task_arn, const std::string& stop_code, const std::string& reason,
                    Transaction& txn) {
  const Task* task = txn.state().FindTask(task_arn);
  if (!task || task->desired_status == TaskStatus::kStopped || task->last_status == TaskStatus::kStopped) return;
  // Read before the change (a changed task may be a new copy: ClusterState::FindTask).
  const std::string instance_arn = task->container_instance_arn;
  // A task waiting for capacity (PROVISIONING) has no instance: it leaves its line and stops at once.
  const bool pending = task->last_status == TaskStatus::kPending || task->last_status == TaskStatus::kProvisioning;
  const EpochMs now = txn.now();
  txn.UpdateTask(task_arn, [&](Task& t) {
    t.desired_status = TaskStatus::kStopped;
    t.stop_code = stop_code;
    t.stopped_reason = reason;
    t.stopping_at = now;
  });
  const ContainerInstance* inst = txn.state().FindInstance(instance_arn);
  if (inst && UsesChannel(*inst) && inst->agent_connected) {
    // The agent stops it (SIGTERM, grace, SIGKILL) and reports STOPPED; memory is held until then.
    txn.Push(inst->arn, protocol::Stop{0, {task_arn, reason}});
    return;
  }
  // A task no agent has started yet stops at once. A running one waits for its agent's report (a channel agent
  // that is away gets the stop when it reconnects).
  if (pending) FinishStop(task_arn, txn);
}

// ApplyTaskReport: container reports are checked by the parser and applied together (never half a report); a
// task already STOPPED keeps its status and its released reservations, but takes late exit codes and reasons.
Status ApplyTaskReport(const std::string& task_arn, const TaskStateReport& report, Transaction& txn) {
  const Task* task = txn.state().FindTask(task_arn);
  if (!task) return Status::InvalidParameter("The referenced task was not found: " + task_arn.substr(0, 300));
  const TaskStatus last_status = task->last_status;  // a changed task may be a new copy: read it first
  if (report.has_containers) {
    txn.UpdateTask(task_arn, [&report](Task& t) {
      for (const auto& r : report.containers)
        for (auto& ctr : t.containers) {
          if (!r.name || ctr.name != *r.name) continue;
          if (r.status && ctr.last_status != TaskStatus::kStopped) ctr.last_status = *r.status;
          if (r.exit_code) ctr.exit_code = static_cast<int>(*r.exit_code);
          if (r.reason) ctr.reason = *r.reason;
        }
    });
  }
  if (last_status == TaskStatus::kStopped) return Status::Ok();  // late or repeated: nothing moves
  if (report.status == TaskStatus::kRunning && last_status != TaskStatus::kRunning) {
    txn.SetTaskStatus(task_arn, TaskStatus::kRunning);
    const EpochMs now = txn.now();
    txn.UpdateTask(task_arn, [now](Task& t) {
      t.started_at = now;
      for (auto& c : t.containers)
        if (c.last_status == TaskStatus::kPending) c.last_status = TaskStatus::kRunning;
    });
  } else if (report.status == TaskStatus::kStopped) {
    txn.UpdateTask(task_arn, [&report](Task& t) {
      if (t.stop_code.empty()) {
        t.stop_code = report.stop_code && !report.stop_code->empty() ? *report.stop_code
                      : t.last_status == TaskStatus::kPending        ? stop_codes::kTaskFailedToStart
                                                                     : stop_codes::kEssentialContainerExited;
      }
      if (report.reason && !report.reason->empty()) t.stopped_reason = *report.reason;
    });
    FinishStop(task_arn, txn);
  }
  return Status::Ok();
}

namespace {

// CheckReporter: an agent key reports only about tasks on the instances it registered.
Status CheckReporter(const Task& task, const AgentKey& agent_key, const ClusterState& state, std::string_view action) {
  if (!agent_key) return Status::Ok();
  const ContainerInstance* inst = state.FindInstance(task.container_instance_arn);
  if (!inst) return Status(ErrorCode::kAccessDenied, "an agent key reports only about tasks on its own instances");
  return CheckAgentKey(*inst, agent_key, action);
}

}  // namespace

Status SubmitTaskStateChange(const SubmitTaskStateChangeRequest& in, Transaction& txn, AckResult&) {
  GP_ASSIGN(cluster, ActiveCluster(txn.state(), txn.arn(), in.cluster));
  GP_ASSIGN(task, ResolveTask(txn.state(), txn.arn(), cluster->name, in.task));
  GP_TRY(CheckReporter(*task, in.agent_key, txn.state(), "ecs:SubmitTaskStateChange"));
  txn.MarkWrite();
  return ApplyTaskReport(task->arn, in.report, txn);
}

Status SubmitContainerStateChange(const SubmitContainerStateChangeRequest& in, Transaction& txn, AckResult&) {
  GP_ASSIGN(cluster, ActiveCluster(txn.state(), txn.arn(), in.cluster));
  GP_ASSIGN(task, ResolveTask(txn.state(), txn.arn(), cluster->name, in.task));
  GP_TRY(CheckReporter(*task, in.agent_key, txn.state(), "ecs:SubmitContainerStateChange"));
  bool found = false;
  for (const auto& c : task->containers) found = found || c.name == in.container_name;
  if (!found) return Status::InvalidParameter("task has no container named '" + in.container_name.substr(0, 255) + "'");
  txn.UpdateTask(task->arn, [&in](Task& t) {
    for (auto& c : t.containers) {
      if (c.name != in.container_name) continue;
      if (in.status && c.last_status != TaskStatus::kStopped) c.last_status = *in.status;
      if (in.exit_code) c.exit_code = static_cast<int>(*in.exit_code);
      if (in.reason) c.reason = *in.reason;
    }
  });
  txn.MarkWrite();
  return Status::Ok();
}

// AssignmentFor: per container the command, the definition's and the override's environment (the agent adds
// the MPS variables, which win), limits and GPUs.
protocol::Assignment AssignmentFor(const Task& task, const ClusterState& state, const ArnContext& arn) {
  const TaskDefinition* td = nullptr;
  if (auto ref = TaskDefinitionRefFrom(arn, task.task_definition_arn); ref.ok())
    td = state.FindTaskDefinition(ref->family, ref->revision);
  protocol::Assignment a;
  a.task_arn = task.arn;
  a.cluster = task.cluster;
  a.task_definition_arn = task.task_definition_arn;
  a.desired_status =
      task.desired_status == TaskStatus::kStopped ? protocol::TaskStatus::kStopped : protocol::TaskStatus::kRunning;
  for (const Container& c : task.containers) {
    protocol::AssignedContainer ac;
    ac.name = c.name;
    ac.image = c.image;
    ac.essential = c.essential;
    ac.gpu_ids = c.gpu_ids;
    if (c.mps) ac.mps = protocol::MpsLimits{c.mps->memory_mib, c.mps->max_compute_percent};
    const ContainerDefinition* cd = nullptr;
    if (td)
      for (const auto& d : td->containers)
        if (d.name == c.name) cd = &d;
    const ContainerOverride* co = OverrideFor(task.overrides, c.name);
    if (cd) {
      ac.entry_point = cd->entry_point;
      ac.command = cd->command;
      ac.environment = cd->environment;
      ac.cpu = cd->cpu;
      ac.memory = cd->memory;
      ac.memory_reservation = cd->memory_reservation;
    }
    if (co) {
      if (co->command) ac.command = *co->command;
      ac.override_environment = co->environment;
      if (co->cpu) ac.cpu = *co->cpu;
      if (co->memory) ac.memory = *co->memory;
      if (co->memory_reservation) ac.memory_reservation = *co->memory_reservation;
    }
    a.containers.push_back(std::move(ac));
  }
  return a;
}

}  // namespace gpupack::api
