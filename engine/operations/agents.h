// The agent channel's operations (api/channel/agent_channel.h delivers them; the applier runs them serialized).
#pragma once

#include "engine/operations/operations.h"
#include "protocol/messages.h"

namespace gpupack::api {

// FromProtocol: a channel report as the report ApplyTaskReport takes.
TaskStateReport FromProtocol(const protocol::TaskReport& report);

// AgentHello reconciles the agent's tasks with the server's and fills the welcome; the instance is connected
// (written only when that changes it: a hello within the reconnect grace after a takeover writes no instance).
Status AgentHello(const std::string& instance_arn, const protocol::Hello& hello, Transaction& txn,
                  protocol::Welcome& out);
// AgentReport applies one state report about a task on the agent's instance.
Status AgentReport(const std::string& instance_arn, const protocol::TaskReport& report, Transaction& txn);
// HeartbeatChanges: whether applying `heartbeat` would change `instance` (connected, impaired, held GPUs). The
// agent channel answers a heartbeat that changes nothing from the read view, without the writer.
bool HeartbeatChanges(const ContainerInstance& instance, const protocol::Heartbeat& heartbeat);
// AgentHeartbeat applies the agent's MPS health and held GPUs.
Status AgentHeartbeat(const std::string& instance_arn, const protocol::Heartbeat& heartbeat, Transaction& txn);
// AgentDisconnected marks the instance's agent disconnected (channel closed or heartbeats missed).
void AgentDisconnected(const std::string& instance_arn, Transaction& txn);
// PushStillWanted: an assign while its task is PENDING on that instance and not being stopped; a stop until
// the task is STOPPED there.
bool PushStillWanted(const ClusterState& state, const std::string& instance_arn, const AgentPush& push);

}  // namespace gpupack::api
