// EcsHandler: the HTTP face of the control plane. Routes `POST /` with X-Amz-Target to ControlPlane, and
// serves GET /healthz and GET /metrics. Every response carries x-amzn-RequestId and Date; errors use ECS's
// shape {"__type", "message"}.
#pragma once

#include <atomic>
#include <memory>

#include "api/control_plane.h"
#include "api/http_server.h"
#include "api/request_auth.h"

namespace gpupack::api {

inline constexpr const char* kTargetPrefix = "AmazonEC2ContainerServiceV20141113.";
inline constexpr int kMaxJsonDepth = 64;

// Request metrics kept by the handler (lock-free counters).
struct RequestMetrics;

class EcsHandler {
 public:
  explicit EcsHandler(ControlPlane& control_plane);
  ~EcsHandler();

  // The Handler to give HttpServer. The EcsHandler must outlive the server.
  Handler AsHandler();

  void Handle(HttpRequest&& request, Responder respond);

  // Optional: extra Prometheus text appended to /metrics (e.g. the HTTP server's own stats).
  void SetExtraMetrics(std::function<std::string()> extra) { extra_metrics_ = std::move(extra); }

  // Optional: require SigV4 (see above). Set before the server starts; `auth` must outlive the handler.
  void SetAuthenticator(const RequestAuthenticator* auth) { auth_ = auth; }

 private:
  void RefuseAuth(const Status& status, const HttpRequest& req, const std::string& request_id,
                  const Responder& respond);

  ControlPlane& cp_;
  std::unique_ptr<RequestMetrics> metrics_;
  std::function<std::string()> extra_metrics_;
  const RequestAuthenticator* auth_ = nullptr;
};

}  // namespace gpupack::api
