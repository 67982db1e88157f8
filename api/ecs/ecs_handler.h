// EcsHandler: the HTTP face of the control plane. Hands `POST /` with X-Amz-Target to the router, and serves
// GET /healthz, GET /readyz and GET /metrics (the server's MetricsRegistry) and the web console (GET / redirects
// to /console/; ConsoleHandler, api/console_handler.h). Every response carries x-amzn-RequestId and Date; errors
// use ECS's shape {"__type", "message"}. A refused ECS call made by the console (X-Gpupack-Console, no
// signature) answers 401, so the page knows to ask for a login.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

#include "api/console_handler.h"
#include "api/control_plane.h"
#include "api/http_server.h"
#include "metrics/registry.h"
#include "api/request_auth.h"
#include "protocol/messages.h"

namespace gpupack::api {

inline constexpr const char* kTargetPrefix = "AmazonEC2ContainerServiceV20141113.";
inline constexpr int kMaxJsonDepth = protocol::kMaxJsonDepth;

class EcsHandler {
 public:
  // The handler registers its request families (latency by operation, responses, auth refusals) in `metrics`
  // and serves the whole registry at /metrics. Both must outlive the handler.
  EcsHandler(ControlPlane& control_plane, MetricsRegistry& metrics);
  ~EcsHandler();

  // The Handler to give HttpServer. The EcsHandler must outlive the server.
  Handler AsHandler();

  void Handle(HttpRequest&& request, Responder respond);

  // Optional: require SigV4 (see above). Set before the server starts; `auth` must outlive the handler.
  void SetAuthenticator(const RequestAuthenticator* auth) {
    auth_ = auth;
    console_.SetAuthenticator(auth);
  }
  // Optional: the console shows each task's GPU memory in use from `usage` (the agent channel's). Set before the
  // server starts; `usage` must outlive the serving.
  void SetGpuMemory(const GpuMemoryUsage* usage) { console_.SetGpuMemory(usage); }
  // Optional: serve the CloudWatch Logs targets (Logs_20140328.*, api/logs_handler.h) too, their signatures
  // checked by `auth` (SigV4 service "logs") when SetAuthenticator set one. Set before the server starts; both
  // must outlive the handler.
  void SetLogs(const class LogsHandler* logs, const RequestAuthenticator* auth = nullptr) {
    logs_ = logs;
    logs_auth_ = auth;
  }

  // ReadinessProbe: what GET /readyz answers (unauthenticated, like /healthz): 200 once this server can serve
  // the API, 503 otherwise. Unset (one server alone): 200 {"role":"leader","leader":null,"epoch":0} while
  // healthy. Several servers on one database set it (api/leadership.h). Set before the server starts.
  using ReadinessProbe = std::function<HttpResponse()>;
  void SetReadiness(ReadinessProbe probe) { readiness_ = std::move(probe); }

 private:
  void Observe(const std::string& operation, int status, double seconds);
  // RefuseAuth answers an authentication (`authenticated` false) or authorization refusal and counts it.
  void RefuseAuth(const Status& status, const HttpRequest& req, const std::string& request_id,
                  const Responder& respond, bool authenticated);
  void HandleLogs(const std::string& name, const SigV4Result& who, const HttpRequest& req,
                  const std::string& request_id, std::chrono::steady_clock::time_point start, Responder respond);

  ControlPlane& cp_;
  MetricsRegistry& metrics_;
  MetricsRegistry::Histogram& durations_;
  MetricsRegistry::Counter& responses_;
  MetricsRegistry::Counter& auth_refusals_;
  const RequestAuthenticator* auth_ = nullptr;
  PlacementRefusals refusals_;  // RunTask/StartTask refusals, for the console's overview
  ConsoleHandler console_;
  const class LogsHandler* logs_ = nullptr;
  const RequestAuthenticator* logs_auth_ = nullptr;
  ReadinessProbe readiness_;
};

}  // namespace gpupack::api
