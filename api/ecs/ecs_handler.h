// EcsHandler: the ECS front end over HTTP. It serves `POST /` with an X-Amz-Target of ECS (the path table,
// api/paths.h, sends it here once the call is authenticated): the operation is authorized, the body parsed, and
// the router (api/ecs/router.h) parses it into a typed request, runs it in the engine and renders the result.
// Every response carries x-amzn-RequestId; errors use ECS's shape {"__type", "message"}. A refused ECS call made
// by the console (X-Gpupack-Console, no signature) answers 401, so the page knows to ask for a login.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "api/auth/call_gate.h"
#include "api/ecs/router.h"
#include "api/http/http_server.h"
#include "engine/control_plane.h"
#include "protocol/messages.h"

namespace gpupack::api {

inline constexpr const char* kTargetPrefix = "AmazonEC2ContainerServiceV20141113.";
inline constexpr int kMaxJsonDepth = protocol::kMaxJsonDepth;

class EcsHandler {
 public:
  // The control plane and the gate must outlive the handler.
  EcsHandler(ControlPlane& control_plane, const CallGate& gate);

  // Handle answers one ECS call (`POST /`; `who` authenticated it when the server checks signatures), started
  // at `start`. `respond` is called exactly once, possibly on the committer's thread.
  void Handle(const HttpRequest& req, const SigV4Result& who, const std::string& request_id,
              std::chrono::steady_clock::time_point start, Responder respond) const;

 private:
  Router router_;
  const CallGate& gate_;
};

}  // namespace gpupack::api
