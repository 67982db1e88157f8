// The agent channel's messages as operations: hello (reconcile), state reports, heartbeats, disconnects, and
// whether an unacknowledged push still matters.
#include "engine/operations/agents.h"

#include <set>

#include "engine/operations/resolve.h"

namespace gpupack::api {

namespace {

// ToModel: the channel's task status as the model's (the two enums name the same three ECS statuses).
TaskStatus ToModel(protocol::TaskStatus status) {
  switch (status) {
    case protocol::TaskStatus::kPending: return TaskStatus::kPending;
    case protocol::TaskStatus::kRunning: return TaskStatus::kRunning;
    case protocol::TaskStatus::kStopped: return TaskStatus::kStopped;
  }
  return TaskStatus::kPending;
}

}  // namespace

TaskStateReport FromProtocol(const protocol::TaskReport& report) {
  TaskStateReport r;
  r.status = ToModel(report.status);
  if (!report.reason.empty()) r.reason = report.reason;
  if (report.stop_code) r.stop_code = protocol::Name(*report.stop_code);
  r.has_containers = true;
  for (const auto& c : report.containers) {
    ContainerStateReport cr;
    cr.name = c.name;
    cr.status = ToModel(c.status);
    if (c.exit_code) cr.exit_code = *c.exit_code;
    if (!c.reason.empty()) cr.reason = c.reason;
    r.containers.push_back(std::move(cr));
  }
  return r;
}

// AgentHello reconciles what the agent runs with what the server holds for its instance: reports apply like
// state changes; tasks the server does not know (or stopped meanwhile) are stopped; tasks it holds that the
// agent lacks are assigned again when still PENDING, or ended when they had started (the agent lost them).
Status AgentHello(const std::string& instance_arn, const protocol::Hello& hello, Transaction& txn,
                  protocol::Welcome& out) {
  const ContainerInstance* inst = txn.state().FindInstance(instance_arn);
  if (!inst || inst->status == InstanceStatus::kInactive) return Status::InvalidParameter("instance is not registered");
  std::set<std::string> reported;
  for (const protocol::TaskReport& rt : hello.tasks) {
    reported.insert(rt.task_arn);
    const bool stopped = rt.status == protocol::TaskStatus::kStopped;
    const Task* t = txn.state().FindTask(rt.task_arn);
    if (!t || t->container_instance_arn != instance_arn) {
      if (!stopped) out.stop.push_back({rt.task_arn, "the server does not know this task"});
      continue;
    }
    if (t->last_status == TaskStatus::kStopped) {
      if (!stopped) out.stop.push_back({rt.task_arn, "the task was stopped while the agent was away"});
      continue;
    }
    GP_TRY(ApplyTaskReport(rt.task_arn, FromProtocol(rt), txn));
    t = txn.state().FindTask(rt.task_arn);  // the report may have changed it into a new copy
    if (t->last_status != TaskStatus::kStopped && t->desired_status == TaskStatus::kStopped)
      out.stop.push_back({rt.task_arn, t->stopped_reason});
  }
  for (const std::string& arn : std::vector<std::string>(txn.state().LoadOf(instance_arn).task_arns)) {
    if (reported.count(arn)) continue;
    const Task* t = txn.state().FindTask(arn);
    if (!t) continue;
    if (t->desired_status == TaskStatus::kStopped || t->last_status == TaskStatus::kRunning) {
      // Not on the agent any more: it ended while the agent was away or its state was lost.
      txn.UpdateTask(arn, [](Task& task) {
        if (task.stop_code.empty()) task.stop_code = stop_codes::kTaskFailedToStart;
        if (task.stopped_reason.empty()) task.stopped_reason = "the agent no longer runs this task (its state was lost)";
      });
      FinishStop(arn, txn);
    } else {
      out.assign.push_back(AssignmentFor(*t, txn.state(), txn.arn()));  // the agent never got it
    }
  }
  const bool impaired = hello.impaired;
  // A hello that changes nothing about the instance writes nothing: after a takeover the new leader keeps the
  // instances the old one had connected connected for a grace (docs/ha.md), and the herd of hellos that follows
  // then needs no instance write, no commit and nothing for the standbys to follow. Its welcome still waits for
  // every commit before it (it may assign a task whose placement is still being committed).
  const ContainerInstance* now = txn.state().FindInstance(instance_arn);  // the reports may have replaced it
  if (now && now->agent_connected && now->impaired == impaired) {
    txn.MarkWrite();
    return Status::Ok();
  }
  txn.UpdateInstance(instance_arn, [impaired](ContainerInstance& i) {
    i.agent_connected = true;
    i.impaired = impaired;
  });
  return Status::Ok();
}

Status AgentReport(const std::string& instance_arn, const protocol::TaskReport& report, Transaction& txn) {
  const Task* t = txn.state().FindTask(report.task_arn);
  if (!t || t->container_instance_arn != instance_arn)
    return Status::InvalidParameter("task " + report.task_arn.substr(0, 300) + " is not on this instance");
  txn.MarkWrite();  // the ack promises the report is durable, also when an earlier report is still in commit
  return ApplyTaskReport(report.task_arn, FromProtocol(report), txn);
}

bool HeartbeatChanges(const ContainerInstance& inst, const protocol::Heartbeat& hb) {
  if (!inst.agent_connected || inst.impaired != hb.impaired) return true;
  const std::set<std::string> held(hb.held_gpus.begin(), hb.held_gpus.end());
  for (const auto& g : inst.gpus)
    if (g.held != (held.count(g.id) > 0)) return true;
  return false;
}

// AgentHeartbeat records the agent's MPS health and the GPUs it holds after a fault; it writes only changes.
Status AgentHeartbeat(const std::string& instance_arn, const protocol::Heartbeat& hb, Transaction& txn) {
  const ContainerInstance* inst = txn.state().FindInstance(instance_arn);
  // A deregistered instance stays disconnected: its agent's heartbeats do not bring it back.
  if (!inst || inst->status == InstanceStatus::kInactive) return Status::InvalidParameter("instance is not registered");
  if (!HeartbeatChanges(*inst, hb)) return Status::Ok();
  const std::set<std::string> held(hb.held_gpus.begin(), hb.held_gpus.end());
  const bool impaired = hb.impaired;
  txn.UpdateInstance(instance_arn, [&held, impaired](ContainerInstance& i) {
    i.agent_connected = true;
    i.impaired = impaired;
    for (auto& g : i.gpus) g.held = held.count(g.id) > 0;
  });
  return Status::Ok();
}

void AgentDisconnected(const std::string& instance_arn, Transaction& txn) {
  const ContainerInstance* inst = txn.state().FindInstance(instance_arn);
  if (!inst || !inst->agent_connected) return;
  txn.UpdateInstance(instance_arn, [](ContainerInstance& i) { i.agent_connected = false; });
}

bool PushStillWanted(const ClusterState& state, const std::string& instance_arn, const AgentPush& push) {
  if (const auto* assign = std::get_if<protocol::Assign>(&push)) {
    const Task* t = state.FindTask(assign->task.task_arn);
    return t && t->container_instance_arn == instance_arn && t->last_status == TaskStatus::kPending &&
           t->desired_status != TaskStatus::kStopped;
  }
  const auto& stop = std::get<protocol::Stop>(push);
  const Task* t = state.FindTask(stop.order.task_arn);
  if (!t || t->container_instance_arn != instance_arn) return false;
  // A deregistered instance's tasks read STOPPED at once; their processes still have to be stopped.
  const ContainerInstance* inst = state.FindInstance(instance_arn);
  return t->last_status != TaskStatus::kStopped || (inst && inst->status == InstanceStatus::kInactive);
}

}  // namespace gpupack::api
