// RequestAuthenticator: the server's gate in front of the ECS API and the agent channel when it runs with
// --credentials (docs/security.md, docs/api.md "Authentication"). It verifies the request's AWS Signature Version 4
// (SigV4Verifier: service ecs, the server's region, 5-minute clock skew, constant-time compare) and then
// whether the signing key's role may perform the action (KeyRole, protocol/sigv4.h).
//
// Thread-safety: immutable after construction; Check may be called from any number of threads at once (the
// clock function must be thread-safe).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "api/http_server.h"
#include "protocol/sigv4_verifier.h"

namespace gpupack::api {

// The action name of the agent channel's WebSocket upgrade (ECS operations use their own names).
inline constexpr std::string_view kAgentChannelAction = "AgentChannel";

// RoleAllows says whether `role` may perform `action` (an ECS operation name or kAgentChannelAction).
bool RoleAllows(KeyRole role, std::string_view action);

class RequestAuthenticator {
 public:
  using Clock = std::function<std::chrono::system_clock::time_point()>;

  explicit RequestAuthenticator(SigV4Verifier verifier, Clock clock = &std::chrono::system_clock::now);

  // Authenticate checks the signature only: ok with the key that signed, or a refusal whose code is one of
  // kMissingAuthenticationToken, kIncompleteSignature, kInvalidSignature, kUnrecognizedClient.
  SigV4Result Authenticate(const HttpRequest& req) const;

  // Authorize: kAccessDenied (AccessDeniedException) when `who`'s role may not perform `action`.
  static Status Authorize(const SigV4Result& who, std::string_view action);

  // Check is Authenticate then Authorize.
  Status Check(const HttpRequest& req, std::string_view action) const;

  const SigV4Verifier& verifier() const { return verifier_; }

 private:
  SigV4Verifier verifier_;
  Clock clock_;
};

}  // namespace gpupack::api
