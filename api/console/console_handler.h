// ConsoleHandler: the web console at /console/ (docs/console.md). It serves the page (index.html, app.js and
// app.css, compiled into the binary from api/console/ by the build), the login and logout of console sessions
// (POST and DELETE /console/session; api/auth/console_sessions.h) and the console's compact reads under
// /console/api/, built from the control plane's last published read view:
//   GET /console/api/overview                      clusters: GPUs, GPU memory, tasks by status, refusals
//   GET /console/api/instances?cluster=&offset=&limit=&q=   instances with each GPU's holders
//   GET /console/api/tasks?cluster=&status=&family=&startedBy=&arn=&limit=   tasks, newest first
//   GET /console/api/refusals                      the latest RunTask/StartTask refusals and their reasons
// Tasks (and the holders of the instances' GPUs) carry, beside what they declared, the GPU memory they use as
// their agent last reported it (GpuMemoryUsage, api/channel/agent_channel.h): gpuMemoryUsedBytes per GPU and in
// all, and gpuMemoryReadAt / gpuMemoryReadAgoMs, when it was read. A task whose agent reported none has none of
// these fields ("not reported"), never a 0.
// Each read answers a `version` (the view's commit sequence, the refusals' count and the GPU memory figures'
// generation); a caller that passes
// `since=<version>` and gets {"unchanged": true} back keeps what it drew, so polling once a second costs
// almost nothing while nothing changes. Everything else the console shows comes from the ECS API itself
// (DescribeTasks, ExplainPlacement, StopTask, ...) through the ECS front end (api/ecs/ecs_handler.h),
// authenticated by the same session.
//
// With an authenticator (--credentials) the reads and the logout need a console session (or a SigV4 signature
// of an admin or reader key) and the X-Gpupack-Console header; the page and its assets are served to anyone
// (they hold no data). Without one the console is open, as the API is.
//
// PlacementRefusals: the latest refused placements with their reasons, and the overview's "refused in the last
// hour", which counts what the placement counters count (PlacementCounters::tasks_not_placed, the source of
// gpupack_placement_failures_total): one count of tasks not placed, read by both.
//
// Thread-safety: ConsoleHandler is immutable once the server serves (SetAuthenticator before), and Handle may
// run on any number of threads; PlacementRefusals is guarded by its own mutex.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/channel/agent_channel.h"
#include "engine/control_plane.h"
#include "api/http/http_server.h"
#include "api/auth/request_auth.h"

namespace gpupack::api {

using Json = nlohmann::json;

class PlacementRefusals {
 public:
  static constexpr size_t kRecent = 20;  // refusals kept with their reasons

  struct Refusal {
    EpochMs at = 0;
    std::string cluster;
    std::string task_definition;
    std::string overrides;  // the request's overrides as compact JSON, "" when none
    int tasks = 0;          // tasks not placed
    Json failures;          // ECS's failures array, at most 10 entries
  };

  // Totals: tasks not placed since the server started, per cluster: the placement counters' count summed over
  // its reasons. Unset: nothing is counted (LastHour reads 0).
  using Totals = std::function<std::map<std::string, uint64_t>()>;
  // SetTotals: where the count comes from (ConsoleHandler sets the control plane's). Set before serving.
  void SetTotals(Totals totals);

  // Record: a RunTask/StartTask in `cluster` left `tasks` task(s) unplaced, for `failures`: kept with the latest,
  // and the totals' growth since they were last read is counted in the minute of `at`.
  void Record(Refusal refusal);
  // LastHour: tasks refused in `cluster` in the hour before `now` (per-minute buckets of the totals' growth; a
  // growth no Record saw, if any, is counted in the minute it is read).
  int LastHour(const std::string& cluster, EpochMs now);
  std::vector<Refusal> Recent() const;  // newest first
  uint64_t generation() const;          // bumps with every Record

 private:
  struct Bucket {
    int64_t minute = -1;
    uint64_t count = 0;
  };
  // Take reads the totals (outside the lock) and counts their growth since the last read in the minute of `at`.
  void Take(EpochMs at);

  Totals totals_;  // set before serving, then read only
  mutable std::mutex mu_;
  std::map<std::string, std::array<Bucket, 60>> by_cluster_;  // guarded by mu_
  std::map<std::string, uint64_t> seen_;                      // guarded by mu_: the totals last read
  std::deque<Refusal> recent_;                                // guarded by mu_
  uint64_t generation_ = 0;                                   // guarded by mu_
};

// RecordRefusal: what the ECS front end's placement observer calls (api/paths.cc) after each RunTask or StartTask
// answer: records the tasks it left unplaced (asked minus placed) in `refusals`, nothing when all were placed.
void RecordRefusal(PlacementRefusals& refusals, const std::string& operation, const Json& request,
                   const Json& answer, EpochMs now);

class ConsoleHandler {
 public:
  // The handler makes `refusals` count from the control plane's placement counters (SetTotals).
  ConsoleHandler(ControlPlane& control_plane, PlacementRefusals& refusals);

  void SetAuthenticator(const RequestAuthenticator* auth) { auth_ = auth; }
  // SetGpuMemory: where the reads find each task's GPU memory in use (the agent channel's heartbeat figures);
  // unset, every task's reads "not reported". Set before the server serves; must outlive the handler's serving.
  void SetGpuMemory(const GpuMemoryUsage* usage) { gpu_memory_ = usage; }

  // Handle answers one request the path table (api/paths.h) gives the console: GET or HEAD "/" (a redirect to
  // /console/), "/console" and below. `respond` is called exactly once, on this thread.
  void Handle(const HttpRequest& req, const std::string& request_id, const Responder& respond) const;

 private:
  HttpResponse Asset(const std::string& path) const;
  HttpResponse SessionCall(const HttpRequest& req) const;
  HttpResponse Read(const HttpRequest& req, const std::string& path, const std::string& query) const;

  ControlPlane& cp_;
  PlacementRefusals& refusals_;
  const RequestAuthenticator* auth_ = nullptr;
  const GpuMemoryUsage* gpu_memory_ = nullptr;
};

}  // namespace gpupack::api
