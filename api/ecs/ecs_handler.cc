#include "api/ecs/ecs_handler.h"

#include <spdlog/spdlog.h>

#include "api/http/errors.h"
#include "api/http/json_call.h"

namespace gpupack::api {

EcsHandler::EcsHandler(ControlPlane& control_plane, const CallGate& gate)
    : router_(control_plane.applier()), gate_(gate) {}

void EcsHandler::Handle(const HttpRequest& req, const SigV4Result& who, const std::string& request_id,
                        std::chrono::steady_clock::time_point start, Responder respond) const {
  const std::string* target = req.Header("x-amz-target");
  if (!target || target->rfind(kTargetPrefix, 0) != 0) {
    Status s(ErrorCode::kUnknownOperation,
             target ? "unknown operation target '" + target->substr(0, 200) + "'" : "missing X-Amz-Target header");
    gate_.Observe("unknown", 400, 0);
    respond(ErrorResponse(s, request_id));
    return;
  }
  const std::string operation = target->substr(std::char_traits<char>::length(kTargetPrefix));
  if (!Router::Knows(operation)) {
    gate_.Observe("unknown", 400, 0);
    respond(ErrorResponse(Router::NotServed(operation), request_id));
    return;
  }
  if (!gate_.Authorize(who, operation, req, request_id, respond)) return;
  auto body = ParseJsonBody(req.body, kMaxJsonDepth);
  if (!body.ok()) {
    gate_.Observe(operation, 400, 0);
    respond(ErrorResponse(body.status(), request_id));
    return;
  }
  // An agent-role key acts only for the instances it registered (and registers only its bound host, when its
  // profile names one): the operations it may call check that.
  Caller caller;
  if (gate_.authenticator() != nullptr && who.role == KeyRole::kAgent) caller = {who.access_key_id, who.host};
  router_.Dispatch(operation, *body,
                   [this, respond = std::move(respond), request_id, operation, start](OperationResult r) {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    HttpResponse resp = r.status.ok()
                            ? JsonResponse(200, r.body.dump(-1, ' ', false, Json::error_handler_t::replace), request_id)
                            : ErrorResponse(r.status, request_id);
    gate_.Observe(operation, resp.status, secs);
    // One line per request at debug (polling DescribeTasks would flood info); a server error at warn.
    spdlog::log(resp.status >= 500 ? spdlog::level::warn : spdlog::level::debug,
                "op={} status={} latency_ms={:.3f} request_id={}{}", operation, resp.status, secs * 1000, request_id,
                r.status.ok() ? "" : " error=" + std::string(ToEcsError(r.status.code()).type));
    respond(std::move(resp));
  }, caller);
}

}  // namespace gpupack::api
