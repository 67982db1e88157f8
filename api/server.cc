#include "api/server.h"

#include "api/logs/logs_handler.h"
#include "api/paths.h"
#include "api/server_metrics.h"
#include "storage/group_committer.h"

namespace gpupack::api {

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options, Store& store, StartFailure* failure) {
  StartFailure ignored;
  StartFailure& failed = failure != nullptr ? *failure : ignored;
  failed = StartFailure::kNone;
  std::unique_ptr<Server> s(new Server());
  s->metrics_ = std::make_unique<MetricsRegistry>();
  s->timed_store_ = TimeStoreCommits(store, *s->metrics_);
  s->committer_ = std::make_unique<GroupCommitter>(*s->timed_store_);
  // An agent connected before a restart or a takeover finds this server within about three heartbeats.
  options.control_plane.agent_reconnect_grace_ms = 3 * options.channel.heartbeat_interval.count();
  s->control_plane_ = std::make_unique<ControlPlane>(std::move(options.control_plane), store, *s->committer_);
  if (Status st = s->control_plane_->Load(); !st.ok()) {
    failed = StartFailure::kLoadState;
    return Status(st.code(), "cannot load state: " + st.message());
  }
  AddControlPlaneMetrics(*s->metrics_, *s->control_plane_, options.metrics_per_task);
  options.channel.authenticator = options.authenticator;
  s->channel_ = std::make_unique<AgentChannel>(*s->control_plane_, options.channel);
  s->front_ = std::make_unique<FrontDoor>(*s->control_plane_, *s->metrics_);
  s->front_->SetAuthenticator(options.authenticator, options.logs_authenticator);
  s->front_->SetGpuMemory(&s->channel_->gpu_memory());
  s->logs_ = std::make_unique<LogsHandler>(*s->control_plane_, *s->channel_);
  s->front_->SetLogs(s->logs_.get());
  if (options.readiness) s->front_->SetReadiness(std::move(options.readiness));
  HttpServerOptions http;
  http.host = options.host;
  http.port = options.port;
  http.threads = std::max(1, options.threads);
  http.max_websockets = options.max_websockets;
  http.max_connections_per_address = options.max_connections_per_address;
  http.read_timeout = options.http_read_timeout;
  WebSocketHandler channel = s->channel_->Handler();
  channel.max_send_queue_bytes = options.max_send_queue_bytes;
  http.websockets[kAgentChannelPath] = std::move(channel);
  auto server = HttpServer::Create(http, s->front_->AsHandler());
  if (!server.ok()) {
    failed = StartFailure::kListen;
    return server.status();
  }
  s->http_ = std::move(*server);
  AddServerMetrics(*s->metrics_, *s->http_, *s->committer_, *s->channel_);
  s->http_->Start();
  return s;
}

Server::~Server() {
  if (http_) http_->Stop();
  channel_.reset();
  if (control_plane_) control_plane_->applier().Drain();  // every queued write submitted...
  if (committer_) committer_->Flush();                      // ...and committed and answered
}

uint16_t Server::port() const { return http_->port(); }

}  // namespace gpupack::api
