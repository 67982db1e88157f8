#include "api/auth/call_gate.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "api/http/json_call.h"

namespace gpupack::api {

CallGate::CallGate(MetricsRegistry& metrics)
    : durations_(metrics.AddHistogram("gpupack_request_duration_seconds", "ECS API request latency by operation.",
                                      {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5})),
      responses_(metrics.AddCounter("gpupack_requests_total", "ECS API responses by operation and HTTP status.")),
      auth_refusals_(metrics.AddCounter("gpupack_auth_refusals_total",
                                        "ECS API requests refused by authentication or authorization, by ECS error "
                                        "type.")) {}

bool CallGate::Authenticate(const HttpRequest& req, bool logs_call, const std::string& request_id,
                            const Responder& respond, SigV4Result& who) const {
  if (auth_ == nullptr) return true;
  const bool as_logs = logs_call && logs_auth_ != nullptr && !RequestAuthenticator::IsConsoleCall(req);
  who = (as_logs ? logs_auth_ : auth_)->Authenticate(req);
  if (who.status.ok()) return true;
  Refuse(who.status, req, request_id, respond, /*authenticated=*/false);
  return false;
}

bool CallGate::Authorize(const SigV4Result& who, const std::string& action, const HttpRequest& req,
                         const std::string& request_id, const Responder& respond) const {
  if (auth_ == nullptr) return true;
  Status s = RequestAuthenticator::Authorize(who, action);
  if (s.ok()) return true;
  Refuse(s, req, request_id, respond, /*authenticated=*/true);
  return false;
}

void CallGate::Observe(const std::string& operation, int status, double seconds) const {
  durations_.Observe({{"operation", operation}}, seconds);
  responses_.Inc({{"operation", operation}, {"code", std::to_string(status)}});
}

void CallGate::Refuse(const Status& status, const HttpRequest& req, const std::string& request_id,
                      const Responder& respond, bool authenticated) const {
  auth_refusals_.Inc({{"type", ToEcsError(status.code()).type}});
  // The first line only: an InvalidSignatureException carries the canonical request the client should have sent.
  const std::string& m = status.message();
  spdlog::warn("auth: refused {} {} from {}: {}: {}", req.method, req.target.substr(0, 100), req.remote_address,
               ToEcsError(status.code()).type, m.substr(0, std::min<size_t>(m.find('\n'), 200)));
  HttpResponse r = ErrorResponse(status, request_id);
  // A console call without a live session: 401, so the page asks for a login (a session's role refused stays 400).
  if (!authenticated && RequestAuthenticator::IsConsoleCall(req)) r.status = 401;
  respond(std::move(r));
}

}  // namespace gpupack::api
