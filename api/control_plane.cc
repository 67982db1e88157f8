#include "api/control_plane.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>

#include "scheduler/placement.h"
#include "scheduler/query.h"
#include "scheduler/validation.h"

namespace gpupack::api {

struct ControlPlane::Ctx {
  Json out = Json::object();
  WriteBatch batch;
  std::vector<std::pair<std::string, Json>> pushes;  // (instance ARN, message) sent once the batch is durable
  // A write's successful answer waits for every commit submitted before it, even when the write itself changes
  // nothing: a RunTask that repeats a clientToken, a StopTask or STOPPED report repeated by a retry, answer from
  // the memory state, which an earlier write still in commit may have changed; answered at once, a crash before
  // that commit would undo what they acknowledged.
  bool write = false;
};

namespace {

constexpr size_t kMaxDescribe = 100;
constexpr int kMaxRunCount = 10;

#define GP_TRY(expr)                    \
  do {                                  \
    Status _s = (expr);                 \
    if (!_s.ok()) return _s;            \
  } while (0)

#define GP_ASSIGN(lhs, expr)            \
  auto lhs##_r = (expr);                \
  if (!lhs##_r.ok()) return lhs##_r.status(); \
  auto lhs = std::move(lhs##_r).value()

std::string HexToken(size_t offset) {
  std::ostringstream s;
  s << "gp1." << std::hex << offset;
  return s.str();
}

// Pagination over an already ordered list: maxResults 1..100 (default 100), nextToken from HexToken.
Result<std::pair<size_t, size_t>> Page(const Json& in, size_t total) {
  GP_ASSIGN(max_results, OptInt(in, "maxResults"));
  GP_ASSIGN(token, OptString(in, "nextToken"));
  size_t limit = 100;
  if (max_results) {
    if (*max_results < 1 || *max_results > 100)
      return Status::InvalidParameter("maxResults must be between 1 and 100");
    limit = static_cast<size_t>(*max_results);
  }
  size_t begin = 0;
  if (token && !token->empty()) {
    if (token->rfind("gp1.", 0) != 0 || token->size() > 20)
      return Status::InvalidParameter("nextToken is not a token this server issued");
    try {
      begin = std::stoull(token->substr(4), nullptr, 16);
    } catch (...) {
      return Status::InvalidParameter("nextToken is not a token this server issued");
    }
    if (begin > total) begin = total;
  }
  return std::make_pair(begin, std::min(total, begin + limit));
}

template <typename T>
void EmitPage(Json& out, const char* key, const std::vector<T>& all, std::pair<size_t, size_t> range) {
  Json list = Json::array();
  for (size_t i = range.first; i < range.second; ++i) list.push_back(all[i]);
  out[key] = list;
  if (range.second < all.size()) out["nextToken"] = HexToken(range.second);
}

Status RequireString(const Json& in, const std::string& key, std::string& out) {
  GP_ASSIGN(v, OptString(in, key));
  if (!v || v->empty()) return Status::InvalidParameter(key + " is required");
  out = *v;
  return Status::Ok();
}

bool UsesChannel(const ContainerInstance& inst) {
  return inst.FindAttribute(ControlPlane::kChannelAttribute) != nullptr;
}

bool IsTerminal(const std::string& status) { return status == "STOPPED" || status == "DELETED"; }

bool IsTaskStatus(const std::string& status) { return status == "PENDING" || status == "RUNNING" || status == "STOPPED"; }

// LabelValue escapes a Prometheus label value (back slash, quote, newline), e.g. a GPU id stored before ids
// were checked.
std::string LabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void SortAttributes(std::vector<Attribute>& attrs) {
  std::stable_sort(attrs.begin(), attrs.end(), [](const Attribute& a, const Attribute& b) { return a.name < b.name; });
  std::vector<Attribute> unique;
  for (auto& a : attrs) {
    if (!unique.empty() && unique.back().name == a.name) unique.back() = std::move(a);
    else unique.push_back(std::move(a));
  }
  attrs = std::move(unique);
}

}  // namespace

ControlPlane::ControlPlane(ControlPlaneOptions options, Store& store, GroupCommitter& committer)
    : options_(std::move(options)), store_(store), committer_(committer) {
  if (!options_.clock)
    options_.clock = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch()).count();
    };
  rng_.seed(options_.seed ? options_.seed : std::random_device{}());
}

ControlPlane::~ControlPlane() = default;

EpochMs ControlPlane::Now() const { return options_.clock(); }

std::string ControlPlane::NewId() {
  static const char* kHex = "0123456789abcdef";
  std::string id(32, '0');
  uint64_t a = rng_(), b = rng_();
  for (int i = 0; i < 16; ++i) {
    id[i] = kHex[(a >> (i * 4)) & 15];
    id[16 + i] = kHex[(b >> (i * 4)) & 15];
  }
  return id;
}

Status ControlPlane::Load() {
  std::lock_guard lock(mu_);
  // Tasks go straight from the store into state_ (PutTask needs no cluster or instance and touches no
  // reservation), so a restart never holds every decoded task twice. The store hands them over before it
  // returns the rest of the snapshot; if it then fails, the tasks it handed over are dropped again, leaving
  // state_ as it was (Load runs once, on a plane that holds no task yet).
  std::vector<std::string> held_before;
  for (const auto& [arn, task] : state_.Tasks()) held_before.push_back(arn);
  auto snap = store_.LoadStreaming([this](Task&& t) {
    state_.PutTask(std::move(t));
    return Status::Ok();
  });
  if (!snap.ok()) {
    std::vector<std::string> streamed;
    for (const auto& [arn, task] : state_.Tasks())
      if (std::find(held_before.begin(), held_before.end(), arn) == held_before.end()) streamed.push_back(arn);
    for (const std::string& arn : streamed) {
      state_.FindTask(arn)->resources_released = true;  // never reserved: it was only put
      (void)state_.EraseStoppedTask(arn);
    }
    return snap.status();
  }
  for (auto& c : snap->clusters) state_.PutCluster(std::move(c));
  for (auto& td : snap->task_definitions) state_.PutTaskDefinition(std::move(td));
  for (auto& i : snap->instances) {
    if (UsesChannel(i)) i.agent_connected = false;  // until its agent says hello again
    state_.PutInstance(std::move(i));
  }
  for (auto& ct : snap->client_tokens) state_.PutClientToken(std::move(ct));
  state_.RebuildReservations();
  return Status::Ok();
}

const std::map<std::string, ControlPlane::Handler>& ControlPlane::Handlers() {
  static const std::map<std::string, Handler> kHandlers = {
      {"CreateCluster", &ControlPlane::CreateCluster},
      {"DeleteCluster", &ControlPlane::DeleteCluster},
      {"DescribeClusters", &ControlPlane::DescribeClusters},
      {"ListClusters", &ControlPlane::ListClusters},
      {"UpdateClusterSettings", &ControlPlane::UpdateClusterSettings},
      {"RegisterTaskDefinition", &ControlPlane::RegisterTaskDefinition},
      {"DeregisterTaskDefinition", &ControlPlane::DeregisterTaskDefinition},
      {"DescribeTaskDefinition", &ControlPlane::DescribeTaskDefinition},
      {"ListTaskDefinitions", &ControlPlane::ListTaskDefinitions},
      {"ListTaskDefinitionFamilies", &ControlPlane::ListTaskDefinitionFamilies},
      {"RunTask", &ControlPlane::RunTask},
      {"StartTask", &ControlPlane::StartTask},
      {"StopTask", &ControlPlane::StopTask},
      {"DescribeTasks", &ControlPlane::DescribeTasks},
      {"ListTasks", &ControlPlane::ListTasks},
      {"RegisterContainerInstance", &ControlPlane::RegisterContainerInstance},
      {"DeregisterContainerInstance", &ControlPlane::DeregisterContainerInstance},
      {"DescribeContainerInstances", &ControlPlane::DescribeContainerInstances},
      {"ListContainerInstances", &ControlPlane::ListContainerInstances},
      {"UpdateContainerInstancesState", &ControlPlane::UpdateContainerInstancesState},
      {"PutAttributes", &ControlPlane::PutAttributes},
      {"DeleteAttributes", &ControlPlane::DeleteAttributes},
      {"ListAttributes", &ControlPlane::ListAttributes},
      {"SubmitTaskStateChange", &ControlPlane::SubmitTaskStateChange},
      {"SubmitContainerStateChange", &ControlPlane::SubmitContainerStateChange},
      {"ExplainPlacement", &ControlPlane::ExplainPlacement},
  };
  return kHandlers;
}

bool ControlPlane::Knows(const std::string& operation) { return Handlers().count(operation) != 0; }

void ControlPlane::Execute(const std::string& operation, const Json& body, Done done) {
  auto it = Handlers().find(operation);
  if (it == Handlers().end()) {
    done({Status(ErrorCode::kUnknownOperation, "unknown operation '" + operation.substr(0, 100) + "'"), {}});
    return;
  }
  if (!body.is_object()) {
    done({Status::Client("request body must be a JSON object"), {}});
    return;
  }
  Handler handler = it->second;
  const bool read = operation.rfind("Describe", 0) == 0 || operation.rfind("List", 0) == 0 || operation == "ExplainPlacement";
  Run([&](Ctx& ctx) {
    ctx.write = !read;
    return (this->*handler)(body, ctx);
  }, std::move(done));
}

void ControlPlane::Run(const std::function<Status(Ctx&)>& op, Done done) {
  std::unique_lock lock(mu_);
  Ctx ctx;
  PurgeExpired(ctx);
  Status s;
  try {
    s = op(ctx);
  } catch (const std::exception& e) {
    s = Status::Server(std::string("internal error: ") + e.what());
  }
  const bool wait_durable = !ctx.batch.empty() || (ctx.write && s.ok());
  if (wait_durable && degraded_.load()) {
    // The disk is behind memory; nothing more may be acknowledged until a restart reloads the durable state.
    done({Status::Server("the server could not persist an earlier change and refuses writes until restarted"), {}});
    return;
  }
  auto push = [this](std::vector<std::pair<std::string, Json>>& pushes) {
    if (!notifier_) return;
    for (auto& [arn, message] : pushes) notifier_(arn, std::move(message));
  };
  if (!wait_durable) {
    lock.unlock();
    push(ctx.pushes);
    done({s, s.ok() ? std::move(ctx.out) : Json()});
    return;
  }
  // Writes (a failed RunTask writes nothing; a purge may ride along with a read) are answered once durable;
  // agents hear of new assignments and stops only then, so they never act on a change that could be lost. A
  // write with an empty batch goes through the committer too, as a barrier behind the commits before it.
  auto shared_done = std::make_shared<Done>(std::move(done));
  Json out = s.ok() ? std::move(ctx.out) : Json();
  committer_.Submit(std::move(ctx.batch), [this, shared_done, s, out = std::move(out), pushes = std::move(ctx.pushes),
                                           push](Status commit) mutable {
    if (!commit.ok()) {
      degraded_.store(true);
      spdlog::error("commit failed, refusing writes until restart: {}", commit.message());
      (*shared_done)({Status::Server("could not persist the change: " + commit.message()), {}});
      return;
    }
    push(pushes);
    (*shared_done)({s, std::move(out)});
  });
}

// ---- helpers ---------------------------------------------------------------------------------------------

Result<const Cluster*> ControlPlane::ActiveCluster(const Json& in) {
  GP_ASSIGN(ref, OptString(in, "cluster"));
  GP_ASSIGN(name, ClusterNameFrom(options_.arn, ref.value_or("")));
  const Cluster* c = state_.FindCluster(name);
  if (!c || c->status != "ACTIVE") return Status::ClusterNotFound("Cluster not found: " + name);
  return c;
}

Result<const TaskDefinition*> ControlPlane::ResolveTaskDefinition(const std::string& ref) {
  GP_ASSIGN(r, TaskDefinitionRefFrom(options_.arn, ref));
  const TaskDefinition* td = r.revision ? state_.FindTaskDefinition(r.family, r.revision)
                                        : state_.LatestActiveRevision(r.family);
  if (!td) return Status::Client("Unable to describe task definition '" + ref.substr(0, 300) + "': not found");
  return td;
}

Result<Task*> ControlPlane::ResolveTask(const std::string& cluster, const std::string& ref) {
  GP_ASSIGN(id, ResourceIdFrom(options_.arn, "task", ref, cluster));
  Task* t = state_.FindTask(options_.arn.TaskArn(cluster, id));
  if (!t) return Status::InvalidParameter("The referenced task was not found: " + ref.substr(0, 300));
  return t;
}

Result<ContainerInstance*> ControlPlane::ResolveInstance(const std::string& cluster, const std::string& ref) {
  GP_ASSIGN(id, ResourceIdFrom(options_.arn, "container-instance", ref, cluster));
  ContainerInstance* inst = state_.FindInstance(options_.arn.InstanceArn(cluster, id));
  if (!inst || inst->status == "INACTIVE")
    return Status::InvalidParameter("The referenced container instance was not found: " + ref.substr(0, 300));
  return inst;
}

void ControlPlane::PurgeExpired(Ctx& ctx) {
  EpochMs now = Now();
  if (now - last_purge_ < 60'000) return;
  last_purge_ = now;
  std::vector<std::string> expired;
  for (const auto& [arn, t] : state_.Tasks())
    if (t.last_status == "STOPPED" && t.resources_released && t.stopped_at &&
        now - t.stopped_at > options_.stopped_task_retention_ms)
      expired.push_back(arn);
  for (const auto& arn : expired)
    if (state_.EraseStoppedTask(arn).ok()) ctx.batch.DeleteTask(arn);
}

// ---- clusters --------------------------------------------------------------------------------------------

Status ControlPlane::CreateCluster(const Json& in, Ctx& ctx) {
  GP_ASSIGN(name_opt, OptString(in, "clusterName"));
  GP_ASSIGN(name, ClusterNameFrom(options_.arn, name_opt.value_or("default")));
  GP_ASSIGN(tags, ParseTags(in));
  ClusterSettings settings;
  if (const auto* s = in.contains("settings") ? &in["settings"] : nullptr; s && !s->is_null()) {
    GP_ASSIGN(attrs, ParseAttributes(*s, "settings"));
    for (const auto& a : attrs) {
      if (a.name == "gpupack.computeAwarePlacement") {
        if (a.value != "enabled" && a.value != "disabled")
          return Status::InvalidParameter("setting gpupack.computeAwarePlacement must be 'enabled' or 'disabled'");
        settings.compute_aware_placement = a.value == "enabled";
      } else if (a.name != "containerInsights") {
        return Status::InvalidParameter("unknown cluster setting '" + a.name + "'");
      }
    }
  }
  const Cluster* existing = state_.FindCluster(name);
  if (existing && existing->status == "ACTIVE") {
    ctx.out["cluster"] = ToJson(options_.arn, *existing, state_);
    return Status::Ok();
  }
  Cluster c;
  c.name = name;
  c.arn = options_.arn.ClusterArn(name);
  c.settings = settings;
  c.tags = tags;
  c.created_at = Now();
  state_.PutCluster(c);
  ctx.batch.PutCluster(c);
  ctx.out["cluster"] = ToJson(options_.arn, c, state_);
  return Status::Ok();
}

Status ControlPlane::UpdateClusterSettings(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  Cluster c = *cluster;
  if (!in.contains("settings")) return Status::InvalidParameter("settings is required");
  GP_ASSIGN(attrs, ParseAttributes(in["settings"], "settings"));
  for (const auto& a : attrs) {
    if (a.name == "gpupack.computeAwarePlacement") {
      if (a.value != "enabled" && a.value != "disabled")
        return Status::InvalidParameter("setting gpupack.computeAwarePlacement must be 'enabled' or 'disabled'");
      c.settings.compute_aware_placement = a.value == "enabled";
    } else if (a.name != "containerInsights") {
      return Status::InvalidParameter("unknown cluster setting '" + a.name + "'");
    }
  }
  state_.PutCluster(c);
  ctx.batch.PutCluster(c);
  ctx.out["cluster"] = ToJson(options_.arn, c, state_);
  return Status::Ok();
}

Status ControlPlane::DeleteCluster(const Json& in, Ctx& ctx) {
  std::string ref;
  GP_TRY(RequireString(in, "cluster", ref));
  GP_ASSIGN(cluster, ActiveCluster(in));
  for (const ContainerInstance* inst : state_.InstancesOf(cluster->name))
    if (inst->status != "INACTIVE")
      return Status::Client("The cluster cannot be deleted while container instances are active or draining.");
  for (const auto& [_, t] : state_.Tasks())
    if (t.cluster == cluster->name && t.last_status != "STOPPED")
      return Status::Client("The cluster cannot be deleted while tasks are active.");
  Cluster c = *cluster;
  c.status = "INACTIVE";
  state_.PutCluster(c);
  ctx.batch.PutCluster(c);
  ctx.out["cluster"] = ToJson(options_.arn, c, state_);
  return Status::Ok();
}

Status ControlPlane::DescribeClusters(const Json& in, Ctx& ctx) {
  GP_ASSIGN(refs, OptStringList(in, "clusters"));
  if (refs.size() > kMaxDescribe) return Status::InvalidParameter("clusters can have at most 100 entries");
  if (refs.empty()) refs.push_back("default");
  Json clusters = Json::array(), failures = Json::array();
  for (const auto& ref : refs) {
    auto name = ClusterNameFrom(options_.arn, ref);
    const Cluster* c = name.ok() ? state_.FindCluster(*name) : nullptr;
    if (c) clusters.push_back(ToJson(options_.arn, *c, state_));
    else failures.push_back({{"arn", name.ok() ? options_.arn.ClusterArn(*name) : ref}, {"reason", "MISSING"}});
  }
  ctx.out = {{"clusters", clusters}, {"failures", failures}};
  return Status::Ok();
}

Status ControlPlane::ListClusters(const Json& in, Ctx& ctx) {
  std::vector<std::string> arns;
  for (const Cluster* c : state_.Clusters())
    if (c->status == "ACTIVE") arns.push_back(options_.arn.ClusterArn(c->name));
  GP_ASSIGN(range, Page(in, arns.size()));
  EmitPage(ctx.out, "clusterArns", arns, range);
  return Status::Ok();
}

// ---- task definitions ------------------------------------------------------------------------------------

Status ControlPlane::RegisterTaskDefinition(const Json& in, Ctx& ctx) {
  GP_ASSIGN(td, ParseRegisterTaskDefinition(in));
  GP_TRY(ValidateTaskDefinition(td));
  td.revision = state_.LatestRevision(td.family) + 1;
  td.arn = options_.arn.TaskDefinitionArn(td.family, td.revision);
  td.status = "ACTIVE";
  td.registered_at = Now();
  state_.PutTaskDefinition(td);
  ctx.batch.PutTaskDefinition(td);
  ctx.out["taskDefinition"] = ToJson(td);
  ctx.out["tags"] = ToJson(td.tags, true);
  return Status::Ok();
}

Status ControlPlane::DeregisterTaskDefinition(const Json& in, Ctx& ctx) {
  std::string ref;
  GP_TRY(RequireString(in, "taskDefinition", ref));
  GP_ASSIGN(r, TaskDefinitionRefFrom(options_.arn, ref));
  if (!r.revision) return Status::Client("taskDefinition must name a revision (family:revision or an ARN)");
  const TaskDefinition* found = state_.FindTaskDefinition(r.family, r.revision);
  if (!found) return Status::Client("The specified task definition does not exist.");
  TaskDefinition td = *found;
  if (td.status != "INACTIVE") {
    td.status = "INACTIVE";
    td.deregistered_at = Now();
    state_.PutTaskDefinition(td);
    ctx.batch.PutTaskDefinition(td);
  }
  ctx.out["taskDefinition"] = ToJson(td);
  return Status::Ok();
}

Status ControlPlane::DescribeTaskDefinition(const Json& in, Ctx& ctx) {
  std::string ref;
  GP_TRY(RequireString(in, "taskDefinition", ref));
  GP_ASSIGN(td, ResolveTaskDefinition(ref));
  ctx.out["taskDefinition"] = ToJson(*td);
  ctx.out["tags"] = ToJson(td->tags, true);
  return Status::Ok();
}

Status ControlPlane::ListTaskDefinitions(const Json& in, Ctx& ctx) {
  GP_ASSIGN(prefix, OptString(in, "familyPrefix"));
  GP_ASSIGN(status, OptString(in, "status"));
  GP_ASSIGN(sort, OptString(in, "sort"));
  std::string want = status.value_or("ACTIVE");
  if (want != "ACTIVE" && want != "INACTIVE" && want != "DELETE_IN_PROGRESS")
    return Status::InvalidParameter("status must be ACTIVE or INACTIVE");
  if (sort && *sort != "ASC" && *sort != "DESC") return Status::InvalidParameter("sort must be ASC or DESC");
  std::vector<std::string> arns;
  for (const auto& [family, revs] : state_.TaskDefinitions()) {
    if (prefix && family != *prefix) continue;  // ECS: familyPrefix matches the whole family name
    for (const auto& [rev, td] : revs)
      if (td.status == want) arns.push_back(td.arn);
  }
  if (sort && *sort == "DESC") std::reverse(arns.begin(), arns.end());
  GP_ASSIGN(range, Page(in, arns.size()));
  EmitPage(ctx.out, "taskDefinitionArns", arns, range);
  return Status::Ok();
}

Status ControlPlane::ListTaskDefinitionFamilies(const Json& in, Ctx& ctx) {
  GP_ASSIGN(prefix, OptString(in, "familyPrefix"));
  GP_ASSIGN(status, OptString(in, "status"));
  std::string want = status.value_or("ACTIVE");
  if (want != "ACTIVE" && want != "INACTIVE" && want != "ALL")
    return Status::InvalidParameter("status must be ACTIVE, INACTIVE or ALL");
  std::vector<std::string> families;
  for (const auto& [family, revs] : state_.TaskDefinitions()) {
    if (prefix && family.rfind(*prefix, 0) != 0) continue;
    bool any_active = std::any_of(revs.begin(), revs.end(), [](const auto& r) { return r.second.status == "ACTIVE"; });
    if (want == "ALL" || (want == "ACTIVE") == any_active) families.push_back(family);
  }
  GP_ASSIGN(range, Page(in, families.size()));
  EmitPage(ctx.out, "families", families, range);
  return Status::Ok();
}

// ---- tasks -----------------------------------------------------------------------------------------------

Status ControlPlane::RunTask(const Json& in, Ctx& ctx) { return PlaceTasks(in, ctx, false); }
Status ControlPlane::StartTask(const Json& in, Ctx& ctx) { return PlaceTasks(in, ctx, true); }

// PlaceTasks is RunTask and StartTask: validate, place each task in turn against the live state (reserving
// as it goes, so task 2 sees task 1), persist every placed task in one batch, answer tasks and failures.
Status ControlPlane::PlaceTasks(const Json& in, Ctx& ctx, bool start_task) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  std::string td_ref;
  GP_TRY(RequireString(in, "taskDefinition", td_ref));
  GP_ASSIGN(count_opt, OptInt(in, "count"));
  int64_t count = count_opt.value_or(1);
  if (!start_task && (count < 1 || count > kMaxRunCount))
    return Status::InvalidParameter("count must be between 1 and 10");
  GP_ASSIGN(launch_type, OptString(in, "launchType"));
  if (launch_type && *launch_type != "EC2")
    return Status::InvalidParameter("launchType " + *launch_type + " is not supported; gpupack places EC2-style tasks");
  GP_ASSIGN(group_opt, OptString(in, "group"));
  GP_ASSIGN(started_by, OptString(in, "startedBy"));
  if (started_by && started_by->size() > 128) return Status::InvalidParameter("startedBy is at most 128 characters");
  GP_ASSIGN(client_token, OptString(in, "clientToken"));
  if (client_token && client_token->size() > 64) return Status::InvalidParameter("clientToken is at most 64 characters");
  GP_ASSIGN(tags, ParseTags(in));
  TaskOverride overrides;
  if (in.contains("overrides")) {
    GP_ASSIGN(o, ParseTaskOverride(in["overrides"], "overrides"));
    overrides = std::move(o);
  }
  GP_ASSIGN(constraints, ParsePlacementConstraints(in, "placementConstraints"));
  GP_ASSIGN(strategies, ParsePlacementStrategies(in, "placementStrategy"));
  GP_TRY(ValidatePlacement(constraints, strategies));
  GP_ASSIGN(td, ResolveTaskDefinition(td_ref));
  if (td->status != "ACTIVE" && !td_ref.empty() && td_ref.find(':') == std::string::npos)
    return Status::Client("task definition " + td->family + " has no ACTIVE revision");
  GP_TRY(ValidateOverrides(*td, overrides));

  std::vector<std::string> only;
  if (start_task) {
    GP_ASSIGN(refs, OptStringList(in, "containerInstances"));
    if (refs.empty() || refs.size() > 10)
      return Status::InvalidParameter("containerInstances must name 1 to 10 container instances");
    for (const auto& ref : refs) {
      GP_ASSIGN(inst, ResolveInstance(cluster->name, ref));
      only.push_back(inst->arn);
    }
    count = static_cast<int64_t>(only.size());
  }

  // Idempotency: the same token and request give the same tasks; a different request is a conflict.
  std::string fingerprint = in.dump();
  if (client_token && !client_token->empty()) {
    if (const ClientTokenRecord* rec = state_.FindClientToken(cluster->name, *client_token)) {
      if (rec->request_fingerprint != fingerprint)
        return Status::Conflict("clientToken '" + *client_token + "' was used with a different request");
      Json tasks = Json::array();
      for (const auto& arn : rec->task_arns)
        if (const Task* t = state_.FindTask(arn)) tasks.push_back(ToJson(options_.arn, *t));
      ctx.out = {{"tasks", tasks}, {"failures", Json::array()}};
      return Status::Ok();
    }
  }

  PlacementRequest req;
  req.cluster = cluster->name;
  req.demand = DemandOf(*td, overrides);
  req.group = group_opt.value_or("family:" + td->family);
  req.constraints = constraints;
  req.constraints.insert(req.constraints.end(), td->placement_constraints.begin(), td->placement_constraints.end());
  req.strategies = strategies;
  req.seed = rng_();
  req.compute_aware = cluster->settings.compute_aware_placement;
  req.only_instances = only;
  GP_ASSIGN(placer, Placer::Create(std::move(req)));

  int gpu_containers = 0;
  for (const auto& c : td->containers)
    for (const auto& r : EffectiveRequirements(c, OverrideFor(overrides, c.name)))
      if (r.type == "GPU") ++gpu_containers;

  Json tasks = Json::array(), failures = Json::array();
  std::vector<std::string> placed_arns;
  const EpochMs now = Now();
  for (int i = 0; i < count; ++i) {
    if (start_task) {
      // StartTask: one task per named instance.
      PlacementRequest one = placer->request();
      one.only_instances = {only[i]};
      GP_ASSIGN(p1, Placer::Create(std::move(one)));
      placer = std::move(p1);
    }
    Placement p = placer->PlaceOne(state_, i);
    if (!p.placed()) {
      for (auto& f : p.failures) {
        if (f.arn.empty()) f.arn = options_.arn.ClusterArn(cluster->name);
        ++counters_.failures_by_reason[f.reason];
        failures.push_back(ToJson(f));
      }
      if (!start_task) break;  // later tasks of the request would fail the same way
      continue;
    }
    const ContainerInstance& inst = *p.instance;
    Task t;
    t.id = NewId();
    t.arn = options_.arn.TaskArn(cluster->name, t.id);
    t.cluster = cluster->name;
    t.task_definition_arn = td->arn;
    t.container_instance_arn = inst.arn;
    t.group = placer->request().group;
    t.started_by = started_by.value_or("");
    t.created_at = now;
    t.overrides = overrides;
    t.tags = tags;
    t.reserved = {placer->request().demand.cpu, placer->request().demand.memory};
    t.gpu_reservations = ReservationsFor(placer->request().demand, inst, p.gpu_indices, gpu_containers);
    t.client_token = client_token.value_or("");
    size_t next_dedicated = 0;
    for (const auto& cd : td->containers) {
      Container c;
      c.name = cd.name;
      c.container_arn = options_.arn.ContainerArn(cluster->name, t.id, cd.name);
      c.image = cd.image;
      c.essential = cd.essential;
      for (const auto& r : EffectiveRequirements(cd, OverrideFor(overrides, cd.name))) {
        if (r.type != "GPU") continue;
        if (r.mps) {
          c.mps = r.mps;
          c.gpu_ids = {inst.gpus[p.gpu_indices.at(0)].id};
        } else if (r.value) {
          int n = std::max(1, std::atoi(r.value->c_str()));
          for (int k = 0; k < n && next_dedicated < p.gpu_indices.size(); ++k)
            c.gpu_ids.push_back(inst.gpus[p.gpu_indices[next_dedicated++]].id);
        }
      }
      t.containers.push_back(std::move(c));
    }
    GP_TRY(state_.ReserveTask(t));
    ++counters_.placements;
    ctx.batch.PutTask(t);
    ctx.pushes.emplace_back(inst.arn, Json{{"type", "assign"}, {"task", AssignmentFor(t)}});
    tasks.push_back(ToJson(options_.arn, t));
    placed_arns.push_back(t.arn);
  }
  // Instance counters and remaining resources are derived: a restart recomputes them from the tasks
  // (ClusterState::RebuildReservations), so the batch carries only the tasks.
  if (client_token && !client_token->empty() && !placed_arns.empty()) {
    ClientTokenRecord rec{cluster->name, *client_token, fingerprint, placed_arns, now};
    state_.PutClientToken(rec);
    ctx.batch.PutClientToken(rec);
  }
  ctx.out = {{"tasks", tasks}, {"failures", failures}};
  return Status::Ok();
}

// StopTaskRecord marks a task for stopping. A PENDING task that no agent has picked up yet stops at once;
// otherwise the agent is asked (desiredStatus STOPPED) and reports STOPPED when the container is gone.
void ControlPlane::StopTaskRecord(Task& task, const std::string& stop_code, const std::string& reason, Ctx& ctx) {
  if (task.desired_status == "STOPPED" || task.last_status == "STOPPED") return;
  task.desired_status = "STOPPED";
  task.stop_code = stop_code;
  task.stopped_reason = reason;
  task.stopping_at = Now();
  ++task.version;
  const ContainerInstance* inst = state_.FindInstance(task.container_instance_arn);
  if (inst && UsesChannel(*inst) && inst->agent_connected) {
    // The agent stops it (SIGTERM, grace, SIGKILL) and reports STOPPED; memory is held until then.
    ctx.pushes.emplace_back(inst->arn, Json{{"type", "stop"}, {"taskArn", task.arn}, {"reason", reason}});
    ctx.batch.PutTask(task);
    return;
  }
  // A task no agent has started yet stops at once. A running one waits for its agent's report (a channel agent
  // that is away gets the stop when it reconnects).
  if (task.last_status == "PENDING") {
    FinishStop(task, ctx);
    return;
  }
  ctx.batch.PutTask(task);
}

void ControlPlane::FinishStop(Task& task, Ctx& ctx) {
  EpochMs now = Now();
  task.desired_status = "STOPPED";
  if (!task.stopping_at) task.stopping_at = now;
  task.stopped_at = now;
  for (auto& c : task.containers) c.last_status = "STOPPED";
  state_.SetTaskLastStatus(task.arn, "STOPPED");  // releases reservations exactly once
  ++task.version;
  ctx.batch.PutTask(task);
}

Status ControlPlane::StopTask(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  std::string ref;
  GP_TRY(RequireString(in, "task", ref));
  GP_ASSIGN(reason, OptString(in, "reason"));
  if (reason && reason->size() > 1024) return Status::InvalidParameter("reason is at most 1024 characters");
  GP_ASSIGN(task, ResolveTask(cluster->name, ref));
  StopTaskRecord(*task, "UserInitiated", reason.value_or("Task stopped by user"), ctx);
  ctx.out["task"] = ToJson(options_.arn, *task);
  return Status::Ok();
}

Status ControlPlane::DescribeTasks(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  if (!in.contains("tasks")) return Status::InvalidParameter("tasks is required");
  GP_ASSIGN(refs, OptStringList(in, "tasks"));
  if (refs.empty()) return Status::InvalidParameter("tasks must name at least one task");
  if (refs.size() > kMaxDescribe) return Status::InvalidParameter("tasks can have at most 100 entries");
  Json tasks = Json::array(), failures = Json::array();
  for (const auto& ref : refs) {
    auto id = ResourceIdFrom(options_.arn, "task", ref);
    const Task* t = id.ok() ? state_.FindTask(options_.arn.TaskArn(cluster->name, *id)) : nullptr;
    if (t) tasks.push_back(ToJson(options_.arn, *t));
    else failures.push_back({{"arn", id.ok() && ref.rfind("arn:", 0) != 0 ? options_.arn.TaskArn(cluster->name, *id) : ref},
                             {"reason", "MISSING"}});
  }
  ctx.out = {{"tasks", tasks}, {"failures", failures}};
  return Status::Ok();
}

Status ControlPlane::ListTasks(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  GP_ASSIGN(instance_ref, OptString(in, "containerInstance"));
  GP_ASSIGN(family, OptString(in, "family"));
  GP_ASSIGN(started_by, OptString(in, "startedBy"));
  GP_ASSIGN(desired, OptString(in, "desiredStatus"));
  std::string want = desired.value_or("RUNNING");
  if (want != "RUNNING" && want != "PENDING" && want != "STOPPED")
    return Status::InvalidParameter("desiredStatus must be RUNNING, PENDING or STOPPED");
  std::string instance_arn;
  if (instance_ref) {
    GP_ASSIGN(id, ResourceIdFrom(options_.arn, "container-instance", *instance_ref));
    instance_arn = options_.arn.InstanceArn(cluster->name, id);
  }
  std::vector<std::pair<EpochMs, std::string>> rows;
  for (const auto& [arn, t] : state_.Tasks()) {
    if (t.cluster != cluster->name) continue;
    // ECS: PENDING and RUNNING tasks both have desiredStatus RUNNING.
    if ((want == "STOPPED") != (t.desired_status == "STOPPED")) continue;
    if (!instance_arn.empty() && t.container_instance_arn != instance_arn) continue;
    if (started_by && t.started_by != *started_by) continue;
    if (family && t.task_definition_arn.find("task-definition/" + *family + ":") == std::string::npos) continue;
    rows.emplace_back(t.created_at, arn);
  }
  std::sort(rows.begin(), rows.end());
  std::vector<std::string> arns;
  for (auto& r : rows) arns.push_back(std::move(r.second));
  GP_ASSIGN(range, Page(in, arns.size()));
  EmitPage(ctx.out, "taskArns", arns, range);
  return Status::Ok();
}

// ---- container instances ---------------------------------------------------------------------------------

Status ControlPlane::RegisterContainerInstance(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  GP_ASSIGN(existing_ref, OptString(in, "containerInstanceArn"));
  ContainerInstance inst;
  const ContainerInstance* existing = nullptr;
  if (existing_ref && !existing_ref->empty()) {
    GP_ASSIGN(id, ResourceIdFrom(options_.arn, "container-instance", *existing_ref, cluster->name));
    existing = state_.FindInstance(options_.arn.InstanceArn(cluster->name, id));
    if (!existing) return Status::InvalidParameter("containerInstanceArn names no instance of this cluster");
    inst = *existing;
  } else {
    inst.id = NewId();
    inst.arn = options_.arn.InstanceArn(cluster->name, inst.id);
    inst.cluster = cluster->name;
    inst.registered_at = Now();
  }
  // totalResources: CPU and MEMORY are required.
  Resources total;
  bool has_cpu = false, has_mem = false;
  if (in.contains("totalResources")) {
    const Json& tr = in["totalResources"];
    if (!tr.is_array()) return Status::InvalidParameter("totalResources: expected a list");
    for (const auto& r : tr) {
      GP_ASSIGN(name, OptString(r, "name"));
      GP_ASSIGN(iv, OptInt(r, "integerValue"));
      if (!name) return Status::InvalidParameter("totalResources[].name is required");
      if (*name == "CPU" || *name == "MEMORY") {
        if (!iv || *iv < 0) return Status::InvalidParameter("totalResources " + *name + " needs a non-negative integerValue");
        if (*name == "CPU") { total.cpu = *iv; has_cpu = true; }
        else { total.memory = *iv; has_mem = true; }
      }
    }
  }
  if (!has_cpu || !has_mem) return Status::InvalidParameter("totalResources must give CPU and MEMORY");
  // platformDevices: GPUs with gpuInfo.memoryInMiB.
  std::vector<Gpu> gpus;
  std::set<std::string> ids;
  if (in.contains("platformDevices") && !in["platformDevices"].is_null()) {
    const Json& pd = in["platformDevices"];
    if (!pd.is_array() || pd.size() > 64) return Status::InvalidParameter("platformDevices: expected a list of at most 64");
    for (size_t i = 0; i < pd.size(); ++i) {
      const Json& d = pd[i];
      GP_ASSIGN(id, OptString(d, "id"));
      GP_ASSIGN(type, OptString(d, "type"));
      if (!id || id->empty() || id->size() > 255) return Status::InvalidParameter("platformDevices[" + std::to_string(i) + "].id is required");
      if (std::any_of(id->begin(), id->end(), [](char c) { return c <= ' ' || c > '~' || c == '"' || c == '\\'; }))
        return Status::InvalidParameter("platformDevices[" + std::to_string(i) +
                                        "].id must be printable ASCII without spaces, quotes or back slashes");
      if (type.value_or("") != "GPU") return Status::InvalidParameter("platformDevices[" + std::to_string(i) + "].type must be GPU");
      if (!ids.insert(*id).second) return Status::InvalidParameter("platformDevices: GPU " + *id + " is listed twice");
      MiB mem = 0;
      if (d.contains("gpuInfo")) {
        GP_ASSIGN(m, OptInt(d["gpuInfo"], "memoryInMiB"));
        if (m) mem = *m;
      }
      if (mem <= 0) return Status::InvalidParameter("platformDevices[" + std::to_string(i) + "].gpuInfo.memoryInMiB must be a positive integer");
      Gpu g;
      g.id = *id;
      g.total_memory_mib = g.remaining_memory_mib = mem;
      gpus.push_back(std::move(g));
    }
  }
  GP_ASSIGN(attrs_list, in.contains("attributes") ? ParseAttributes(in["attributes"], "attributes")
                                                   : Result<std::vector<Attribute>>(std::vector<Attribute>{}));
  std::vector<Attribute> attrs = attrs_list;
  if (in.contains("versionInfo") && in["versionInfo"].is_object()) {
    GP_ASSIGN(v, OptString(in["versionInfo"], "agentVersion"));
    inst.agent_version = v.value_or("");
  }
  std::string doc;
  GP_ASSIGN(identity, OptString(in, "instanceIdentityDocument"));
  if (identity && !identity->empty()) {
    Json d = Json::parse(*identity, nullptr, false);
    if (d.is_object() && d.contains("instanceId") && d["instanceId"].is_string()) inst.ec2_instance_id = d["instanceId"];
    if (d.is_object() && d.contains("instanceType") && d["instanceType"].is_string()) inst.instance_type = d["instanceType"];
  }
  if (inst.ec2_instance_id.empty()) inst.ec2_instance_id = "i-" + inst.id.substr(0, 17);
  if (!inst.instance_type.empty()) attrs.push_back({"ecs.instance-type", inst.instance_type});
  SortAttributes(attrs);
  // Re-registration keeps the tasks: GPUs that still hold reservations must still be there, and a shared one
  // still large enough for the memory its tasks declared (else its remaining memory would go negative).
  if (existing) {
    for (const auto& g : existing->gpus) {
      if (g.container_count > 0 && !ids.count(g.id))
        return Status::InvalidParameter("GPU " + g.id + " holds running tasks and cannot disappear on re-registration");
      const MiB held = g.total_memory_mib - g.remaining_memory_mib;
      for (const auto& now : gpus)
        if (g.mode == GpuMode::kMps && now.id == g.id && now.total_memory_mib < held)
          return Status::InvalidParameter("GPU " + g.id + " holds " + std::to_string(held) +
                                          " MiB declared by running tasks and cannot shrink to " +
                                          std::to_string(now.total_memory_mib) + " MiB on re-registration");
    }
  }
  inst.registered = total;
  inst.remaining = total;
  inst.gpus = std::move(gpus);
  inst.attributes = std::move(attrs);
  inst.status = "ACTIVE";
  if (existing) {
    // Re-registration (e.g. the MPS capability changed): the connection and fault holds stay as they are.
    for (auto& g : inst.gpus)
      for (const auto& old : existing->gpus)
        if (old.id == g.id) g.held = old.held;
  } else {
    inst.agent_connected = !UsesChannel(inst);  // a channel agent is connected once it says hello
  }
  ++inst.version;
  state_.PutInstance(inst);
  if (existing) state_.RebuildReservations();  // the GPU list may have changed under held reservations
  ContainerInstance* stored = state_.FindInstance(inst.arn);
  ctx.batch.PutInstance(*stored);
  ctx.out["containerInstance"] = ToJson(*stored);
  return Status::Ok();
}

Status ControlPlane::DeregisterContainerInstance(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  std::string ref;
  GP_TRY(RequireString(in, "containerInstance", ref));
  GP_ASSIGN(force, OptBool(in, "force"));
  GP_ASSIGN(inst, ResolveInstance(cluster->name, ref));
  std::vector<std::string> task_arns = state_.LoadOf(inst->arn).task_arns;
  if (!task_arns.empty() && !force.value_or(false))
    return Status::InvalidParameter("container instance has " + std::to_string(task_arns.size()) +
                                    " task(s) that are not stopped; stop them or deregister with force");
  for (const auto& arn : task_arns)
    if (Task* t = state_.FindTask(arn)) {
      t->stop_code = "InfrastructureHealth";
      t->stopped_reason = "container instance deregistered";
      FinishStop(*t, ctx);
    }
  inst->status = "INACTIVE";
  inst->agent_connected = false;
  ++inst->version;
  ctx.batch.PutInstance(*inst);
  ctx.out["containerInstance"] = ToJson(*inst);
  return Status::Ok();
}

Status ControlPlane::DescribeContainerInstances(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  if (!in.contains("containerInstances")) return Status::InvalidParameter("containerInstances is required");
  GP_ASSIGN(refs, OptStringList(in, "containerInstances"));
  if (refs.empty()) return Status::InvalidParameter("containerInstances must name at least one instance");
  if (refs.size() > kMaxDescribe) return Status::InvalidParameter("containerInstances can have at most 100 entries");
  Json out = Json::array(), failures = Json::array();
  for (const auto& ref : refs) {
    auto id = ResourceIdFrom(options_.arn, "container-instance", ref);
    const ContainerInstance* inst = id.ok() ? state_.FindInstance(options_.arn.InstanceArn(cluster->name, *id)) : nullptr;
    if (inst) out.push_back(ToJson(*inst));
    else failures.push_back({{"arn", ref}, {"reason", "MISSING"}});
  }
  ctx.out = {{"containerInstances", out}, {"failures", failures}};
  return Status::Ok();
}

Status ControlPlane::ListContainerInstances(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  GP_ASSIGN(filter, OptString(in, "filter"));
  GP_ASSIGN(status, OptString(in, "status"));
  if (status && *status != "ACTIVE" && *status != "DRAINING" && *status != "REGISTERING" &&
      *status != "DEREGISTERING" && *status != "REGISTRATION_FAILED")
    return Status::InvalidParameter("status must be ACTIVE, DRAINING, REGISTERING, DEREGISTERING or REGISTRATION_FAILED");
  query::ExpressionPtr expr;
  if (filter && !filter->empty()) {
    GP_ASSIGN(e, query::Parse(*filter));
    expr = e;
  }
  std::vector<std::string> arns;
  for (const ContainerInstance* inst : state_.InstancesOf(cluster->name)) {
    if (inst->status == "INACTIVE") continue;
    if (status && inst->status != *status) continue;
    if (expr && !query::Evaluate(*expr, *inst, state_.LoadOf(inst->arn))) continue;
    arns.push_back(inst->arn);
  }
  GP_ASSIGN(range, Page(in, arns.size()));
  EmitPage(ctx.out, "containerInstanceArns", arns, range);
  return Status::Ok();
}

Status ControlPlane::UpdateContainerInstancesState(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  GP_ASSIGN(refs, OptStringList(in, "containerInstances"));
  std::string status;
  GP_TRY(RequireString(in, "status", status));
  if (status != "ACTIVE" && status != "DRAINING")
    return Status::InvalidParameter("status must be ACTIVE or DRAINING");
  if (refs.empty() || refs.size() > 10) return Status::InvalidParameter("containerInstances must name 1 to 10 instances");
  Json out = Json::array(), failures = Json::array();
  for (const auto& ref : refs) {
    auto inst = ResolveInstance(cluster->name, ref);
    if (!inst.ok()) {
      failures.push_back({{"arn", ref}, {"reason", "MISSING"}});
      continue;
    }
    ContainerInstance* i = *inst;
    if (i->status != status) {
      i->status = status;
      ++i->version;
      ctx.batch.PutInstance(*i);
    }
    out.push_back(ToJson(*i));
  }
  ctx.out = {{"containerInstances", out}, {"failures", failures}};
  return Status::Ok();
}

// ---- attributes ------------------------------------------------------------------------------------------

Status ControlPlane::PutAttributes(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  if (!in.contains("attributes")) return Status::InvalidParameter("attributes is required");
  const Json& list = in["attributes"];
  if (!list.is_array() || list.empty() || list.size() > 10)
    return Status::InvalidParameter("attributes must be a list of 1 to 10 attributes");
  std::map<std::string, std::vector<Attribute>> by_target;
  for (size_t i = 0; i < list.size(); ++i) {
    GP_ASSIGN(one, ParseAttributes(Json::array({list[i]}), "attributes"));
    GP_ASSIGN(target_type, OptString(list[i], "targetType"));
    GP_ASSIGN(target_id, OptString(list[i], "targetId"));
    if (target_type && *target_type != "container-instance")
      return Status::InvalidParameter("attributes[" + std::to_string(i) + "].targetType must be container-instance");
    if (!target_id) return Status::InvalidParameter("attributes[" + std::to_string(i) + "].targetId is required");
    const Attribute& a = one[0];
    if (a.name.size() > 128) return Status::InvalidParameter("attribute names are at most 128 characters");
    if (a.value && a.value->size() > 128) return Status::InvalidParameter("attribute values are at most 128 characters");
    if (a.name.rfind("ecs.", 0) == 0) return Status::InvalidParameter("attributes starting with 'ecs.' are reserved");
    GP_ASSIGN(inst, ResolveInstance(cluster->name, *target_id));
    by_target[inst->arn].push_back(a);
  }
  Json out = Json::array();
  for (auto& [arn, attrs] : by_target) {
    ContainerInstance* inst = state_.FindInstance(arn);
    for (auto& a : attrs) {
      inst->attributes.push_back(a);
      Json j = {{"name", a.name}, {"targetType", "container-instance"}, {"targetId", arn}};
      if (a.value) j["value"] = *a.value;
      out.push_back(j);
    }
    SortAttributes(inst->attributes);
    ++inst->version;
    ctx.batch.PutInstance(*inst);
  }
  ctx.out["attributes"] = out;
  return Status::Ok();
}

Status ControlPlane::DeleteAttributes(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  if (!in.contains("attributes") || !in["attributes"].is_array() || in["attributes"].empty())
    return Status::InvalidParameter("attributes must be a non-empty list");
  // Every entry is checked before any is applied, so a bad one leaves the others undone too.
  std::vector<std::pair<ContainerInstance*, std::string>> deletions;
  for (const auto& e : in["attributes"]) {
    GP_ASSIGN(one, ParseAttributes(Json::array({e}), "attributes"));
    GP_ASSIGN(target_id, OptString(e, "targetId"));
    if (!target_id) return Status::InvalidParameter("attributes[].targetId is required");
    GP_ASSIGN(inst, ResolveInstance(cluster->name, *target_id));
    deletions.emplace_back(inst, one[0].name);
  }
  Json out = Json::array();
  for (auto& [inst, name] : deletions) {
    std::erase_if(inst->attributes, [&name = name](const Attribute& a) { return a.name == name; });
    ++inst->version;
    ctx.batch.PutInstance(*inst);
    out.push_back({{"name", name}, {"targetType", "container-instance"}, {"targetId", inst->arn}});
  }
  ctx.out["attributes"] = out;
  return Status::Ok();
}

Status ControlPlane::ListAttributes(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  std::string target_type;
  GP_TRY(RequireString(in, "targetType", target_type));
  if (target_type != "container-instance") return Status::InvalidParameter("targetType must be container-instance");
  GP_ASSIGN(name, OptString(in, "attributeName"));
  GP_ASSIGN(value, OptString(in, "attributeValue"));
  if (value && !name) return Status::InvalidParameter("attributeValue needs attributeName");
  std::vector<Json> rows;
  for (const ContainerInstance* inst : state_.InstancesOf(cluster->name)) {
    if (inst->status == "INACTIVE") continue;
    for (const auto& a : inst->attributes) {
      if (name && a.name != *name) continue;
      if (value && a.value != *value) continue;
      Json j = {{"name", a.name}, {"targetType", "container-instance"}, {"targetId", inst->arn}};
      if (a.value) j["value"] = *a.value;
      rows.push_back(std::move(j));
    }
  }
  GP_ASSIGN(range, Page(in, rows.size()));
  EmitPage(ctx.out, "attributes", rows, range);
  return Status::Ok();
}

// ---- state changes from agents ---------------------------------------------------------------------------

Status ControlPlane::SubmitTaskStateChange(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  std::string ref, status;
  GP_TRY(RequireString(in, "task", ref));
  GP_TRY(RequireString(in, "status", status));
  if (!IsTaskStatus(status)) return Status::InvalidParameter("status must be PENDING, RUNNING or STOPPED");
  GP_ASSIGN(reason, OptString(in, "reason"));
  GP_ASSIGN(stop_code, OptString(in, "stopCode"));  // ours: the agent names why a task stopped
  GP_ASSIGN(task, ResolveTask(cluster->name, ref));
  // Containers reported with the task: all are read and checked before any is applied (no half-applied report).
  struct ContainerReport {
    std::optional<std::string> name, status, reason;
    std::optional<int64_t> exit_code;
  };
  std::vector<ContainerReport> reports;
  if (in.contains("containers") && in["containers"].is_array()) {
    for (const auto& c : in["containers"]) {
      GP_ASSIGN(name, OptString(c, "containerName"));
      GP_ASSIGN(cstatus, OptString(c, "status"));
      GP_ASSIGN(exit_code, OptInt(c, "exitCode"));
      GP_ASSIGN(creason, OptString(c, "reason"));
      if (cstatus && !IsTaskStatus(*cstatus))
        return Status::InvalidParameter("containers[].status must be PENDING, RUNNING or STOPPED");
      reports.push_back({name, cstatus, creason, exit_code});
    }
  }
  for (const auto& r : reports) {
    for (auto& ctr : task->containers) {
      if (!r.name || ctr.name != *r.name) continue;
      if (r.status && !IsTerminal(ctr.last_status)) ctr.last_status = *r.status;
      if (r.exit_code) ctr.exit_code = static_cast<int>(*r.exit_code);
      if (r.reason) ctr.reason = *r.reason;
    }
  }
  if (task->last_status == "STOPPED") {  // late or repeated report: nothing moves, memory stays released
    if (in.contains("containers")) {  // but the exit codes and reasons applied above are persisted too
      ++task->version;
      ctx.batch.PutTask(*task);
    }
    ctx.out["acknowledgment"] = "ACK";
    return Status::Ok();
  }
  if (status == "RUNNING" && task->last_status != "RUNNING") {
    state_.SetTaskLastStatus(task->arn, "RUNNING");
    task->started_at = Now();
    for (auto& c : task->containers)
      if (c.last_status == "PENDING") c.last_status = "RUNNING";
    ++task->version;
    ctx.batch.PutTask(*task);
  } else if (status == "STOPPED") {
    if (task->stop_code.empty()) {
      task->stop_code = stop_code && !stop_code->empty() ? *stop_code
                        : task->last_status == "PENDING" ? "TaskFailedToStart"
                                                         : "EssentialContainerExited";
    }
    if (reason && !reason->empty()) task->stopped_reason = *reason;
    FinishStop(*task, ctx);
  } else if (!ctx.batch.empty() || in.contains("containers")) {
    ++task->version;
    ctx.batch.PutTask(*task);
  }
  ctx.out["acknowledgment"] = "ACK";
  return Status::Ok();
}

Status ControlPlane::SubmitContainerStateChange(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  std::string ref, name;
  GP_TRY(RequireString(in, "task", ref));
  GP_TRY(RequireString(in, "containerName", name));
  GP_ASSIGN(status, OptString(in, "status"));
  GP_ASSIGN(exit_code, OptInt(in, "exitCode"));
  GP_ASSIGN(reason, OptString(in, "reason"));
  if (status && !IsTaskStatus(*status)) return Status::InvalidParameter("status must be PENDING, RUNNING or STOPPED");
  GP_ASSIGN(task, ResolveTask(cluster->name, ref));
  Container* ctr = nullptr;
  for (auto& c : task->containers)
    if (c.name == name) ctr = &c;
  if (!ctr) return Status::InvalidParameter("task has no container named '" + name.substr(0, 255) + "'");
  if (status && !IsTerminal(ctr->last_status)) ctr->last_status = *status;
  if (exit_code) ctr->exit_code = static_cast<int>(*exit_code);
  if (reason) ctr->reason = *reason;
  ++task->version;
  ctx.batch.PutTask(*task);
  ctx.out["acknowledgment"] = "ACK";
  return Status::Ok();
}

// ---- dry run ---------------------------------------------------------------------------------------------

// ExplainPlacement (ours): RunTask's placement without placing. Answers, per instance and per GPU, where the
// task would go and why not elsewhere.
Status ControlPlane::ExplainPlacement(const Json& in, Ctx& ctx) {
  GP_ASSIGN(cluster, ActiveCluster(in));
  std::string td_ref;
  GP_TRY(RequireString(in, "taskDefinition", td_ref));
  GP_ASSIGN(td, ResolveTaskDefinition(td_ref));
  TaskOverride overrides;
  if (in.contains("overrides")) {
    GP_ASSIGN(o, ParseTaskOverride(in["overrides"], "overrides"));
    overrides = std::move(o);
  }
  GP_TRY(ValidateOverrides(*td, overrides));
  GP_ASSIGN(constraints, ParsePlacementConstraints(in, "placementConstraints"));
  GP_ASSIGN(strategies, ParsePlacementStrategies(in, "placementStrategy"));
  GP_TRY(ValidatePlacement(constraints, strategies));
  GP_ASSIGN(group, OptString(in, "group"));
  GP_ASSIGN(seed, OptInt(in, "seed"));
  PlacementRequest req;
  req.cluster = cluster->name;
  req.demand = DemandOf(*td, overrides);
  req.group = group.value_or("family:" + td->family);
  req.constraints = constraints;
  req.constraints.insert(req.constraints.end(), td->placement_constraints.begin(), td->placement_constraints.end());
  req.strategies = strategies;
  req.seed = static_cast<uint64_t>(seed.value_or(0));
  req.compute_aware = cluster->settings.compute_aware_placement;
  GP_ASSIGN(placer, Placer::Create(req));
  Json instances = Json::array();
  std::string chosen;
  for (const auto& v : placer->Explain(state_)) {
    Json gpus = Json::array();
    for (const auto& g : v.gpus) gpus.push_back({{"gpuId", g.gpu_id}, {"fits", g.fits}, {"detail", g.detail}});
    Json j = {{"containerInstanceArn", v.arn}, {"eligible", v.eligible}, {"chosen", v.chosen}, {"gpus", gpus}};
    if (!v.eligible) {
      j["reason"] = v.reason;
      j["detail"] = v.detail;
    } else {
      j["scores"] = v.scores;
    }
    if (v.chosen) chosen = v.arn;
    instances.push_back(std::move(j));
  }
  const TaskDemand& d = req.demand;
  ctx.out = {{"demand",
              {{"cpu", d.cpu},
               {"memory", d.memory},
               {"gpuKind", d.gpu_kind == GpuKind::kShared ? "NVIDIA_MPS" : d.gpu_kind == GpuKind::kDedicated ? "DEDICATED" : "NONE"},
               {"gpuMemoryInMiB", d.gpu_memory},
               {"gpuComputePercent", d.gpu_compute},
               {"gpuCount", d.gpu_count}}},
             {"instances", instances}};
  if (!chosen.empty()) ctx.out["chosenContainerInstanceArn"] = chosen;
  return Status::Ok();
}


// ---- the agent channel -----------------------------------------------------------------------------------

void ControlPlane::SetAgentNotifier(Notifier notifier) {
  std::lock_guard lock(mu_);
  notifier_ = std::move(notifier);
}

bool ControlPlane::ResendPushIfWanted(const std::string& instance_arn, const Json& push,
                                      const std::function<void()>& send) const {
  std::lock_guard lock(mu_);
  const std::string type = push.value("type", "");
  bool wanted = true;
  if (type == "assign" || type == "stop") {
    std::string arn;
    if (type == "stop" && push.contains("taskArn") && push["taskArn"].is_string()) arn = push["taskArn"];
    if (type == "assign" && push.contains("task") && push["task"].is_object() && push["task"].contains("taskArn") &&
        push["task"]["taskArn"].is_string())
      arn = push["task"]["taskArn"];
    const Task* t = state_.FindTask(arn);
    if (!t || t->container_instance_arn != instance_arn) wanted = false;
    else if (type == "assign") wanted = t->last_status == "PENDING" && t->desired_status != "STOPPED";
    else wanted = t->last_status != "STOPPED";
  }
  if (wanted) send();
  return wanted;
}

Status ControlPlane::CheckAgentInstance(const std::string& instance_arn) const {
  std::lock_guard lock(mu_);
  const ContainerInstance* inst = state_.FindInstance(instance_arn);
  if (!inst || inst->status == "INACTIVE")
    return Status::InvalidParameter("containerInstance " + instance_arn.substr(0, 300) + " is not registered");
  return Status::Ok();
}

// AssignmentFor renders what an agent needs to start a task: per container the command, the definition's and
// the override's environment (the agent adds the MPS variables, which win), limits and GPUs.
Json ControlPlane::AssignmentFor(const Task& task) const {
  const TaskDefinition* td = nullptr;
  auto ref = TaskDefinitionRefFrom(options_.arn, task.task_definition_arn);
  if (ref.ok()) td = state_.FindTaskDefinition(ref->family, ref->revision);
  Json containers = Json::array();
  for (const Container& c : task.containers) {
    Json j = {{"name", c.name}, {"image", c.image}, {"essential", c.essential}, {"gpuIds", c.gpu_ids}};
    if (c.mps) {
      j["mps"] = {{"memory", c.mps->memory_mib}};
      if (c.mps->max_compute_percent) j["mps"]["maxComputePercent"] = *c.mps->max_compute_percent;
    }
    const ContainerDefinition* cd = nullptr;
    if (td)
      for (const auto& d : td->containers)
        if (d.name == c.name) cd = &d;
    const ContainerOverride* co = nullptr;
    for (const auto& o : task.overrides.container_overrides)
      if (o.name == c.name) co = &o;
    if (cd) {
      j["entryPoint"] = cd->entry_point;
      j["command"] = cd->command;
      j["environment"] = ToJson(cd->environment, false);
      j["cpu"] = cd->cpu;
      if (cd->memory) j["memory"] = *cd->memory;
      if (cd->memory_reservation) j["memoryReservation"] = *cd->memory_reservation;
    }
    if (co) {
      if (co->command) j["command"] = *co->command;
      j["overrideEnvironment"] = ToJson(co->environment, false);
      if (co->cpu) j["cpu"] = *co->cpu;
      if (co->memory) j["memory"] = *co->memory;
      if (co->memory_reservation) j["memoryReservation"] = *co->memory_reservation;
    }
    containers.push_back(std::move(j));
  }
  return {{"taskArn", task.arn}, {"cluster", task.cluster}, {"taskDefinitionArn", task.task_definition_arn},
          {"desiredStatus", task.desired_status}, {"containers", containers}};
}

void ControlPlane::AgentHello(const std::string& instance_arn, const Json& hello, Done done) {
  Run([&](Ctx& ctx) -> Status {
    ContainerInstance* inst = state_.FindInstance(instance_arn);
    if (!inst || inst->status == "INACTIVE") return Status::InvalidParameter("instance is not registered");
    Json assign = Json::array(), stop = Json::array();
    std::set<std::string> reported;
    if (hello.contains("tasks") && hello["tasks"].is_array()) {
      for (const Json& rt : hello["tasks"]) {
        GP_ASSIGN(arn, OptString(rt, "taskArn"));
        GP_ASSIGN(status, OptString(rt, "status"));
        if (!arn || !status) continue;
        reported.insert(*arn);
        Task* t = state_.FindTask(*arn);
        if (!t || t->container_instance_arn != instance_arn) {
          if (*status != "STOPPED") stop.push_back({{"taskArn", *arn}, {"reason", "the server does not know this task"}});
          continue;
        }
        if (t->last_status == "STOPPED") {
          if (*status != "STOPPED") stop.push_back({{"taskArn", *arn}, {"reason", "the task was stopped while the agent was away"}});
          continue;
        }
        // Apply what the agent reports, as a state change.
        Json change = rt;
        change["task"] = *arn;
        change["cluster"] = t->cluster;
        GP_TRY(SubmitTaskStateChange(change, ctx));
        if (t->last_status != "STOPPED" && t->desired_status == "STOPPED")
          stop.push_back({{"taskArn", *arn}, {"reason", t->stopped_reason}});
      }
    }
    for (const std::string& arn : std::vector<std::string>(state_.LoadOf(instance_arn).task_arns)) {
      if (reported.count(arn)) continue;
      Task* t = state_.FindTask(arn);
      if (!t) continue;
      if (t->desired_status == "STOPPED" || t->last_status == "RUNNING") {
        // Not on the agent any more: it ended while the agent was away or its state was lost.
        if (t->stop_code.empty()) t->stop_code = "TaskFailedToStart";
        if (t->stopped_reason.empty()) t->stopped_reason = "the agent no longer runs this task (its state was lost)";
        FinishStop(*t, ctx);
      } else {
        assign.push_back(AssignmentFor(*t));  // the agent never got it
      }
    }
    inst->agent_connected = true;
    if (hello.contains("impaired") && hello["impaired"].is_boolean()) inst->impaired = hello["impaired"];
    ++inst->version;
    ctx.batch.PutInstance(*inst);
    ctx.out = {{"type", "welcome"}, {"assign", assign}, {"stop", stop}};
    return Status::Ok();
  }, std::move(done));
}

void ControlPlane::AgentStateChange(const std::string& instance_arn, const Json& change, Done done) {
  Run([&](Ctx& ctx) -> Status {
    GP_ASSIGN(arn, OptString(change, "taskArn"));
    if (!arn) return Status::InvalidParameter("taskArn is required");
    Task* t = state_.FindTask(*arn);
    if (!t || t->container_instance_arn != instance_arn)
      return Status::InvalidParameter("task " + arn->substr(0, 300) + " is not on this instance");
    Json body = change;
    body["task"] = *arn;
    body["cluster"] = t->cluster;
    ctx.write = true;  // the ack promises the report is durable, also when an earlier report is still in commit
    GP_TRY(SubmitTaskStateChange(body, ctx));
    ctx.out = {{"type", "ack"}};
    return Status::Ok();
  }, std::move(done));
}

void ControlPlane::AgentHeartbeat(const std::string& instance_arn, const Json& hb, Done done) {
  Run([&](Ctx& ctx) -> Status {
    ContainerInstance* inst = state_.FindInstance(instance_arn);
    if (!inst) return Status::InvalidParameter("instance is not registered");
    bool changed = !inst->agent_connected;
    inst->agent_connected = true;
    if (hb.contains("impaired") && hb["impaired"].is_boolean() && inst->impaired != hb["impaired"].get<bool>()) {
      inst->impaired = hb["impaired"];
      changed = true;
    }
    if (hb.contains("heldGpus") && hb["heldGpus"].is_array()) {
      std::set<std::string> held;
      for (const auto& g : hb["heldGpus"])
        if (g.is_string()) held.insert(g.get<std::string>());
      for (auto& g : inst->gpus) {
        bool h = held.count(g.id) > 0;
        if (g.held != h) {
          g.held = h;
          changed = true;
        }
      }
    }
    if (changed) {
      ++inst->version;
      ctx.batch.PutInstance(*inst);
    }
    ctx.out = {{"type", "ack"}};
    return Status::Ok();
  }, std::move(done));
}

void ControlPlane::AgentDisconnected(const std::string& instance_arn) {
  Run([&](Ctx& ctx) -> Status {
    ContainerInstance* inst = state_.FindInstance(instance_arn);
    if (!inst || !inst->agent_connected) return Status::Ok();
    inst->agent_connected = false;
    ++inst->version;
    ctx.batch.PutInstance(*inst);
    return Status::Ok();
  }, [](OperationResult) {});
}

// ---- metrics ---------------------------------------------------------------------------------------------

std::string ControlPlane::MetricsText() const {
  std::lock_guard lock(mu_);
  std::ostringstream m;
  m << "# HELP gpupack_placements_total Tasks placed.\n# TYPE gpupack_placements_total counter\n";
  m << "gpupack_placements_total " << counters_.placements << "\n";
  m << "# HELP gpupack_placement_failures_total Placement failures (one per rejected instance) by reason.\n"
       "# TYPE gpupack_placement_failures_total counter\n";
  for (const auto& [reason, n] : counters_.failures_by_reason)
    m << "gpupack_placement_failures_total{reason=\"" << reason << "\"} " << n << "\n";
  m << "# HELP gpupack_gpu_memory_total_mib GPU memory per GPU.\n# TYPE gpupack_gpu_memory_total_mib gauge\n";
  std::ostringstream alloc, count, mode;
  for (const Cluster* c : state_.Clusters()) {
    for (const ContainerInstance* inst : state_.InstancesOf(c->name)) {
      if (inst->status == "INACTIVE") continue;
      for (const Gpu& g : inst->gpus) {
        std::string labels = "{cluster=\"" + c->name + "\",instance=\"" + inst->id + "\",gpu=\"" + LabelValue(g.id) + "\"}";
        m << "gpupack_gpu_memory_total_mib" << labels << " " << g.total_memory_mib << "\n";
        alloc << "gpupack_gpu_memory_allocated_mib" << labels << " " << (g.total_memory_mib - g.remaining_memory_mib) << "\n";
        count << "gpupack_gpu_containers" << labels << " " << g.container_count << "\n";
        std::string l2 = labels.substr(0, labels.size() - 1) + ",mode=\"" + GpuModeName(g.mode) + "\"}";
        mode << "gpupack_gpu_mode" << l2 << " 1\n";
      }
    }
  }
  m << "# HELP gpupack_gpu_memory_allocated_mib GPU memory declared by tasks.\n# TYPE gpupack_gpu_memory_allocated_mib gauge\n"
    << alloc.str();
  m << "# HELP gpupack_gpu_containers GPU containers per GPU.\n# TYPE gpupack_gpu_containers gauge\n" << count.str();
  m << "# HELP gpupack_gpu_mode Sharing mode per GPU.\n# TYPE gpupack_gpu_mode gauge\n" << mode.str();
  return m.str();
}

}  // namespace gpupack::api
