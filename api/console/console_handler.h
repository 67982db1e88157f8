// ConsoleHandler: the web console at /console/ (docs/console.md). It serves the page (index.html, app.js,
// services.js and app.css, compiled into the binary from api/console/ by the build), the login and logout of
// console sessions (POST and DELETE /console/session; api/auth/console_sessions.h) and the console's compact
// reads under /console/api/, built from the control plane's last published read view:
//   GET /console/api/overview                      clusters: GPUs, GPU memory, tasks by status, refusals
//   GET /console/api/instances?cluster=&offset=&limit=&q=   instances with each GPU's holders
//   GET /console/api/tasks?cluster=&status=&family=&startedBy=&arn=&group=&live=&limit=   tasks, newest first
//                                                  (live=1: only those not STOPPED; group: "service:<name>")
//   GET /console/api/services?cluster=             services not INACTIVE: replicas, PRIMARY rollout, latest event
//   GET /console/api/refusals                      the latest RunTask/StartTask refusals and their reasons
// Tasks (and the holders of the instances' GPUs) carry, beside what they declared, the GPU memory they use as
// their agent last reported it (GpuMemoryUsage, api/channel/agent_channel.h): gpuMemoryUsedBytes per GPU and in
// all, and gpuMemoryReadAt / gpuMemoryReadAgoMs, when it was read. A task whose agent reported none has none of
// these fields ("not reported"), never a 0.
// Each read answers a `version` (the view's commit sequence, the refusals' count and the GPU memory figures'
// generation); a caller that passes
// `since=<version>` and gets {"unchanged": true} back keeps what it drew, so polling once a second costs
// almost nothing while nothing changes. Everything else the console shows comes from the ECS API itself
// (DescribeTasks, DescribeServices, ExplainPlacement, StopTask, ...) through the ECS front end (api/ecs/ecs_handler.h),
// authenticated by the same session.
//
// With an authenticator (--credentials) the reads and the logout need a console session (or a SigV4 signature
// of an admin or reader key) and the X-Gpupack-Console header; the page and its assets are served to anyone
// (they hold no data). Without one the console is open, as the API is.
//
// The overview's "refused in the last hour" and the list of the latest refusals come from the engine's refusal
// log (engine/core/refusals.h), recorded where placement refuses a task and published with the placement
// counters: the console counts nothing of its own.
//
// Thread-safety: ConsoleHandler is immutable once the server serves (SetAuthenticator before), and Handle may
// run on any number of threads.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/channel/agent_channel.h"
#include "engine/control_plane.h"
#include "api/http/http_server.h"
#include "api/auth/request_auth.h"

namespace gpupack::api {

using Json = nlohmann::json;

class ConsoleHandler {
 public:
  explicit ConsoleHandler(ControlPlane& control_plane);

  void SetAuthenticator(const RequestAuthenticator* auth) { auth_ = auth; }
  // SetGpuMemory: where the reads find each task's GPU memory in use (the agent channel's heartbeat figures);
  // unset, every task's reads "not reported". Set before the server serves; must outlive the handler's serving.
  void SetGpuMemory(const GpuMemoryUsage* usage) { gpu_memory_ = usage; }

  // Handle answers one request the path table (api/paths.h) gives the console: GET or HEAD "/" (a redirect to
  // /console/), "/console" and below. `respond` is called exactly once, on this thread.
  void Handle(const HttpRequest& req, const std::string& request_id, const Responder& respond) const;

 private:
  HttpResponse SessionCall(const HttpRequest& req) const;
  HttpResponse Read(const HttpRequest& req, const std::string& path, const std::string& query) const;

  ControlPlane& cp_;
  const RequestAuthenticator* auth_ = nullptr;
  const GpuMemoryUsage* gpu_memory_ = nullptr;
};

// ConsoleStaticAnswer: the answer to a GET or HEAD of the console's page itself ("/" and "/console" redirect to
// "/console/"; index.html, app.js, services.js, app.css), which needs neither state nor credentials, so a standby
// serves it too (api/leadership.cc); nullopt for any other request.
std::optional<HttpResponse> ConsoleStaticAnswer(const HttpRequest& req, const std::string& request_id);

}  // namespace gpupack::api
