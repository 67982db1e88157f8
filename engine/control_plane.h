// ControlPlane: the server's core, assembled: one Applier (the single writer and its read views) and the
// agent-facing calls the agent channel makes. It holds no rules of its own: those live in engine/operations/,
// one file per resource. The ECS operations reach the applier through the ECS front end's Router
// (api/ecs/router.h).
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/applier.h"
#include "protocol/messages.h"
#include "storage/group_committer.h"
#include "storage/store.h"

namespace gpupack::api {

using ControlPlaneOptions = ApplierOptions;

class ControlPlane {
 public:
  ControlPlane(ControlPlaneOptions options, Store& store, GroupCommitter& committer);

  // Loads the durable state. Call once before serving.
  Status Load() { return applier_.Load(); }

  // ---- the agent channel (api/channel/agent_channel.h) reaches the control plane through these. Each runs
  // serialized through the applier; its callback runs once the writes are durable.
  // AgentHello reconciles what an agent reports it runs with what the server holds for its instance and
  // answers the welcome. The instance becomes connected.
  void AgentHello(const std::string& instance_arn, const protocol::Hello& hello,
                  std::function<void(Status, protocol::Welcome)> done);
  void AgentReport(const std::string& instance_arn, const protocol::TaskReport& report,
                   std::function<void(Status)> done);
  void AgentHeartbeat(const std::string& instance_arn, const protocol::Heartbeat& heartbeat,
                      std::function<void(Status)> done);
  // AgentDisconnected marks the instance's agent disconnected (channel closed or heartbeats missed).
  void AgentDisconnected(const std::string& instance_arn);
  // HeartbeatChangesNothing: the published view shows the instance registered, connected and exactly as the
  // heartbeat describes it, so applying it would write nothing (the channel then acks it without the writer).
  // Only meaningful when no earlier write of the same agent is still on its way to the view.
  bool HeartbeatChangesNothing(const std::string& instance_arn, const protocol::Heartbeat& heartbeat) const;
  // PushCheck: a push an agent has not acked, and how to send it again.
  struct PushCheck {
    std::string instance_arn;
    const AgentPush* push;
    std::function<void()> send;
  };
  // ResendPushesIfWanted: for each push, whether it still matters (PushStillWanted). A report about the task
  // proves the agent got the push, so a copy is only sent while none has been applied. The checks run on the
  // writer thread, between two writes, and each wanted push's `send` runs there too (it only queues the copy):
  // a report applied after the check is acknowledged after the copy is queued, so an agent never gets a copy of
  // an assign for a task it already finished and forgot. Blocks until checked: call it from the channel's own
  // thread, never from an HTTP I/O thread.
  std::vector<bool> ResendPushesIfWanted(const std::vector<PushCheck>& checks);
  // CheckAgentInstance: the instance exists and is registered, and an agent key registered it (for the
  // channel's upgrade check; AccessDeniedException otherwise).
  Status CheckAgentInstance(const std::string& instance_arn, const AgentKey& agent_key = {}) const;
  // SetAgentNotifier: where pushes go once durable (the agent channel). Set before serving.
  void SetAgentNotifier(Applier::PushSink sink) { applier_.SetPushSink(std::move(sink)); }

  bool healthy() const { return applier_.healthy(); }
  Applier& applier() { return applier_; }
  const Applier& applier() const { return applier_; }

 private:
  Applier applier_;
};

}  // namespace gpupack::api
