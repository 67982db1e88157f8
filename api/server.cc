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
  options.control_plane.follow = options.follow;
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
  const bool follow = options.follow;
  const uint16_t port = options.port;
  s->options_ = std::move(options);
  if (!follow) {
    if (Status st = s->Listen(port); !st.ok()) {
      failed = StartFailure::kListen;
      return st;
    }
  }
  return s;
}

Status Server::Listen(uint16_t port) {
  HttpServerOptions http;
  http.host = options_.host;
  http.port = port;
  http.threads = std::max(1, options_.threads);
  http.max_websockets = options_.max_websockets;
  http.max_connections_per_address = options_.max_connections_per_address;
  http.read_timeout = options_.http_read_timeout;
  WebSocketHandler channel = channel_->Handler();
  channel.max_send_queue_bytes = options_.max_send_queue_bytes;
  http.websockets[kAgentChannelPath] = std::move(channel);
  auto server = HttpServer::Create(http, [this](HttpRequest&& req, Responder respond) {
    Handle(std::move(req), std::move(respond));
  });
  if (!server.ok()) return server.status();
  http_ = std::move(*server);
  AddServerMetrics(*metrics_, *http_, *committer_, *channel_);
  http_->Start();
  return Status::Ok();
}

void Server::Handle(HttpRequest&& req, Responder respond) {
  if (!options_.on_response) return front_->Handle(std::move(req), std::move(respond));
  front_->Handle(std::move(req), [this, respond = std::move(respond)](HttpResponse r) {
    options_.on_response(r);
    respond(std::move(r));
  });
}

Status Server::Promote(int64_t epoch, uint16_t port) {
  control_plane_->applier().Promote();
  channel_->SetEpoch(epoch);
  return http_ ? Status::Ok() : Listen(port);
}

Server::~Server() {
  if (http_) http_->Stop();
  channel_.reset();
  if (control_plane_) control_plane_->applier().Drain();  // every queued write submitted...
  if (committer_) committer_->Flush();                      // ...and committed and answered
}

uint16_t Server::port() const { return http_ ? http_->port() : 0; }

}  // namespace gpupack::api
