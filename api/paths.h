// Paths: the one table that decides which front end serves a request, by method and path, and on `POST /` by
// the X-Amz-Target prefix (CloudWatch Logs or ECS):
//   GET /healthz, GET /readyz, GET /metrics   the server's own answers (here)
//   GET|HEAD /, any /console and below         the web console (api/console/console_handler.h)
//   POST / with X-Amz-Target Logs_20140328.*   CloudWatch Logs (api/logs/logs_handler.h)
//   POST / with any other X-Amz-Target         ECS (api/ecs/ecs_handler.h; a non-ECS target is refused there)
//   GET <protocol::kChannelPath>               the agent channel's upgrade (api/channel/agent_channel.h; the HTTP
//                                              server hands upgrades to it before any handler)
// Anything else is refused (404, or 405 on `/`) after the signature check, as AWS does.
//
// FrontDoor is the HTTP server's handler over that table. Every response carries x-amzn-RequestId.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "api/auth/call_gate.h"
#include "api/auth/request_auth.h"
#include "api/channel/agent_channel.h"
#include "api/console/console_handler.h"
#include "api/ecs/ecs_handler.h"
#include "api/http/http_server.h"
#include "engine/control_plane.h"
#include "metrics/registry.h"

namespace gpupack::api {

enum class FrontEnd { kNone, kHealthz, kReadyz, kMetrics, kConsole, kLogs, kEcs, kChannel };

// FrontEndFor: the table's answer for `method`, `path` (without the query) and the X-Amz-Target (may be null).
FrontEnd FrontEndFor(const std::string& method, const std::string& path, const std::string* target);

class FrontDoor {
 public:
  // The front door registers the request families (CallGate) in `metrics` and serves the whole registry at
  // /metrics. Both must outlive it.
  FrontDoor(ControlPlane& control_plane, MetricsRegistry& metrics);
  ~FrontDoor();

  // The Handler to give HttpServer. The FrontDoor must outlive the server.
  Handler AsHandler();

  void Handle(HttpRequest&& request, Responder respond);

  // Optional: require SigV4 (`logs_auth`: the same keys for the service "logs"; null = `auth`). Set before the
  // server starts; both must outlive the front door.
  void SetAuthenticator(const RequestAuthenticator* auth, const RequestAuthenticator* logs_auth = nullptr) {
    gate_.SetAuthenticators(auth, logs_auth);
    console_.SetAuthenticator(auth);
  }
  // Optional: the console shows each task's GPU memory in use from `usage` (the agent channel's). Set before the
  // server starts; `usage` must outlive the serving.
  void SetGpuMemory(const GpuMemoryUsage* usage) { console_.SetGpuMemory(usage); }
  // Optional: serve the CloudWatch Logs targets too. Set before the server starts; must outlive the front door.
  void SetLogs(const class LogsHandler* logs) { logs_ = logs; }

  // ReadinessProbe: what GET /readyz answers (unauthenticated, like /healthz): 200 once this server can serve
  // the API, 503 otherwise. Unset (one server alone): 200 {"role":"leader","leader":null,"epoch":0} while
  // healthy. Several servers on one database set it (api/leadership.h). Set before the server starts.
  using ReadinessProbe = std::function<HttpResponse()>;
  void SetReadiness(ReadinessProbe probe) { readiness_ = std::move(probe); }

 private:
  ControlPlane& cp_;
  MetricsRegistry& metrics_;
  CallGate gate_;
  EcsHandler ecs_;
  ConsoleHandler console_;
  const class LogsHandler* logs_ = nullptr;
  ReadinessProbe readiness_;
};

}  // namespace gpupack::api
