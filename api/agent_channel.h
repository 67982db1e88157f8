// AgentChannel: the server end of the agent channel (DESIGN §6). One WebSocket per agent at
// /agent/v1/channel?containerInstance=<ARN>, JSON text messages:
//
//   agent -> server                                   server -> agent
//   {"type":"hello","tasks":[...],"impaired":b}       {"type":"welcome","assign":[...],"stop":[...],
//                                                       "heartbeatIntervalMs":n}
//   {"type":"state","id":n,"taskArn",...}             {"type":"ack","id":n}            (once durable)
//   {"type":"heartbeat","id":n,"impaired","heldGpus"} {"type":"ack","id":n}
//                                                     {"type":"assign","task":{...}}   (after RunTask commits)
//                                                     {"type":"stop","taskArn","reason"}
//   {"type":"error",...} answers a message the server could not apply.
//
// A connection that sends no heartbeat for `missed_heartbeats` intervals is closed and its instance marked
// agentConnected=false; RunTask then answers AGENT for it. A second connection for the same instance replaces
// the first. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "api/control_plane.h"
#include "api/http_server.h"
#include "api/request_auth.h"

namespace gpupack::api {

inline constexpr const char* kAgentChannelPath = "/agent/v1/channel";

struct AgentChannelOptions {
  std::chrono::milliseconds heartbeat_interval{5000};
  int missed_heartbeats = 3;
  // With --credentials: the upgrade request must be SigV4-signed by a key allowed kAgentChannelAction, else it
  // is answered 403 in ECS's error shape and not upgraded. Must outlive the channel; null = no authentication.
  const RequestAuthenticator* authenticator = nullptr;
};

class AgentChannel {
 public:
  AgentChannel(ControlPlane& control_plane, AgentChannelOptions options);
  ~AgentChannel();  // stops the heartbeat watchdog
  AgentChannel(const AgentChannel&) = delete;
  AgentChannel& operator=(const AgentChannel&) = delete;

  // The WebSocket endpoint to register in HttpServerOptions::websockets[kAgentChannelPath].
  WebSocketHandler Handler();

  // Push sends a message to the agent of an instance; dropped when it is not connected (it reconciles on
  // reconnect).
  void Push(const std::string& instance_arn, const Json& message);

  size_t connected() const;

  // Upgrade requests refused by the authenticator since construction.
  uint64_t auth_refusals() const { return auth_refusals_.load(); }

 private:
  struct Peer {
    std::shared_ptr<WebSocketConnection> conn;
    std::string instance_arn;
    std::chrono::steady_clock::time_point last_seen;
    bool hello_done = false;
  };
  void OnOpen(const std::shared_ptr<WebSocketConnection>& conn, const HttpRequest& req);
  void OnMessage(const std::shared_ptr<WebSocketConnection>& conn, std::string text);
  void OnClose(const std::shared_ptr<WebSocketConnection>& conn);
  void Watchdog();

  ControlPlane& cp_;
  const AgentChannelOptions options_;
  mutable std::mutex mu_;
  std::map<WebSocketConnection*, Peer> peers_;              // guarded by mu_
  std::map<std::string, WebSocketConnection*> by_instance_; // guarded by mu_
  bool stopping_ = false;                                    // guarded by mu_
  std::condition_variable cv_;
  std::thread watchdog_;
  std::atomic<uint64_t> auth_refusals_{0};
};

// InstanceArnFromQuery extracts containerInstance=<ARN> (percent-decoded) from a request target.
std::string InstanceArnFromQuery(const std::string& target);

}  // namespace gpupack::api
