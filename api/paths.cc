#include "api/paths.h"

#include <string_view>

#include "api/http/json_call.h"
#include "api/logs/logs_handler.h"

namespace gpupack::api {

namespace {

// PathRule: one row of the table; the first row that matches decides.
struct PathRule {
  const char* method;         // nullptr: any method
  std::string_view path;      // exact, or a prefix when it ends in '/' and `prefix` is set
  bool prefix;
  const char* target_prefix;  // nullptr: any X-Amz-Target, or none
  FrontEnd front;
};

constexpr PathRule kPaths[] = {
    {"GET", "/healthz", false, nullptr, FrontEnd::kHealthz},
    {"GET", "/readyz", false, nullptr, FrontEnd::kReadyz},
    {"GET", "/metrics", false, nullptr, FrontEnd::kMetrics},
    {"GET", "/", false, nullptr, FrontEnd::kConsole},  // a redirect to /console/
    {"HEAD", "/", false, nullptr, FrontEnd::kConsole},
    {nullptr, "/console", false, nullptr, FrontEnd::kConsole},
    {nullptr, "/console/", true, nullptr, FrontEnd::kConsole},
    {"GET", protocol::kChannelPath, false, nullptr, FrontEnd::kChannel},
    {"POST", "/", false, kLogsTargetPrefix, FrontEnd::kLogs},
    {"POST", "/", false, nullptr, FrontEnd::kEcs},
};

}  // namespace

FrontEnd FrontEndFor(const std::string& method, const std::string& path, const std::string* target) {
  for (const PathRule& rule : kPaths) {
    if (rule.method != nullptr && method != rule.method) continue;
    if (rule.prefix ? path.rfind(rule.path, 0) != 0 : path != rule.path) continue;
    if (rule.target_prefix != nullptr && (target == nullptr || target->rfind(rule.target_prefix, 0) != 0)) continue;
    return rule.front;
  }
  return FrontEnd::kNone;
}

FrontDoor::FrontDoor(ControlPlane& control_plane, MetricsRegistry& metrics)
    : cp_(control_plane),
      metrics_(metrics),
      gate_(metrics),
      ecs_(control_plane, gate_),
      console_(control_plane) {}
FrontDoor::~FrontDoor() = default;

Handler FrontDoor::AsHandler() {
  return [this](HttpRequest&& req, Responder respond) { Handle(std::move(req), std::move(respond)); };
}

void FrontDoor::Handle(HttpRequest&& req, Responder respond) {
  const std::string request_id = NewRequestId();
  const auto start = std::chrono::steady_clock::now();
  const std::string path = req.target.substr(0, req.target.find('?'));
  const std::string* target = req.Header("x-amz-target");
  FrontEnd front = FrontEndFor(req.method, path, target);
  if (front == FrontEnd::kLogs && logs_ == nullptr) front = FrontEnd::kEcs;  // no Logs here: an unknown target
  if (front == FrontEnd::kHealthz) {
    bool ok = cp_.healthy();
    HttpResponse r;
    r.status = ok ? 200 : 503;
    r.headers = {{"Content-Type", "application/json"}, {"x-amzn-RequestId", request_id}};
    r.body = ok ? R"({"status":"ok"})" : R"({"status":"degraded","reason":"a commit failed; restart the server"})";
    respond(std::move(r));
    return;
  }
  if (front == FrontEnd::kReadyz) {
    HttpResponse r;
    if (readiness_) {
      r = readiness_();
    } else {
      r.status = cp_.healthy() ? 200 : 503;
      r.body = R"({"role":"leader","leader":null,"epoch":0})";
    }
    r.headers.emplace_back("Content-Type", "application/json");
    r.headers.emplace_back("x-amzn-RequestId", request_id);
    respond(std::move(r));
    return;
  }
  if (front == FrontEnd::kMetrics) {
    HttpResponse r;
    r.headers = {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}, {"x-amzn-RequestId", request_id}};
    r.body = metrics_.Render();
    respond(std::move(r));
    return;
  }
  // The console's page, its login and its reads check their own sessions (api/console/console_handler.h).
  if (front == FrontEnd::kConsole) {
    console_.Handle(req, request_id, respond);
    return;
  }
  // With --credentials everything below needs a valid signature: refuse before saying anything about the
  // request (not even 404 or 405), as AWS does. A CloudWatch Logs call is signed for the service "logs".
  const bool logs_target = logs_ != nullptr && target != nullptr && target->rfind(kLogsTargetPrefix, 0) == 0;
  SigV4Result who;
  if (!gate_.Authenticate(req, logs_target, request_id, respond, who)) return;
  if (front == FrontEnd::kLogs) {
    logs_->Serve(req, who, request_id, start, gate_, std::move(respond));
    return;
  }
  if (front == FrontEnd::kEcs) {
    ecs_.Handle(req, who, request_id, start, std::move(respond));
    return;
  }
  // No front end serves it (the channel's path reaches here only without an upgrade).
  if (path != "/") {
    HttpResponse r = ErrorResponse(Status::Client("no such resource: " + path.substr(0, 200)), request_id);
    r.status = 404;
    respond(std::move(r));
    return;
  }
  HttpResponse r = ErrorResponse(Status::Client("the ECS API takes POST /"), request_id);
  r.status = 405;
  r.headers.emplace_back("Allow", "POST");
  respond(std::move(r));
}

}  // namespace gpupack::api
