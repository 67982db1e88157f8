// EcsHandler: the HTTP face of the control plane. Hands `POST /` with X-Amz-Target to the router, and serves
// GET /healthz, GET /readyz and GET /metrics (the server's MetricsRegistry). Every response carries
// x-amzn-RequestId and Date; errors use ECS's shape {"__type", "message"}.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "api/control_plane.h"
#include "api/http_server.h"
#include "api/metrics.h"
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
  void SetAuthenticator(const RequestAuthenticator* auth) { auth_ = auth; }

  // ReadinessProbe: what GET /readyz answers (unauthenticated, like /healthz): 200 once this server can serve
  // the API, 503 otherwise. Unset (one server alone): 200 {"role":"leader","leader":null,"epoch":0} while
  // healthy. Several servers on one database set it (api/leadership.h). Set before the server starts.
  using ReadinessProbe = std::function<HttpResponse()>;
  void SetReadiness(ReadinessProbe probe) { readiness_ = std::move(probe); }

 private:
  void Observe(const std::string& operation, int status, double seconds);
  void RefuseAuth(const Status& status, const HttpRequest& req, const std::string& request_id,
                  const Responder& respond);

  ControlPlane& cp_;
  MetricsRegistry& metrics_;
  MetricsRegistry::Histogram& durations_;
  MetricsRegistry::Counter& responses_;
  MetricsRegistry::Counter& auth_refusals_;
  const RequestAuthenticator* auth_ = nullptr;
  ReadinessProbe readiness_;
};

}  // namespace gpupack::api
