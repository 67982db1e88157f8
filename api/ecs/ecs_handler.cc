#include "api/ecs_handler.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <vector>

#include <spdlog/spdlog.h>

#include "api/errors.h"
#include "api/logs_handler.h"

namespace gpupack::api {

namespace {

std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string id = "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx";
  uint64_t a = rng(), b = rng();
  int n = 0;
  for (auto& c : id) {
    if (c != 'x' && c != 'y') continue;
    uint64_t v = (n < 16 ? a >> (n * 4) : b >> ((n - 16) * 4)) & 15;
    if (c == 'y') v = 8 | (v & 3);
    c = kHex[v];
    ++n;
  }
  return id;
}

HttpResponse JsonResponse(int status, std::string body, const std::string& request_id) {
  HttpResponse r;
  r.status = status;
  r.headers = {{"Content-Type", "application/x-amz-json-1.1"}, {"x-amzn-RequestId", request_id}};
  r.body = std::move(body);
  return r;
}

HttpResponse ErrorResponse(const Status& s, const std::string& request_id) {
  HttpResponse r = JsonResponse(ToEcsError(s.code()).http_status, ErrorBody(s), request_id);
  r.headers.emplace_back("x-amzn-ErrorType", ToEcsError(s.code()).type);
  return r;
}

// Parses JSON refusing nesting deeper than kMaxJsonDepth (before any deep structure is built) and objects
// that name a key twice (which value wins is a parser's choice; a body that means two things is refused).
Result<Json> ParseBody(const std::string& body) {
  if (body.empty()) return Json::object();  // the SDK sends "{}" but curl users may send nothing
  bool too_deep = false;
  std::string duplicate;
  std::vector<std::set<std::string>> keys;  // the keys seen so far in each open object
  Json::parser_callback_t cb = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > kMaxJsonDepth) too_deep = true;
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == Json::parse_event_t::key && !keys.empty() && parsed.is_string() &&
        !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return !too_deep;
  };
  Json j;
  try {
    j = Json::parse(body, cb, /*allow_exceptions=*/true);
  } catch (const Json::exception& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
    if (size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    return Status::Client("request body is not valid JSON: " + what.substr(0, 300));
  }
  if (too_deep) return Status::Client("request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  if (!duplicate.empty()) return Status::Client("request body names the key '" + duplicate.substr(0, 100) + "' twice");
  if (j.is_discarded()) return Status(ErrorCode::kClient, "request body is not valid JSON");
  return j;
}

}  // namespace

EcsHandler::EcsHandler(ControlPlane& control_plane, MetricsRegistry& metrics)
    : cp_(control_plane),
      metrics_(metrics),
      durations_(metrics.AddHistogram("gpupack_request_duration_seconds", "ECS API request latency by operation.",
                                      {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5})),
      responses_(metrics.AddCounter("gpupack_requests_total", "ECS API responses by operation and HTTP status.")),
      auth_refusals_(metrics.AddCounter("gpupack_auth_refusals_total",
                                        "ECS API requests refused by authentication or authorization, by ECS error "
                                        "type.")),
      console_(control_plane, refusals_) {}
EcsHandler::~EcsHandler() = default;

Handler EcsHandler::AsHandler() {
  return [this](HttpRequest&& req, Responder respond) { Handle(std::move(req), std::move(respond)); };
}

void EcsHandler::Observe(const std::string& operation, int status, double seconds) {
  durations_.Observe({{"operation", operation}}, seconds);
  responses_.Inc({{"operation", operation}, {"code", std::to_string(status)}});
}

void EcsHandler::RefuseAuth(const Status& status, const HttpRequest& req, const std::string& request_id,
                            const Responder& respond, bool authenticated) {
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

void EcsHandler::Handle(HttpRequest&& req, Responder respond) {
  const std::string request_id = NewRequestId();
  const auto start = std::chrono::steady_clock::now();
  std::string path = req.target.substr(0, req.target.find('?'));
  if (req.method == "GET" && path == "/healthz") {
    bool ok = cp_.healthy();
    HttpResponse r;
    r.status = ok ? 200 : 503;
    r.headers = {{"Content-Type", "application/json"}, {"x-amzn-RequestId", request_id}};
    r.body = ok ? R"({"status":"ok"})" : R"({"status":"degraded","reason":"a commit failed; restart the server"})";
    respond(std::move(r));
    return;
  }
  if (req.method == "GET" && path == "/readyz") {
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
  if (req.method == "GET" && path == "/metrics") {
    HttpResponse r;
    r.headers = {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}, {"x-amzn-RequestId", request_id}};
    r.body = metrics_.Render();
    respond(std::move(r));
    return;
  }
  // The console's page, its login and its reads check their own sessions (api/console_handler.h).
  if (ConsoleHandler::Serves(req.method, path)) {
    console_.Handle(req, request_id, respond);
    return;
  }
  // With --credentials everything below needs a valid signature: refuse before saying anything about the
  // request (not even 404 or 405), as AWS does.
  SigV4Result who;
  if (auth_ != nullptr) {
    // A CloudWatch Logs call is signed for the service "logs": its own verifier over the same keys. The
    // console's calls (its session, no signature) are judged by the ECS authenticator, which holds the sessions.
    const std::string* logs_target = req.Header("x-amz-target");
    const bool logs_call = logs_ != nullptr && logs_auth_ != nullptr && logs_target != nullptr &&
                           logs_target->rfind(kLogsTargetPrefix, 0) == 0 && !RequestAuthenticator::IsConsoleCall(req);
    who = (logs_call ? logs_auth_ : auth_)->Authenticate(req);
    if (!who.status.ok()) {
      RefuseAuth(who.status, req, request_id, respond, /*authenticated=*/false);
      return;
    }
  }
  if (path != "/") {
    HttpResponse r = ErrorResponse(Status::Client("no such resource: " + path.substr(0, 200)), request_id);
    r.status = 404;
    respond(std::move(r));
    return;
  }
  if (req.method != "POST") {
    HttpResponse r = ErrorResponse(Status::Client("the ECS API takes POST /"), request_id);
    r.status = 405;
    r.headers.emplace_back("Allow", "POST");
    respond(std::move(r));
    return;
  }
  const std::string* target = req.Header("x-amz-target");
  std::string operation;
  if (logs_ != nullptr && target && target->rfind(kLogsTargetPrefix, 0) == 0) {
    HandleLogs(target->substr(std::char_traits<char>::length(kLogsTargetPrefix)), who, req, request_id, start,
               std::move(respond));
    return;
  }
  if (!target || target->rfind(kTargetPrefix, 0) != 0) {
    Status s(ErrorCode::kUnknownOperation,
             target ? "unknown operation target '" + target->substr(0, 200) + "'" : "missing X-Amz-Target header");
    Observe("unknown", 400, 0);
    respond(ErrorResponse(s, request_id));
    return;
  }
  operation = target->substr(std::char_traits<char>::length(kTargetPrefix));
  if (!ControlPlane::Knows(operation)) {
    Observe("unknown", 400, 0);
    respond(ErrorResponse(Router::NotServed(operation), request_id));
    return;
  }
  if (auth_ != nullptr) {
    if (Status s = RequestAuthenticator::Authorize(who, operation); !s.ok()) {
      RefuseAuth(s, req, request_id, respond, /*authenticated=*/true);
      return;
    }
  }
  auto body = ParseBody(req.body);
  if (!body.ok()) {
    Observe(operation, 400, 0);
    respond(ErrorResponse(body.status(), request_id));
    return;
  }
  const bool places = operation == "RunTask" || operation == "StartTask";
  // An agent-role key acts only for the instances it registered: the operations it may call check that.
  AgentKey agent_key;
  if (auth_ != nullptr && who.role == KeyRole::kAgent) agent_key = who.access_key_id;
  cp_.Execute(operation, *body, [this, respond = std::move(respond), request_id, operation, start,
                                 request = places ? *body : Json()](OperationResult r) {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r.status.ok() && !request.is_null())
      RecordRefusal(refusals_, operation, request, r.body, cp_.applier().Now());
    HttpResponse resp = r.status.ok()
                            ? JsonResponse(200, r.body.dump(-1, ' ', false, Json::error_handler_t::replace), request_id)
                            : ErrorResponse(r.status, request_id);
    Observe(operation, resp.status, secs);
    // One line per request at debug (polling DescribeTasks would flood info); a server error at warn.
    spdlog::log(resp.status >= 500 ? spdlog::level::warn : spdlog::level::debug,
                "op={} status={} latency_ms={:.3f} request_id={}{}", operation, resp.status, secs * 1000, request_id,
                r.status.ok() ? "" : " error=" + std::string(ToEcsError(r.status.code()).type));
    respond(std::move(resp));
  }, agent_key);
}

// HandleLogs: a CloudWatch Logs call (api/logs_handler.h), authorized like an ECS read, answered in the same
// JSON 1.1 shape and counted in the same metrics (operation "Logs.<name>").
void EcsHandler::HandleLogs(const std::string& name, const SigV4Result& who, const HttpRequest& req,
                            const std::string& request_id, std::chrono::steady_clock::time_point start,
                            Responder respond) {
  const std::string operation = "Logs." + name;
  auto reply = [this, operation, request_id, start, respond](LogsReply r) {
    HttpResponse resp = JsonResponse(r.http_status, std::move(r.body), request_id);
    if (!r.error_type.empty()) resp.headers.emplace_back("x-amzn-ErrorType", r.error_type);
    Observe(LogsHandler::Knows(operation.substr(5)) ? operation : "unknown", resp.status,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    respond(std::move(resp));
  };
  if (!LogsHandler::Knows(name)) {
    logs_->Handle(name, Json::object(), reply);  // answers UnknownOperationException
    return;
  }
  if (auth_ != nullptr) {
    if (Status s = RequestAuthenticator::Authorize(who, name); !s.ok()) {
      RefuseAuth(s, req, request_id, respond, /*authenticated=*/true);
      return;
    }
  }
  auto body = ParseBody(req.body);
  if (!body.ok()) {
    reply(LogsReply{400, ErrorBody(Status::InvalidParameter(body.status().message())), "InvalidParameterException"});
    return;
  }
  logs_->Handle(name, *body, reply);
}

}  // namespace gpupack::api
