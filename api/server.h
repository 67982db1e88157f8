// Server: one gpupack server assembled over a Store: the group committer, the control plane (applier, read
// views), the agent channel, the front ends behind the path table (api/paths.h: ECS, CloudWatch Logs, the
// console), the metrics registry and the HTTP server. `gpupack server`
// (cli/server.cc) and the tests build it the same way, whatever the store.
//
// Lifetime: the Store must outlive the Server. The destructor stops serving, closes the agent channel and
// commits everything already submitted. Thread-safe accessors.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "api/channel/agent_channel.h"
#include "engine/control_plane.h"
#include "api/http/http_server.h"
#include "metrics/registry.h"
#include "api/auth/request_auth.h"
#include "storage/store.h"

namespace gpupack::api {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port
  int threads = 2;    // HTTP io threads
  ControlPlaneOptions control_plane;
  // channel.epoch: the leadership term a leader on PostgreSQL serves under (its welcome and pushes carry it);
  // none for a single server.
  AgentChannelOptions channel;
  // The agent channel's connection bounds (docs/security.md, "Limits on connections"; `gpupack server`
  // --max-agent-channels and --agent-send-queue-mib; the third, channel.max_hello_bytes, is above): upgraded
  // connections open at most (HttpServerOptions::max_websockets) and the bytes each may hold queued for sending
  // (WebSocketHandler::max_send_queue_bytes). The defaults are theirs.
  size_t max_websockets = HttpServerOptions{}.max_websockets;
  size_t max_send_queue_bytes = WebSocketHandler{}.max_send_queue_bytes;
  // The HTTP transport's bounds against stalled requests (`gpupack server --max-connections-per-address` and
  // --http-read-timeout; HttpServerOptions says what each does). The defaults are theirs.
  size_t max_connections_per_address = HttpServerOptions{}.max_connections_per_address;
  std::chrono::milliseconds http_read_timeout = HttpServerOptions{}.read_timeout;
  // With --credentials: every call and channel upgrade must be signed. Must outlive the server; null = none.
  const RequestAuthenticator* authenticator = nullptr;
  // The same keys for the CloudWatch Logs calls, whose signatures name the service "logs"; null = none.
  const RequestAuthenticator* logs_authenticator = nullptr;
  // metrics_per_task: /metrics carries the per-task GPU allocation series, labelled with task ARNs and container
  // names (`gpupack server --metrics-per-task`); off: it names no task and no container.
  bool metrics_per_task = false;
  // What GET /readyz answers (FrontDoor::ReadinessProbe); unset: a server alone. Must outlive the server.
  std::function<HttpResponse()> readiness;
  // on_response: called with every answer before it is sent (a leader adds its commit sequence: docs/ha.md).
  std::function<void(HttpResponse&)> on_response;
  // follow: a hot standby's server (api/leadership.h): it loads the state, follows the leader's commits
  // (Follow), answers what Handle is given from its own view, and neither listens nor writes until Promote.
  bool follow = false;
};

// StartFailure: which step of Server::Start failed, for callers to branch on (its message is for people).
enum class StartFailure {
  kNone,
  kLoadState,  // the store's state could not be loaded ("cannot load state: ...")
  kListen,     // the HTTP server could not listen (its message names the address)
};

class Server {
 public:
  // Start loads the store's state, listens and serves. Errors: the state cannot be loaded ("cannot load
  // state: ..."), or the address cannot be bound; `failure` (when given) says which (kNone on success).
  static Result<std::unique_ptr<Server>> Start(ServerOptions options, Store& store, StartFailure* failure = nullptr);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const;  // 0 while it does not listen (a following server)

  // Handle: one request through the path table, as if it had come in on the server's port (a standby answers
  // its reads this way). Same threading rules as an HttpServer handler.
  void Handle(HttpRequest&& req, Responder respond);
  // Follow applies the leader's committed batches (Applier::Follow); an error: drop this server, load afresh.
  Status Follow(const std::vector<WriteBatch>& batches) { return control_plane_->applier().Follow(batches); }
  // Promote makes a following server the leader of `epoch`: writes are taken, the agent channel's welcome and
  // pushes carry the epoch, and it listens on options.host and `port`.
  Status Promote(int64_t epoch, uint16_t port);

  ControlPlane& control_plane() { return *control_plane_; }
  AgentChannel& channel() { return *channel_; }
  const AgentChannel& channel() const { return *channel_; }
  MetricsRegistry& metrics() { return *metrics_; }

 private:
  Server() = default;
  Status Listen(uint16_t port);  // builds and starts the HTTP server (once)
  ServerOptions options_;     // what Listen needs (the parts Start did not consume)
  std::unique_ptr<MetricsRegistry> metrics_;  // first: the timed store observes into it until the committer ends
  std::unique_ptr<Store> timed_store_;        // the store with its commits timed (TimeStoreCommits)
  std::unique_ptr<GroupCommitter> committer_;
  std::unique_ptr<ControlPlane> control_plane_;
  std::unique_ptr<AgentChannel> channel_;
  std::unique_ptr<class LogsHandler> logs_;
  std::unique_ptr<class FrontDoor> front_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace gpupack::api
