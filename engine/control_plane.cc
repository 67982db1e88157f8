#include "engine/control_plane.h"

#include "engine/operations/agents.h"

namespace gpupack::api {

ControlPlane::ControlPlane(ControlPlaneOptions options, Store& store, GroupCommitter& committer)
    : applier_(std::move(options), store, committer) {}

void ControlPlane::AgentHello(const std::string& instance_arn, const protocol::Hello& hello,
                              std::function<void(Status, protocol::Welcome)> done) {
  auto welcome = std::make_shared<protocol::Welcome>();
  applier_.Write([this, instance_arn, hello, welcome](Transaction& txn) {
                   applier_.AgentBack(instance_arn);
                   return api::AgentHello(instance_arn, hello, txn, *welcome);
                 },
                 [welcome, done = std::move(done)](Status s) { done(s, s.ok() ? *welcome : protocol::Welcome{}); });
}

void ControlPlane::AgentReport(const std::string& instance_arn, const protocol::TaskReport& report,
                               std::function<void(Status)> done) {
  applier_.Write([instance_arn, report](Transaction& txn) { return api::AgentReport(instance_arn, report, txn); },
                 std::move(done));
}

void ControlPlane::AgentHeartbeat(const std::string& instance_arn, const protocol::Heartbeat& heartbeat,
                                  std::function<void(Status)> done) {
  applier_.Write(
      [instance_arn, heartbeat](Transaction& txn) { return api::AgentHeartbeat(instance_arn, heartbeat, txn); },
      std::move(done));
}

void ControlPlane::AgentDisconnected(const std::string& instance_arn) {
  applier_.Write(
      [instance_arn](Transaction& txn) {
        api::AgentDisconnected(instance_arn, txn);
        return Status::Ok();
      },
      [](Status) {});
}

bool ControlPlane::HeartbeatChangesNothing(const std::string& instance_arn,
                                           const protocol::Heartbeat& heartbeat) const {
  const std::shared_ptr<const ReadView> view = applier_.View();
  const ContainerInstance* inst = view->FindInstance(instance_arn);
  return inst && inst->status != InstanceStatus::kInactive && !HeartbeatChanges(*inst, heartbeat);
}

std::vector<bool> ControlPlane::ResendPushesIfWanted(const std::vector<PushCheck>& checks) {
  std::vector<bool> wanted(checks.size(), false);
  if (checks.empty()) return wanted;
  applier_.Inspect([&](const ClusterState& state) {
    for (size_t i = 0; i < checks.size(); ++i) {
      wanted[i] = PushStillWanted(state, checks[i].instance_arn, *checks[i].push);
      if (wanted[i]) checks[i].send();
    }
  });
  return wanted;
}

Status ControlPlane::CheckAgentInstance(const std::string& instance_arn, const AgentKey& agent_key) const {
  const ContainerInstance* inst = nullptr;
  auto view = applier_.View();
  inst = view->FindInstance(instance_arn);
  if (!inst || inst->status == InstanceStatus::kInactive)
    return Status::InvalidParameter("containerInstance " + instance_arn.substr(0, 300) + " is not registered");
  return CheckAgentKey(*inst, agent_key, "gpupack:AgentChannel");
}

}  // namespace gpupack::api
