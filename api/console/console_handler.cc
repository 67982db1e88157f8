#include "api/console/console_handler.h"

#include <algorithm>
#include <climits>
#include <string_view>
#include <unordered_map>

#include "api/console/waiting.h"
#include "api/ecs/codec.h"
#include "api/http/errors.h"
#include "engine/core/fragmentation_figures.h"

namespace gpupack::api {

// ConsoleAssetBody: the bytes of the console file `name` ("index.html", "app.js", "services.js", "waiting.js",
// "fragmentation.js", "app.css"), empty when none.
// Generated at build time from api/console/ (api/console/embed.cmake).
std::string_view ConsoleAssetBody(std::string_view name);

namespace {

constexpr size_t kDefaultInstancePage = 50;
constexpr size_t kMaxInstancePage = 1000;
constexpr size_t kDefaultTaskLimit = 200;
constexpr size_t kMaxTaskLimit = 2000;

std::string NameFromArn(const std::string& name_or_arn) {
  const size_t slash = name_or_arn.rfind('/');
  return slash == std::string::npos ? name_or_arn : name_or_arn.substr(slash + 1);
}

// FamilyRevisionOf: "family:3" of a task definition ARN (".../task-definition/family:3"); FamilyOf: "family".
std::string FamilyRevisionOf(const std::string& task_definition_arn) { return NameFromArn(task_definition_arn); }
std::string FamilyOf(const std::string& task_definition_arn) {
  std::string fr = FamilyRevisionOf(task_definition_arn);
  return fr.substr(0, fr.rfind(':'));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string UrlDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// QueryOf: the query string's parameters (the first of a repeated name wins).
std::map<std::string, std::string> QueryOf(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    std::string name = UrlDecode(pair.substr(0, eq));
    std::string value = eq == std::string_view::npos ? "" : UrlDecode(pair.substr(eq + 1));
    out.emplace(std::move(name), std::move(value));
  }
  return out;
}

std::string Param(const std::map<std::string, std::string>& q, const std::string& name) {
  auto it = q.find(name);
  return it == q.end() ? "" : it->second;
}

size_t SizeParam(const std::map<std::string, std::string>& q, const std::string& name, size_t fallback, size_t max) {
  const std::string v = Param(q, name);
  if (v.empty() || v.size() > 9 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return fallback;
  return std::min<size_t>(std::stoul(v), max);
}

// SecurityHeaders: what every console answer carries: no framing by other sites, no sniffing, no referrer,
// only our own scripts and styles, and nothing cached by a shared proxy.
void AddSecurityHeaders(HttpResponse& r, const std::string& request_id) {
  r.headers.emplace_back("x-amzn-RequestId", request_id);
  r.headers.emplace_back("Cache-Control", "no-store");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'");
}

HttpResponse JsonAnswer(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  r.headers = {{"Content-Type", "application/json"}};
  r.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return r;
}

HttpResponse ErrorAnswer(int status, const Status& s) {
  HttpResponse r = JsonAnswer(status, Json::parse(ErrorBody(s)));
  r.headers.emplace_back("x-amzn-ErrorType", ToEcsError(s.code()).type);
  return r;
}

// Redirect: a 302 whose body, like every other answer of the port, is JSON.
HttpResponse Redirect(const std::string& location) {
  HttpResponse r = JsonAnswer(302, {{"location", location}});
  r.headers.emplace_back("Location", location);
  return r;
}

std::string SessionCookie(const std::string& token) {
  return std::string(kSessionCookie) + "=" + token + "; HttpOnly; SameSite=Strict; Path=/";
}

// ---- the reads -------------------------------------------------------------------------------------------------

// Holder: one task's share of one GPU, for the instances page's strips.
struct Holder {
  const Task* task;
  const GpuReservation* reservation;
};

// UsedMemory: where the reads find each task's GPU memory in use, and the time they answer at.
struct UsedMemory {
  const GpuMemoryUsage* usage = nullptr;  // null: nothing reported
  EpochMs now = 0;

  // Of: the task's latest figures; none when its agent reported none or the task stopped.
  std::optional<GpuMemoryUsage::Reading> Of(const Task& t) const {
    if (usage == nullptr || t.last_status == TaskStatus::kStopped) return std::nullopt;
    return usage->Of(t.arn);
  }
  // AddReadTime: when the figures were read (server clock, epoch ms) and how long before this answer.
  void AddReadTime(Json& j, const GpuMemoryUsage::Reading& r) const {
    j["gpuMemoryReadAt"] = r.read_at;
    j["gpuMemoryReadAgoMs"] = std::max<EpochMs>(0, now - r.read_at);
  }
};

Json GpuJson(const Gpu& g, const std::vector<Holder>& holders, const UsedMemory& used) {
  Json hs = Json::array();
  for (const Holder& h : holders) {
    Json holder = {{"task", h.task->id},
                   {"definition", FamilyRevisionOf(h.task->task_definition_arn)},
                   {"status", Name(h.task->last_status)},
                   {"mib", h.reservation->dedicated ? g.total_memory_mib : h.reservation->memory_mib},
                   {"compute", h.reservation->dedicated ? 100 : h.reservation->compute_percent},
                   {"dedicated", h.reservation->dedicated}};
    if (auto r = used.Of(*h.task); r && r->gpus.count(g.id)) {
      holder["gpuMemoryUsedBytes"] = r->gpus.at(g.id);
      used.AddReadTime(holder, *r);
    }
    hs.push_back(std::move(holder));
  }
  return {{"id", g.id},
          {"mode", GpuModeName(g.mode)},
          {"total", g.total_memory_mib},
          {"remaining", g.remaining_memory_mib},
          {"compute", g.compute_used_percent},
          {"containers", g.container_count},
          {"held", g.held},
          {"holders", std::move(hs)}};
}

Json InstanceJson(const ContainerInstance& inst, const std::unordered_map<std::string, std::vector<Holder>>& by_gpu,
                  const UsedMemory& used) {
  static const std::vector<Holder> kNone;
  Json gpus = Json::array();
  for (const Gpu& g : inst.gpus) {
    auto it = by_gpu.find(inst.arn + "\n" + g.id);
    gpus.push_back(GpuJson(g, it == by_gpu.end() ? kNone : it->second, used));
  }
  return {{"arn", inst.arn},
          {"id", inst.id},
          {"ec2InstanceId", inst.ec2_instance_id},
          {"status", Name(inst.status)},
          {"statusReason", inst.status_reason},
          {"agentConnected", inst.agent_connected},
          {"health", inst.impaired ? "IMPAIRED" : "OK"},
          {"agentVersion", inst.agent_version},
          {"running", inst.running_tasks_count},
          {"pending", inst.pending_tasks_count},
          {"cpu", {{"registered", inst.registered.cpu}, {"remaining", inst.remaining.cpu}}},
          {"memory", {{"registered", inst.registered.memory}, {"remaining", inst.remaining.memory}}},
          {"gpus", std::move(gpus)}};
}

// TaskJson: a task, each GPU it holds with what it declared there (declaredMib: a dedicated GPU's whole memory)
// and, when its agent reported them, the bytes it uses there; a GPU it uses without holding it comes after its
// own, with reserved false.
Json TaskJson(const Task& t, const ReadView& view, const UsedMemory& used) {
  const std::optional<GpuMemoryUsage::Reading> reading = used.Of(t);
  const ContainerInstance* instance = view.FindInstance(t.container_instance_arn);
  auto total_of = [instance](const std::string& gpu_id) -> MiB {
    if (instance != nullptr)
      for (const Gpu& g : instance->gpus)
        if (g.id == gpu_id) return g.total_memory_mib;
    return 0;
  };
  Json gpus = Json::array();
  MiB declared = 0;
  for (const auto& r : t.gpu_reservations) {
    const MiB d = r.dedicated ? total_of(r.gpu_id) : r.memory_mib;
    declared += d;
    Json g = {{"id", r.gpu_id}, {"mib", r.memory_mib}, {"declaredMib", d},       {"compute", r.compute_percent},
              {"dedicated", r.dedicated}, {"reserved", true}};
    if (reading && reading->gpus.count(r.gpu_id)) g["gpuMemoryUsedBytes"] = reading->gpus.at(r.gpu_id);
    gpus.push_back(std::move(g));
  }
  Json out = {{"arn", t.arn},
          {"id", t.id},
          {"cluster", t.cluster},
          {"definition", FamilyRevisionOf(t.task_definition_arn)},
          {"lastStatus", Name(t.last_status)},
          {"desiredStatus", Name(t.desired_status)},
          {"instance", NameFromArn(t.container_instance_arn)},
          {"instanceArn", t.container_instance_arn},
          {"startedBy", t.started_by},
          {"group", t.group},
          {"createdAt", t.created_at},
          {"stoppedAt", t.stopped_at},
          {"stopCode", t.stop_code},
          {"stoppedReason", t.stopped_reason}};
  out["gpuMemoryDeclaredMib"] = declared;
  // The runtime its agent runs ("process": images are not used; the console says so instead of showing them).
  if (const Attribute* runtime = instance != nullptr ? instance->FindAttribute("gpupack.runtime") : nullptr)
    out["runtime"] = runtime->value.value_or("");
  if (reading) {
    int64_t in_use = 0;
    for (const auto& entry : reading->gpus) {  // no structured binding: a lambda below names the GPU
      const std::string& gpu_id = entry.first;
      in_use += entry.second;
      const bool reserved = std::any_of(t.gpu_reservations.begin(), t.gpu_reservations.end(),
                                        [&gpu_id](const GpuReservation& r) { return r.gpu_id == gpu_id; });
      if (!reserved)
        gpus.push_back({{"id", gpu_id}, {"mib", 0}, {"declaredMib", 0}, {"compute", 0}, {"dedicated", false},
                        {"reserved", false}, {"gpuMemoryUsedBytes", entry.second}});
    }
    out["gpuMemoryUsedBytes"] = in_use;
    used.AddReadTime(out, *reading);
  }
  out["gpus"] = std::move(gpus);
  return out;
}

// FragmentationJson: a cluster's fragmentation figures (engine/core/fragmentation_figures.h), in MiB.
Json FragmentationJson(const ClusterFragmentation& f) {
  auto figures = [](const FreeMemory& m) {
    return Json{{"largestFreeBlockMib", m.largest_block}, {"freeMib", m.free}, {"strandedMib", m.stranded},
                {"gpus", m.gpus}};
  };
  Json out = figures(f.total);
  out["smallestRecentDemandMib"] = f.smallest_recent_demand ? Json(*f.smallest_recent_demand) : Json();
  out["recentDedicated"] = f.recent_dedicated;
  out["recentTasks"] = f.recent_tasks;
  Json types = Json::array();
  for (const auto& [type, m] : f.by_instance_type) {
    Json j = figures(m);
    j["instanceType"] = type;
    types.push_back(std::move(j));
  }
  out["byInstanceType"] = std::move(types);
  return out;
}

Json Overview(const ReadView& view, const RefusalLog& refusals, EpochMs now) {
  struct Tally {
    int instances = 0, active = 0, connected = 0, gpus = 0, shared = 0, dedicated = 0, held = 0;
    int64_t gpu_total = 0, gpu_allocated = 0;
    std::map<std::string, int> tasks;
  };
  std::map<std::string, Tally> tally;
  for (const Cluster* c : view.Clusters()) {
    Tally& t = tally[c->name];
    for (const InstanceRecord* r : view.InstancesOf(c->name)) {
      const ContainerInstance& inst = r->instance;
      if (inst.status == InstanceStatus::kInactive) continue;
      ++t.instances;
      if (inst.status == InstanceStatus::kActive) ++t.active;
      if (inst.agent_connected) ++t.connected;
      for (const Gpu& g : inst.gpus) {
        ++t.gpus;
        t.gpu_total += g.total_memory_mib;
        t.gpu_allocated += g.total_memory_mib - g.remaining_memory_mib;
        if (g.mode == GpuMode::kMps) ++t.shared;
        if (g.mode == GpuMode::kDedicated) ++t.dedicated;
        if (g.held) ++t.held;
      }
    }
  }
  view.ForEachTask([&](const Task& task) {
    auto it = tally.find(task.cluster);
    if (it != tally.end()) ++it->second.tasks[Name(task.last_status)];
  });
  const FragmentationFigures fragmentation = ComputeFragmentation(view, now);
  Json clusters = Json::array();
  for (const Cluster* c : view.Clusters()) {
    const Tally& t = tally[c->name];
    Json tasks = {{"PENDING", 0}, {"RUNNING", 0}, {"STOPPED", 0}};
    for (const auto& [status, n] : t.tasks) tasks[status] = n;
    clusters.push_back({{"name", c->name},
                        {"status", Name(c->status)},
                        {"instances", t.instances},
                        {"activeInstances", t.active},
                        {"connectedAgents", t.connected},
                        {"gpus", t.gpus},
                        {"sharedGpus", t.shared},
                        {"dedicatedGpus", t.dedicated},
                        {"heldGpus", t.held},
                        {"gpuMemoryTotal", t.gpu_total},
                        {"gpuMemoryAllocated", t.gpu_allocated},
                        {"tasks", std::move(tasks)},
                        {"refusedLastHour", refusals.LastHour(c->name, now)},
                        {"fragmentation", FragmentationJson(fragmentation.at(c->name))}});
  }
  return {{"clusters", std::move(clusters)}};
}

Json Instances(const ReadView& view, const ArnContext& arn, const std::map<std::string, std::string>& q,
               const UsedMemory& used) {
  const std::string cluster = Param(q, "cluster").empty() ? "default" : Param(q, "cluster");
  const std::string filter = Param(q, "q");
  const size_t offset = SizeParam(q, "offset", 0, 1u << 30);
  const size_t limit = SizeParam(q, "limit", kDefaultInstancePage, kMaxInstancePage);
  std::vector<const ContainerInstance*> matching;
  for (const InstanceRecord* r : view.InstancesOf(cluster)) {
    const ContainerInstance& inst = r->instance;
    if (inst.status == InstanceStatus::kInactive) continue;
    bool match = filter.empty() || inst.id.find(filter) != std::string::npos ||
                 inst.ec2_instance_id.find(filter) != std::string::npos;
    for (size_t i = 0; !match && i < inst.gpus.size(); ++i) match = inst.gpus[i].id.find(filter) != std::string::npos;
    if (match) matching.push_back(&inst);
  }
  const size_t begin = std::min(offset, matching.size());
  const size_t end = std::min(matching.size(), begin + limit);
  // The holders of the page's GPUs: every task of the cluster that still holds its reservations.
  std::unordered_map<std::string, std::vector<Holder>> by_gpu;  // "<instance ARN>\n<GPU id>" -> holders
  std::unordered_map<std::string_view, bool> on_page;
  for (size_t i = begin; i < end; ++i) on_page[matching[i]->arn] = true;
  view.ForEachTask([&](const Task& t) {
    if (t.resources_released || t.cluster != cluster || !on_page.count(t.container_instance_arn)) return;
    for (const auto& r : t.gpu_reservations) by_gpu[t.container_instance_arn + "\n" + r.gpu_id].push_back({&t, &r});
  });
  for (auto& [key, holders] : by_gpu) {
    std::sort(holders.begin(), holders.end(), [](const Holder& a, const Holder& b) {
      return a.task->created_at != b.task->created_at ? a.task->created_at < b.task->created_at
                                                      : a.task->arn < b.task->arn;
    });
  }
  Json instances = Json::array();
  for (size_t i = begin; i < end; ++i) instances.push_back(InstanceJson(*matching[i], by_gpu, used));
  return {{"cluster", cluster},
          {"taskArnPrefix", arn.TaskArn(cluster, "")},  // a holder's ARN is this and its "task"
          {"total", matching.size()},
          {"offset", begin},
          {"limit", limit},
          {"instances", std::move(instances)}};
}

Json Tasks(const ReadView& view, const std::map<std::string, std::string>& q, const UsedMemory& used) {
  const std::string cluster = Param(q, "cluster"), status = Param(q, "status"), family = Param(q, "family"),
                    started_by = Param(q, "startedBy"), arn = Param(q, "arn"), group = Param(q, "group");
  const bool live = Param(q, "live") == "1";
  const size_t limit = SizeParam(q, "limit", kDefaultTaskLimit, kMaxTaskLimit);
  std::vector<const Task*> matching;
  view.ForEachTask([&](const Task& t) {
    if (!cluster.empty() && t.cluster != cluster) return;
    if (!arn.empty() && t.arn != arn) return;
    if (!status.empty() && status != Name(t.last_status)) return;
    if (live && t.last_status == TaskStatus::kStopped) return;
    if (!group.empty() && t.group != group) return;
    if (!family.empty() && FamilyOf(t.task_definition_arn) != family) return;
    if (!started_by.empty() && t.started_by != started_by) return;
    matching.push_back(&t);
  });
  const size_t shown = std::min(limit, matching.size());
  auto newest_first = [](const Task* a, const Task* b) {
    return a->created_at != b->created_at ? a->created_at > b->created_at : a->arn > b->arn;
  };
  std::partial_sort(matching.begin(), matching.begin() + static_cast<std::ptrdiff_t>(shown), matching.end(),
                    newest_first);
  Json tasks = Json::array();
  for (size_t i = 0; i < shown; ++i) tasks.push_back(TaskJson(*matching[i], view, used));
  Json families = Json::array();
  for (const auto& [name, revisions] : view.TaskDefinitions()) families.push_back(name);
  Json clusters = Json::array();
  for (const Cluster* c : view.Clusters()) clusters.push_back(c->name);
  return {{"total", matching.size()}, {"tasks", std::move(tasks)}, {"families", families}, {"clusters", clusters}};
}

// Services: the services not INACTIVE (as ListServices lists them) of `cluster`, or of every cluster, in ARN
// order (cluster, then name), each with its replica counts, its PRIMARY deployment's rollout and its latest event.
Json Services(const ReadView& view, const ArnContext& arn, const std::map<std::string, std::string>& q) {
  const std::string cluster = Param(q, "cluster");
  const std::string prefix = cluster.empty() ? "" : arn.ServiceArn(cluster, "");
  Json services = Json::array();
  for (auto it = view.ServiceArns().lower_bound(prefix); it != view.ServiceArns().end(); ++it) {
    if (it->rfind(prefix, 0) != 0) break;
    const std::shared_ptr<const Service> found = view.FindService(*it);
    if (!found) continue;
    const Service& svc = *found;
    if (svc.status == ServiceStatus::kInactive) continue;
    const ServiceDeployment* primary = svc.Primary();
    Json j = {{"arn", svc.arn},
              {"name", svc.name},
              {"cluster", svc.cluster},
              {"status", Name(svc.status)},
              {"schedulingStrategy", svc.daemon ? "DAEMON" : "REPLICA"},
              {"desired", svc.desired_count},
              {"running", svc.running_count},
              {"pending", svc.pending_count},
              {"taskDefinition", FamilyRevisionOf(svc.task_definition_arn)},
              {"deployments", svc.deployments.size()},
              {"rolloutState", primary ? Name(primary->rollout_state) : ""},
              {"rolloutStateReason", primary ? primary->rollout_state_reason : ""}};
    if (!svc.events.empty())
      j["latestEvent"] = {{"at", svc.events.front().created_at}, {"message", svc.events.front().message}};
    services.push_back(std::move(j));
  }
  Json clusters = Json::array();
  for (const Cluster* c : view.Clusters()) clusters.push_back(c->name);
  return {{"services", std::move(services)}, {"clusters", std::move(clusters)}};
}

Json RefusalsJson(const RefusalLog& refusals) {
  Json out = Json::array();
  for (const PlacementRefusal& r : refusals.recent()) {
    Json failures = Json::array();
    for (const Failure& f : r.failures) {
      Json j = {{"arn", f.arn}, {"reason", f.reason}};
      if (!f.detail.empty()) j["detail"] = f.detail;
      failures.push_back(std::move(j));
    }
    const bool overridden = !r.overrides.container_overrides.empty() || r.overrides.cpu || r.overrides.memory;
    out.push_back({{"at", r.at},
                   {"cluster", r.cluster},
                   {"taskDefinition", r.task_definition},
                   {"overrides", overridden ? ToJson(r.overrides).dump(-1, ' ', false, Json::error_handler_t::replace)
                                            : std::string()},
                   {"tasks", r.tasks},
                   {"failures", std::move(failures)}});
  }
  return {{"refusals", std::move(out)}};
}

}  // namespace

// ---- ConsoleHandler --------------------------------------------------------------------------------------------

ConsoleHandler::ConsoleHandler(ControlPlane& control_plane) : cp_(control_plane) {}

void ConsoleHandler::Handle(const HttpRequest& req, const std::string& request_id, const Responder& respond) const {
  if (auto local = ConsoleStaticAnswer(req, request_id)) {
    respond(std::move(*local));
    return;
  }
  const size_t question = req.target.find('?');
  const std::string path = req.target.substr(0, question);
  const std::string query = question == std::string::npos ? "" : req.target.substr(question + 1);
  HttpResponse r;
  if (path == "/console/session") {
    r = SessionCall(req);
  } else if (path.rfind("/console/api/", 0) == 0) {
    r = req.method == "GET" || req.method == "HEAD"
            ? Read(req, path, query)
            : ErrorAnswer(405, Status::Client("the console's reads take GET"));
  } else if (req.method == "GET" || req.method == "HEAD") {
    r = ErrorAnswer(404, Status::Client("no such console page: " + path.substr(0, 200)));
  } else {
    r = ErrorAnswer(405, Status::Client("the console's pages take GET"));
  }
  AddSecurityHeaders(r, request_id);
  respond(std::move(r));
}

std::optional<HttpResponse> ConsoleStaticAnswer(const HttpRequest& req, const std::string& request_id) {
  static const std::map<std::string, std::pair<std::string, std::string>> kFiles = {
      {"/console/", {"index.html", "text/html; charset=utf-8"}},
      {"/console/index.html", {"index.html", "text/html; charset=utf-8"}},
      {"/console/app.js", {"app.js", "text/javascript; charset=utf-8"}},
      {"/console/services.js", {"services.js", "text/javascript; charset=utf-8"}},
      {"/console/waiting.js", {"waiting.js", "text/javascript; charset=utf-8"}},
      {"/console/fragmentation.js", {"fragmentation.js", "text/javascript; charset=utf-8"}},
      {"/console/app.css", {"app.css", "text/css; charset=utf-8"}},
  };
  if (req.method != "GET" && req.method != "HEAD") return std::nullopt;
  const std::string path = req.target.substr(0, req.target.find('?'));
  HttpResponse r;
  if (path == "/" || path == "/console") {
    r = Redirect("/console/");
  } else if (auto it = kFiles.find(path); it != kFiles.end()) {
    r.headers = {{"Content-Type", it->second.second}};
    r.body = std::string(ConsoleAssetBody(it->second.first));
  } else {
    return std::nullopt;
  }
  AddSecurityHeaders(r, request_id);
  return r;
}

HttpResponse ConsoleHandler::SessionCall(const HttpRequest& req) const {
  if (req.method == "GET" || req.method == "HEAD") {
    // Who am I: whether the console needs a login, and the session's key and role when there is one.
    if (auth_ == nullptr) return JsonAnswer(200, {{"authRequired", false}, {"loggedIn", false}, {"canWrite", true}});
    std::optional<ConsoleSession> who;
    for (const auto& [name, value] : req.headers) {
      if (name != "cookie") continue;
      if (auto token = SessionTokenOf(value)) who = auth_->Session(*token);
      if (who) break;
    }
    if (!who) return JsonAnswer(200, {{"authRequired", true}, {"loggedIn", false}, {"canWrite", false}});
    return JsonAnswer(200, {{"authRequired", true},
                            {"loggedIn", true},
                            {"accessKeyId", who->access_key_id},
                            {"role", KeyRoleName(who->role)},
                            {"canWrite", who->role == KeyRole::kAdmin}});
  }
  if (req.Header(kConsoleHeader) == nullptr)
    return ErrorAnswer(403, Status(ErrorCode::kAccessDenied, "console calls need the X-Gpupack-Console header"));
  if (auth_ == nullptr)
    return ErrorAnswer(400, Status::Client("this server runs without --credentials: the console needs no login"));
  if (req.method == "DELETE") {
    for (const auto& [name, value] : req.headers) {
      if (name != "cookie") continue;
      if (auto token = SessionTokenOf(value)) auth_->Logout(*token);
    }
    HttpResponse r = JsonAnswer(200, {{"loggedIn", false}});
    r.headers.emplace_back("Set-Cookie",
                           std::string(kSessionCookie) + "=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    return r;
  }
  if (req.method != "POST") return ErrorAnswer(405, Status::Client("/console/session takes GET, POST or DELETE"));
  Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || !body.contains("accessKeyId") || !body["accessKeyId"].is_string() ||
      !body.contains("secretAccessKey") || !body["secretAccessKey"].is_string())
    return ErrorAnswer(400, Status::Client("log in with {\"accessKeyId\": ..., \"secretAccessKey\": ...}"));
  auto token = auth_->Login(body["accessKeyId"].get<std::string>(), body["secretAccessKey"].get<std::string>());
  if (!token.ok()) return ErrorAnswer(token.status().code() == ErrorCode::kServer ? 500 : 401, token.status());
  std::optional<ConsoleSession> who = auth_->Session(*token);
  HttpResponse r = JsonAnswer(200, {{"authRequired", true},
                                    {"loggedIn", true},
                                    {"accessKeyId", who ? who->access_key_id : ""},
                                    {"role", who ? KeyRoleName(who->role) : "reader"},
                                    {"canWrite", who && who->role == KeyRole::kAdmin}});
  r.headers.emplace_back("Set-Cookie", SessionCookie(*token));
  return r;
}

HttpResponse ConsoleHandler::Read(const HttpRequest& req, const std::string& path, const std::string& query) const {
  if (auth_ != nullptr) {
    SigV4Result who = auth_->Authenticate(req);
    Status s = RequestAuthenticator::Authorize(who, kConsoleReadAction);
    // Whatever the refusal (no session, a bad signature, an agent key's signature): 401 AccessDenied.
    if (!s.ok())
      return ErrorAnswer(401, s.code() == ErrorCode::kAccessDenied ? s : Status(ErrorCode::kAccessDenied, s.message()));
  }
  const auto q = QueryOf(query);
  std::shared_ptr<const ReadView> view = cp_.applier().View();
  const std::shared_ptr<const RefusalLog> refusals = cp_.applier().counters().refusals;
  const std::string version = std::to_string(view->sequence()) + "." + std::to_string(refusals->generation()) + "." +
                              std::to_string(gpu_memory_ ? gpu_memory_->generation() : 0);
  const UsedMemory used{gpu_memory_, cp_.applier().Now()};
  if (Param(q, "since") == version) return JsonAnswer(200, {{"version", version}, {"unchanged", true}});
  Json out;
  if (path == "/console/api/overview") {
    out = Overview(*view, *refusals, cp_.applier().Now());
  } else if (path == "/console/api/instances") {
    out = Instances(*view, cp_.applier().arn(), q, used);
  } else if (path == "/console/api/tasks") {
    out = Tasks(*view, q, used);
  } else if (path == "/console/api/services") {
    out = Services(*view, cp_.applier().arn(), q);
  } else if (path == "/console/api/waiting") {
    out = {{"lines", WaitingLines(*view, cp_.applier().arn(), Param(q, "cluster"), SizeParam(q, "shown", 100, 1000),
                                  cp_.applier().Now(), cp_.applier().placement())}};
    Json clusters = Json::array();
    for (const Cluster* c : view->Clusters()) clusters.push_back(c->name);
    out["clusters"] = std::move(clusters);
  } else if (path == "/console/api/refusals") {
    out = RefusalsJson(*refusals);
  } else {
    return ErrorAnswer(404, Status::Client("no such console read: " + path.substr(0, 200)));
  }
  out["version"] = version;
  return JsonAnswer(200, out);
}

}  // namespace gpupack::api
