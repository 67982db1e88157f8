#include "engine/control_plane.h"

#include "engine/operations/agents.h"

namespace gpupack::api {

ControlPlane::ControlPlane(ControlPlaneOptions options, Store& store, GroupCommitter& committer)
    : applier_(std::move(options), store, committer) {}

void ControlPlane::AgentHello(const std::string& instance_arn, const protocol::Hello& hello,
                              std::function<void(Status, protocol::Welcome)> done) {
  auto welcome = std::make_shared<protocol::Welcome>();
  applier_.Write([&](Transaction& txn) { return api::AgentHello(instance_arn, hello, txn, *welcome); },
                 [welcome, done = std::move(done)](Status s) { done(s, s.ok() ? *welcome : protocol::Welcome{}); });
}

void ControlPlane::AgentReport(const std::string& instance_arn, const protocol::TaskReport& report,
                               std::function<void(Status)> done) {
  applier_.Write([&](Transaction& txn) { return api::AgentReport(instance_arn, report, txn); }, std::move(done));
}

void ControlPlane::AgentHeartbeat(const std::string& instance_arn, const protocol::Heartbeat& heartbeat,
                                  std::function<void(Status)> done) {
  applier_.Write([&](Transaction& txn) { return api::AgentHeartbeat(instance_arn, heartbeat, txn); }, std::move(done));
}

void ControlPlane::AgentDisconnected(const std::string& instance_arn) {
  applier_.Write(
      [&](Transaction& txn) {
        api::AgentDisconnected(instance_arn, txn);
        return Status::Ok();
      },
      [](Status) {});
}

bool ControlPlane::ResendPushIfWanted(const std::string& instance_arn, const AgentPush& push,
                                      const std::function<void()>& send) const {
  bool wanted = false;
  applier_.Inspect([&](const ClusterState& state) {
    wanted = PushStillWanted(state, instance_arn, push);
    if (wanted) send();
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
