// CallGate: what every signed JSON 1.1 call on `POST /` passes, ECS's and CloudWatch Logs' alike: its SigV4
// authentication (the ECS keys, or the same keys for the service "logs" for a Logs call; a console call is judged
// by the ECS authenticator, which holds the sessions), the authorization of its action, the refusal's answer and
// count, and the request families of /metrics (latency by operation, responses, auth refusals).
//
// Thread-safe once the server serves (SetAuthenticators before).
#pragma once

#include <string>

#include "api/auth/request_auth.h"
#include "api/http/http_server.h"
#include "metrics/registry.h"

namespace gpupack::api {

class CallGate {
 public:
  // The gate registers the request families in `metrics`, which must outlive it.
  explicit CallGate(MetricsRegistry& metrics);

  // Optional: require SigV4. `auth` checks ECS calls and console calls, `logs_auth` (may be null: `auth` then)
  // CloudWatch Logs calls. Set before the server starts; both must outlive the gate.
  void SetAuthenticators(const RequestAuthenticator* auth, const RequestAuthenticator* logs_auth) {
    auth_ = auth;
    logs_auth_ = logs_auth;
  }
  const RequestAuthenticator* authenticator() const { return auth_; }

  // Authenticate checks the request's signature (with the Logs authenticator when `logs_call`), filling `who`.
  // On a refusal it answers and counts it and returns false. Without an authenticator: true, `who` empty.
  bool Authenticate(const HttpRequest& req, bool logs_call, const std::string& request_id, const Responder& respond,
                    SigV4Result& who) const;
  // Authorize: whether `who` may perform `action`; on a refusal it answers and counts it and returns false.
  bool Authorize(const SigV4Result& who, const std::string& action, const HttpRequest& req,
                 const std::string& request_id, const Responder& respond) const;
  // Observe counts one answered call of `operation` and its latency.
  void Observe(const std::string& operation, int status, double seconds) const;

 private:
  // Refuse answers an authentication (`authenticated` false) or authorization refusal and counts it.
  void Refuse(const Status& status, const HttpRequest& req, const std::string& request_id, const Responder& respond,
              bool authenticated) const;

  MetricsRegistry::Histogram& durations_;
  MetricsRegistry::Counter& responses_;
  MetricsRegistry::Counter& auth_refusals_;
  const RequestAuthenticator* auth_ = nullptr;
  const RequestAuthenticator* logs_auth_ = nullptr;
};

}  // namespace gpupack::api
