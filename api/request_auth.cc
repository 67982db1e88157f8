#include "api/request_auth.h"

#include <array>
#include <utility>

namespace gpupack::api {

namespace {

// What a node agent calls (agent/agent.cc): it registers (creating its cluster when missing, as the ECS agent
// does for "default"), may deregister, reports state changes, and holds the channel.
constexpr std::array<std::string_view, 6> kAgentActions = {
    "RegisterContainerInstance", "DeregisterContainerInstance", "CreateCluster",
    "SubmitTaskStateChange",     "SubmitContainerStateChange",  kAgentChannelAction};

}  // namespace

bool RoleAllows(KeyRole role, std::string_view action) {
  if (role == KeyRole::kAdmin) return true;
  for (std::string_view allowed : kAgentActions) {
    if (allowed == action) return true;
  }
  return false;
}

RequestAuthenticator::RequestAuthenticator(SigV4Verifier verifier, Clock clock)
    : verifier_(std::move(verifier)), clock_(std::move(clock)) {}

SigV4Result RequestAuthenticator::Authenticate(const HttpRequest& req) const {
  return verifier_.Authenticate(req, clock_());
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
  return Authorize(Authenticate(req), action);
}

}  // namespace gpupack::api
