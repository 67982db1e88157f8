// RequestAuthenticator: the server's gate in front of the ECS API and the agent channel when it runs with
// --credentials (docs/security.md, docs/api.md "Authentication"). It verifies the request's AWS Signature Version 4
// (SigV4Verifier: service ecs, the server's region, 5-minute clock skew, constant-time compare) and then
// whether the signing key's role may perform the action (KeyRole, protocol/sigv4.h).
//
// It also holds the web console's sessions (api/auth/console_sessions.h): Login checks a key's secret and starts a
// session, and a request without an Authorization header that carries both the session cookie and the
// X-Gpupack-Console header is authenticated by its session instead of a signature (with the session's console
// role: admin keys write, every other key only reads). A session never opens the agent channel.
//
// With server names (SetServerNames), a signed request is answered only when its signed Host is one of them
// (api/auth/server_names.h): a request signed for another server is refused as a signature error
// (kInvalidSignature), whoever signed it.
//
// Thread-safety: the verifier and clock are immutable after construction and the sessions are thread-safe;
// every method may be called from any number of threads at once (the clock function must be thread-safe).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "api/auth/console_sessions.h"
#include "api/auth/server_names.h"
#include "api/http/http_server.h"
#include "protocol/sigv4_verifier.h"

namespace gpupack::api {

// The action name of the agent channel's WebSocket upgrade (ECS operations use their own names).
inline constexpr std::string_view kAgentChannelAction = "AgentChannel";

// The action name of the web console's own reads (/console/api/...): allowed to admin and reader keys.
inline constexpr std::string_view kConsoleReadAction = "ConsoleRead";

// IsReadAction: whether `action` only reads: an ECS operation whose request is Access::kRead, the console's
// reads, or another service's operation named Get*, Describe*, List* or Filter* (a "Service.Operation" target
// or a "service:Operation" action is judged by its part after the last dot or colon).
bool IsReadAction(std::string_view action);

// RoleAllows says whether `role` may perform `action` (an ECS operation name, kAgentChannelAction or
// kConsoleReadAction).
bool RoleAllows(KeyRole role, std::string_view action);

class RequestAuthenticator {
 public:
  using Clock = std::function<std::chrono::system_clock::time_point()>;

  explicit RequestAuthenticator(SigV4Verifier verifier, Clock clock = &std::chrono::system_clock::now,
                                ConsoleSessions::Options sessions = {});
  ~RequestAuthenticator();

  // Authenticate: a console session (see above) or the signature: ok with the key, or a refusal whose code is
  // one of kMissingAuthenticationToken, kIncompleteSignature, kInvalidSignature, kUnrecognizedClient, or
  // kAccessDenied for a console call whose session is unknown or idled out.
  SigV4Result Authenticate(const HttpRequest& req) const;

  // IsConsoleCall: the request carries the X-Gpupack-Console header and no Authorization header.
  static bool IsConsoleCall(const HttpRequest& req);

  // Login checks `secret` against the key `access_key_id` (compared in constant time; an unknown key costs
  // the same) and starts a console session: its token, or kUnrecognizedClient naming neither which part was
  // wrong nor whether the key exists.
  Result<std::string> Login(std::string_view access_key_id, std::string_view secret) const;
  // Logout ends the session of `token` (no-op when unknown).
  void Logout(std::string_view token) const;
  // Session: who holds `token`, when it is a live session.
  std::optional<ConsoleSession> Session(std::string_view token) const;

  // Authorize: kAccessDenied (AccessDeniedException) when `who`'s role may not perform `action`.
  static Status Authorize(const SigV4Result& who, std::string_view action);

  // Check is Authenticate then Authorize.
  Status Check(const HttpRequest& req, std::string_view action) const;

  const SigV4Verifier& verifier() const { return verifier_; }

  // SetServerNames: the names a signed request's Host must be one of (null: any Host, as before). Call it before
  // the server serves; the names themselves may grow later (ServerNames is thread-safe).
  void SetServerNames(std::shared_ptr<const ServerNames> names) { names_ = std::move(names); }

 private:
  SigV4Result AuthenticateSession(const HttpRequest& req) const;
  // AuthenticateSignature: the verifier's verdict, then the Host check against names_.
  SigV4Result AuthenticateSignature(const HttpRequest& req) const;

  SigV4Verifier verifier_;
  Clock clock_;
  std::unique_ptr<ConsoleSessions> sessions_;  // thread-safe itself; mutable through the pointer
  std::shared_ptr<const ServerNames> names_;   // null: no Host check
};

}  // namespace gpupack::api
