#include "api/auth/request_auth.h"

#include <array>
#include <utility>

#include <openssl/crypto.h>

#include "api/ecs/router.h"

namespace gpupack::api {

namespace {

// What a node agent calls (agent/agent.cc): it registers (creating its cluster when missing, as the ECS agent
// does for "default"), may deregister, reports state changes, and holds the channel.
constexpr std::array<std::string_view, 6> kAgentActions = {
    "RegisterContainerInstance", "DeregisterContainerInstance", "CreateCluster",
    "SubmitTaskStateChange",     "SubmitContainerStateChange",  kAgentChannelAction};

}  // namespace

bool IsReadAction(std::string_view action) {
  if (action == kConsoleReadAction) return true;
  if (auto access = Router::AccessOf(std::string(action))) return *access == Access::kRead;
  if (action == kAgentChannelAction) return false;
  const size_t dot = action.find_last_of(".:");
  const std::string_view name = dot == std::string_view::npos ? action : action.substr(dot + 1);
  if (Router::AccessOf(std::string(name))) return false;  // "Other.RunTask" is not a read because of its prefix
  for (std::string_view verb : {"Get", "Describe", "List", "Filter"}) {
    if (name.size() > verb.size() && name.substr(0, verb.size()) == verb) return true;
  }
  return false;
}

bool RoleAllows(KeyRole role, std::string_view action) {
  switch (role) {
    case KeyRole::kAdmin:
      return true;
    case KeyRole::kReader:
      return IsReadAction(action);
    case KeyRole::kAgent:
      break;
  }
  for (std::string_view allowed : kAgentActions) {
    if (allowed == action) return true;
  }
  return false;
}

RequestAuthenticator::RequestAuthenticator(SigV4Verifier verifier, Clock clock, ConsoleSessions::Options sessions)
    : verifier_(std::move(verifier)),
      clock_(std::move(clock)),
      sessions_(std::make_unique<ConsoleSessions>(sessions)) {}
RequestAuthenticator::~RequestAuthenticator() = default;

bool RequestAuthenticator::IsConsoleCall(const HttpRequest& req) {
  return req.Header(kConsoleHeader) != nullptr && req.Header("authorization") == nullptr;
}

SigV4Result RequestAuthenticator::Authenticate(const HttpRequest& req) const {
  if (IsConsoleCall(req)) return AuthenticateSession(req);
  return AuthenticateSignature(req);
}

SigV4Result RequestAuthenticator::AuthenticateSignature(const HttpRequest& req) const {
  SigV4Result who = verifier_.Authenticate(req, clock_());
  if (!who.status.ok() || names_ == nullptr) return who;
  // Checked after the signature, so only a request someone signed is judged by its Host (the verifier made sure
  // Host is signed); every Host header must name this server.
  for (const auto& [name, value] : req.headers) {
    if (name != "host" || names_->Contains(value)) continue;
    std::string shown = value.substr(0, 255);
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return {Status(ErrorCode::kInvalidSignature,
                   "The request was signed for host '" + shown +
                       "', which is not this server's: sign for the address you send it to (this server answers "
                       "for its --listen and --advertise addresses and its --server-name names)."),
            {}, {}, KeyRole::kAdmin};
  }
  return who;
}

SigV4Result RequestAuthenticator::AuthenticateSession(const HttpRequest& req) const {
  std::optional<ConsoleSession> who;
  for (const auto& [name, value] : req.headers) {  // a browser may send several Cookie headers (HTTP/2 proxies)
    if (name != "cookie") continue;
    if (auto token = SessionTokenOf(value)) who = sessions_->Find(*token);
    if (who) break;
  }
  if (!who) {
    return {Status(ErrorCode::kAccessDenied, "No console session, or it expired: log in at /console/"), {}, {},
            KeyRole::kReader};
  }
  return {Status::Ok(), who->access_key_id, who->profile, who->role};
}

Result<std::string> RequestAuthenticator::Login(std::string_view access_key_id, std::string_view secret) const {
  // Both sides hashed to 32 bytes, so the compare's time depends on neither length; an unknown key is compared
  // against a fixed string so it costs the same as a known one.
  const Credential* key = verifier_.FindKey(access_key_id);
  const std::string want = protocol::HexSha256(key ? std::string_view(key->secret_access_key) : "unknown key");
  const std::string got = protocol::HexSha256(secret);
  const bool same = CRYPTO_memcmp(want.data(), got.data(), want.size()) == 0;
  if (key == nullptr || !same) {
    return Status(ErrorCode::kUnrecognizedClient, "The access key id or the secret access key is not right.");
  }
  // A node agent's key is on every GPU host: one copied off a host must not read what an administrator reads.
  if (key->role == KeyRole::kAgent)
    return Status(ErrorCode::kAccessDenied, "User: " + key->access_key_id +
                                                " (gpupack_role agent) may not open a console session: log in with "
                                                "an admin or reader key");
  return sessions_->Create({key->access_key_id, key->profile, ConsoleRole(key->role)});
}

void RequestAuthenticator::Logout(std::string_view token) const { sessions_->Erase(token); }

std::optional<ConsoleSession> RequestAuthenticator::Session(std::string_view token) const {
  return sessions_->Find(token);
}

Status RequestAuthenticator::Authorize(const SigV4Result& who, std::string_view action) {
  if (!who.status.ok()) return who.status;
  if (RoleAllows(who.role, action)) return Status::Ok();
  // AWS's wording: "User: <principal> is not authorized to perform: ecs:<Action>".
  const std::string what = action == kAgentChannelAction ? "gpupack:AgentChannel" : "ecs:" + std::string(action);
  return Status(ErrorCode::kAccessDenied, "User: " + who.access_key_id + " (gpupack_role " + KeyRoleName(who.role) +
                                              ") is not authorized to perform: " + what);
}

Status RequestAuthenticator::Check(const HttpRequest& req, std::string_view action) const {
  // The agent channel takes signatures only: a console session (even an admin's) never opens it.
  if (action == kAgentChannelAction) return Authorize(AuthenticateSignature(req), action);
  return Authorize(Authenticate(req), action);
}

}  // namespace gpupack::api
