#include "api/ecs/codec.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "api/ecs/ecs_dialect.h"
#include "base/json_fields.h"

namespace gpupack::api {

namespace {

// Every read below is base's JsonFields in ECS's words (ecs_dialect.h): the first problem is kept and names the
// member by its path ("containerDefinitions[1].cpu: expected an integer, got a string").
constexpr size_t kMaxList = 1000;  // a list's most entries unless the member says otherwise

// Int32: an optional integer member within int32 (ECS's Integer).
void Int32(JsonFields& f, const char* key, std::optional<int64_t>& out) {
  f.Int64(key, out, JsonFields::kInt32Min, JsonFields::kInt32Max);
}

// Objects calls `each(fields)` for every element of list member `key` (at most `max`), each element an object
// read in ECS's words.
template <typename Each>
void Objects(JsonFields& f, const char* key, size_t max, Each each) {
  f.Array(key, false, [&](const Json& e, const JsonPath& at) {
    JsonFields o(e, at, f.dialect());
    if (o.ok()) each(o);
    return o.status();
  }, max);
}

std::vector<KeyValuePair> KeyValues(JsonFields& f, const char* key, const char* k = "name", const char* v = "value") {
  std::vector<KeyValuePair> out;
  Objects(f, key, kMaxList, [&](JsonFields& o) {
    KeyValuePair kv;
    o.String(k, kv.name);
    o.String(v, kv.value);
    out.push_back(std::move(kv));
  });
  return out;
}

std::vector<ResourceRequirement> ResourceRequirements(JsonFields& f) {
  std::vector<ResourceRequirement> out;
  Objects(f, "resourceRequirements", 16, [&](JsonFields& o) {
    ResourceRequirement r;
    o.String("type", r.type);
    o.String("value", r.value);
    if (const Json* ss = o.Get("sharingStrategy")) {
      r.has_sharing_strategy = true;
      const JsonPath ss_at(o.path(), "sharingStrategy");
      JsonFields s(*ss, ss_at, o.dialect());
      if (const Json* mps = s.Get("nvidiaMps")) {
        const JsonPath mps_at(ss_at, "nvidiaMps");
        JsonFields m(*mps, mps_at, o.dialect());
        std::optional<int64_t> memory, percent;
        Int32(m, "memory", memory);
        if (m.ok() && !memory) m.Fail(mps_at.str(), "memory is required (MiB of GPU memory for the container)");
        Int32(m, "maxComputePercent", percent);
        if (m.ok()) {
          MpsSharing sharing;
          sharing.memory_mib = *memory;
          if (percent) sharing.max_compute_percent = static_cast<int>(*percent);
          r.mps = sharing;
        }
        s.Take(m.status());
      }
      o.Take(s.status());
    }
    out.push_back(std::move(r));
  });
  return out;
}

// Keeps the fields of `obj` not in `known` as a JSON object text ("" when none).
std::string ExtraFields(const Json& obj, const std::set<std::string>& known) {
  Json extra = Json::object();
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (!known.count(it.key()) && !it.value().is_null()) extra[it.key()] = *it;
  return extra.empty() ? "" : extra.dump();
}

void MergeExtra(Json& out, const std::string& extra) {
  if (extra.empty()) return;
  Json e = Json::parse(extra, nullptr, false);
  if (!e.is_object()) return;
  for (auto it = e.begin(); it != e.end(); ++it)
    if (!out.contains(it.key())) out[it.key()] = *it;
}

const std::set<std::string> kContainerKnown = {"name", "image", "command", "entryPoint", "environment", "cpu",
                                               "memory", "memoryReservation", "essential", "resourceRequirements"};
const std::set<std::string> kTaskDefKnown = {"family", "containerDefinitions", "cpu", "memory", "networkMode",
                                             "requiresCompatibilities", "placementConstraints", "tags"};

ContainerDefinition ContainerDefinitionOf(JsonFields& o) {
  ContainerDefinition c;
  o.String("name", c.name);
  o.String("image", c.image);
  o.Strings("command", c.command, kMaxList);
  o.Strings("entryPoint", c.entry_point, kMaxList);
  c.environment = KeyValues(o, "environment");
  o.Int64("cpu", c.cpu, false, JsonFields::kInt32Min, JsonFields::kInt32Max);
  Int32(o, "memory", c.memory);
  Int32(o, "memoryReservation", c.memory_reservation);
  o.Bool("essential", c.essential);
  c.resource_requirements = ResourceRequirements(o);
  if (o.ok()) c.extra_json = ExtraFields(o.object(), kContainerKnown);
  return c;
}

// Quantity: task-level cpu/memory are strings in ECS, but SDKs and scripts also send integers (kept as written:
// 2^64-1 stays itself, not -1).
void Quantity(JsonFields& f, const char* key, std::optional<std::string>& out) {
  const Json* v = f.Get(key);
  if (v == nullptr) return;
  if (v->is_number_integer()) {
    out = v->dump();
    return;
  }
  std::string s;
  if (f.StringValue(*v, JsonPath(f.path(), key), s)) out = std::move(s);
}

std::vector<PlacementConstraint> Constraints(JsonFields& f, const char* key) {
  std::vector<PlacementConstraint> out;
  Objects(f, key, 100, [&](JsonFields& o) {
    PlacementConstraint pc;
    o.String("type", pc.type);
    o.String("expression", pc.expression);
    out.push_back(std::move(pc));
  });
  return out;
}

// EmptyObject: what a body that is not an object is read as, and the object under JsonFields' value reads of a
// list given on its own (ParseAttributes).
const Json& EmptyObject() {
  static const Json empty = Json::object();
  return empty;
}

// ECS's character sets for attributes: names of letters, digits and - _ / \ . (1-128); values printable ASCII
// (ECS: letters, digits, - _ . @ / \ : and spaces; we also let other punctuation through, e.g. a GPU model name),
// at most 128, not starting or ending with a space. No control characters, no non-ASCII.
Status CheckAttribute(const Attribute& a, const std::string& p) {
  auto name_char = [](char c) { return c && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_/\\.", c)); };
  if (a.name.size() > 128 || !std::all_of(a.name.begin(), a.name.end(), name_char))
    return Status::InvalidParameter(
        p + ".name: must be 1-128 letters, numbers, hyphens, underscores, slashes, back slashes or periods");
  if (a.value && (a.value->size() > 128 || std::any_of(a.value->begin(), a.value->end(), [](char c) {
                    return static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e;
                  }) || (!a.value->empty() && (a.value->front() == ' ' || a.value->back() == ' '))))
    return Status::InvalidParameter(
        p + ".value: must be at most 128 printable ASCII characters, not starting or ending with a space");
  return Status::Ok();
}

}  // namespace

// ---- requests ------------------------------------------------------------------------------------------

Result<TaskDefinition> ParseRegisterTaskDefinition(const Json& body) {
  if (!body.is_object()) return Status::Client("request body must be a JSON object");
  JsonFields f(body, JsonPath(), EcsDialect());
  TaskDefinition td;
  f.String("family", td.family);
  Objects(f, "containerDefinitions", 100, [&](JsonFields& o) { td.containers.push_back(ContainerDefinitionOf(o)); });
  Quantity(f, "cpu", td.cpu);
  Quantity(f, "memory", td.memory);
  f.String("networkMode", td.network_mode);
  f.Strings("requiresCompatibilities", td.requires_compatibilities, 10);
  td.placement_constraints = Constraints(f, "placementConstraints");
  td.tags = KeyValues(f, "tags", "key", "value");
  if (!f.ok()) return f.status();
  td.extra_json = ExtraFields(body, kTaskDefKnown);
  return td;
}

Result<TaskOverride> ParseTaskOverride(const Json& overrides, const std::string& path) {
  TaskOverride o;
  if (overrides.is_null()) return o;
  JsonFields f(overrides, JsonPath(path), EcsDialect());
  Objects(f, "containerOverrides", 100, [&](JsonFields& c) {
    ContainerOverride co;
    c.String("name", co.name);
    if (c.Get("command") != nullptr) {
      std::vector<std::string> command;
      c.Strings("command", command, kMaxList);
      co.command = std::move(command);
    }
    co.environment = KeyValues(c, "environment");
    Int32(c, "cpu", co.cpu);
    Int32(c, "memory", co.memory);
    Int32(c, "memoryReservation", co.memory_reservation);
    co.resource_requirements = ResourceRequirements(c);
    o.container_overrides.push_back(std::move(co));
  });
  Quantity(f, "cpu", o.cpu);
  Quantity(f, "memory", o.memory);
  if (!f.ok()) return f.status();
  return o;
}

// A body that is not an object has no such member (the router refuses such bodies before they get here).
Result<std::vector<PlacementConstraint>> ParsePlacementConstraints(const Json& body, const std::string& key) {
  JsonFields f(body.is_object() ? body : EmptyObject(), JsonPath(), EcsDialect());
  auto out = Constraints(f, key.c_str());
  if (!f.ok()) return f.status();
  return out;
}

Result<std::vector<PlacementStrategy>> ParsePlacementStrategies(const Json& body, const std::string& key) {
  JsonFields f(body.is_object() ? body : EmptyObject(), JsonPath(), EcsDialect());
  std::vector<PlacementStrategy> out;
  Objects(f, key.c_str(), 100, [&](JsonFields& o) {
    PlacementStrategy s;
    o.String("type", s.type);
    o.String("field", s.field);
    out.push_back(std::move(s));
  });
  if (!f.ok()) return f.status();
  return out;
}

Result<std::vector<KeyValuePair>> ParseTags(const Json& body) {
  JsonFields f(body.is_object() ? body : EmptyObject(), JsonPath(), EcsDialect());
  auto out = KeyValues(f, "tags", "key", "value");
  if (!f.ok()) return f.status();
  return out;
}

Result<std::vector<Attribute>> ParseAttributes(const Json& list, const std::string& path) {
  std::vector<Attribute> out;
  if (list.is_null()) return out;
  JsonFields f(EmptyObject(), JsonPath(), EcsDialect());
  const JsonPath at(path);
  if (!f.ArrayValue(list, at)) return f.status();
  for (size_t i = 0; i < list.size() && f.ok(); ++i) {
    const JsonPath element(at, i);
    JsonFields o(list[i], element, EcsDialect());
    Attribute a;
    o.String("name", a.name);
    o.String("value", a.value);
    if (o.ok() && a.name.empty()) o.Fail(element.str(), "name is required");
    if (o.ok()) o.Take(CheckAttribute(a, element.str()));
    f.Take(o.status());
    out.push_back(std::move(a));
  }
  if (!f.ok()) return f.status();
  return out;
}

// ---- responses -----------------------------------------------------------------------------------------

Json EpochSeconds(EpochMs ms) { return static_cast<double>(ms) / 1000.0; }

Json ToJson(const std::vector<KeyValuePair>& kvs, bool as_tags) {
  Json out = Json::array();
  for (const auto& kv : kvs)
    out.push_back(as_tags ? Json{{"key", kv.name}, {"value", kv.value}} : Json{{"name", kv.name}, {"value", kv.value}});
  return out;
}

namespace {

Json MpsJson(const MpsSharing& m) {
  Json j = {{"memory", m.memory_mib}};
  if (m.max_compute_percent) j["maxComputePercent"] = *m.max_compute_percent;
  return j;
}

Json ResourceRequirementsJson(const std::vector<ResourceRequirement>& rs) {
  Json out = Json::array();
  for (const auto& r : rs) {
    Json j = {{"type", r.type}};
    if (r.value) j["value"] = *r.value;
    if (r.mps) j["sharingStrategy"] = {{"nvidiaMps", MpsJson(*r.mps)}};
    out.push_back(std::move(j));
  }
  return out;
}

Json ResourcesJson(const Resources& r) {
  return Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", r.cpu}, {"doubleValue", 0},
                       {"longValue", 0}},
                      {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", r.memory}, {"doubleValue", 0},
                       {"longValue", 0}}});
}

}  // namespace

Json ToJson(const ArnContext& ctx, const Cluster& c, const ClusterCounts& counts) {
  Json settings = Json::array(
      {{{"name", "containerInsights"}, {"value", "disabled"}},
       {{"name", "gpupack.computeAwarePlacement"}, {"value", c.settings.compute_aware_placement ? "enabled" : "disabled"}},
       {{"name", "gpupack.instanceAcceptance"}, {"value", c.settings.manual_instance_acceptance ? "manual" : "automatic"}}});
  return {{"clusterArn", ctx.ClusterArn(c.name)},
          {"clusterName", c.name},
          {"status", Name(c.status)},
          {"registeredContainerInstancesCount", counts.registered_instances},
          {"runningTasksCount", counts.running_tasks},
          {"pendingTasksCount", counts.pending_tasks},
          {"activeServicesCount", counts.active_services},
          {"statistics", Json::array()},
          {"tags", ToJson(c.tags, true)},
          {"settings", settings},
          {"capacityProviders", c.capacity_providers},
          {"defaultCapacityProviderStrategy", ToJson(c.default_strategy)}};
}

Json ToJson(const std::vector<CapacityProviderStrategyItem>& strategy) {
  Json out = Json::array();
  for (const auto& item : strategy)
    out.push_back({{"capacityProvider", item.provider}, {"weight", item.weight}, {"base", item.base}});
  return out;
}

Json ToJson(const CapacityProvider& p, bool tags) {
  Json out = {{"capacityProviderArn", p.arn}, {"name", p.name}, {"status", Name(p.status)}, {"type", "EC2"}};
  if (!p.update_status.empty()) out["updateStatus"] = p.update_status;
  if (tags) out["tags"] = ToJson(p.tags, true);
  return out;
}

Json ToJson(const TaskDefinition& td) {
  Json containers = Json::array();
  for (const auto& c : td.containers) {
    Json j = {{"name", c.name}, {"image", c.image}, {"cpu", c.cpu}, {"essential", c.essential},
              {"environment", ToJson(c.environment, false)}, {"mountPoints", Json::array()},
              {"volumesFrom", Json::array()}, {"portMappings", Json::array()}};
    if (!c.command.empty()) j["command"] = c.command;
    if (!c.entry_point.empty()) j["entryPoint"] = c.entry_point;
    if (c.memory) j["memory"] = *c.memory;
    if (c.memory_reservation) j["memoryReservation"] = *c.memory_reservation;
    if (!c.resource_requirements.empty()) j["resourceRequirements"] = ResourceRequirementsJson(c.resource_requirements);
    MergeExtra(j, c.extra_json);
    containers.push_back(std::move(j));
  }
  Json pcs = Json::array();
  for (const auto& pc : td.placement_constraints) {
    Json j = {{"type", pc.type}};
    if (!pc.expression.empty()) j["expression"] = pc.expression;
    pcs.push_back(std::move(j));
  }
  Json out = {{"taskDefinitionArn", td.arn},
              {"family", td.family},
              {"revision", td.revision},
              {"status", Name(td.status)},
              {"containerDefinitions", containers},
              {"placementConstraints", pcs},
              {"volumes", Json::array()},
              {"compatibilities", Json::array({"EC2"})},
              {"requiresAttributes", Json::array()},
              {"registeredAt", EpochSeconds(td.registered_at)}};
  if (!td.requires_compatibilities.empty()) out["requiresCompatibilities"] = td.requires_compatibilities;
  if (td.cpu) out["cpu"] = *td.cpu;
  if (td.memory) out["memory"] = *td.memory;
  if (!td.network_mode.empty()) out["networkMode"] = td.network_mode;
  if (td.deregistered_at) out["deregisteredAt"] = EpochSeconds(td.deregistered_at);
  MergeExtra(out, td.extra_json);
  return out;
}

Json ToJson(const TaskOverride& o) {
  Json cos = Json::array();
  for (const auto& co : o.container_overrides) {
    Json j = {{"name", co.name}};
    if (co.command) j["command"] = *co.command;
    if (!co.environment.empty()) j["environment"] = ToJson(co.environment, false);
    if (co.cpu) j["cpu"] = *co.cpu;
    if (co.memory) j["memory"] = *co.memory;
    if (co.memory_reservation) j["memoryReservation"] = *co.memory_reservation;
    cos.push_back(std::move(j));
  }
  Json overrides = {{"containerOverrides", cos}, {"inferenceAcceleratorOverrides", Json::array()}};
  if (o.cpu) overrides["cpu"] = *o.cpu;
  if (o.memory) overrides["memory"] = *o.memory;
  return overrides;
}

Json ToJson(const ArnContext& ctx, const Task& t) {
  Json containers = Json::array();
  for (const auto& c : t.containers) {
    Json j = {{"containerArn", c.container_arn},
              {"taskArn", t.arn},
              {"name", c.name},
              {"image", c.image},
              {"lastStatus", Name(c.last_status)},
              {"networkBindings", Json::array()},
              {"networkInterfaces", Json::array()}};
    if (c.exit_code) j["exitCode"] = *c.exit_code;
    if (!c.reason.empty()) j["reason"] = c.reason;
    if (!c.gpu_ids.empty()) j["gpuIds"] = c.gpu_ids;
    if (c.mps) j["gpuSharingStrategy"] = {{"nvidiaMps", MpsJson(*c.mps)}};
    containers.push_back(std::move(j));
  }
  Json out = {{"taskArn", t.arn},
              {"clusterArn", ctx.ClusterArn(t.cluster)},
              {"taskDefinitionArn", t.task_definition_arn},
              {"containerInstanceArn", t.container_instance_arn},
              {"overrides", ToJson(t.overrides)},
              {"lastStatus", Name(t.last_status)},
              {"desiredStatus", Name(t.desired_status)},
              {"cpu", std::to_string(t.reserved.cpu)},
              {"memory", std::to_string(t.reserved.memory)},
              {"containers", containers},
              {"version", t.version},
              {"createdAt", EpochSeconds(t.created_at)},
              {"group", t.group},
              {"launchType", t.launch_type},
              {"attachments", Json::array()},
              {"tags", ToJson(t.tags, true)}};
  if (!t.started_by.empty()) out["startedBy"] = t.started_by;
  if (!t.capacity_provider_name.empty()) out["capacityProviderName"] = t.capacity_provider_name;
  if (t.container_instance_arn.empty()) out.erase("containerInstanceArn");  // PROVISIONING: not placed yet
  if (!t.stop_code.empty()) out["stopCode"] = t.stop_code;
  if (!t.stopped_reason.empty()) out["stoppedReason"] = t.stopped_reason;
  if (t.started_at) out["startedAt"] = EpochSeconds(t.started_at);
  if (t.stopping_at) out["stoppingAt"] = EpochSeconds(t.stopping_at);
  if (t.stopped_at) {
    out["stoppedAt"] = EpochSeconds(t.stopped_at);
    out["executionStoppedAt"] = EpochSeconds(t.stopped_at);
  }
  return out;
}

Json ToJson(const ArnContext& ctx, const Service& svc, bool tags) {
  Json constraints = Json::array(), strategies = Json::array();
  for (const auto& pc : svc.placement_constraints) {
    Json j = {{"type", pc.type}};
    if (!pc.expression.empty()) j["expression"] = pc.expression;
    constraints.push_back(std::move(j));
  }
  for (const auto& ps : svc.placement_strategy) {
    Json j = {{"type", ps.type}};
    if (!ps.field.empty()) j["field"] = ps.field;
    strategies.push_back(std::move(j));
  }
  const DeploymentConfiguration& cfg = svc.deployment_configuration;
  Json deployments = Json::array();
  for (const auto& d : svc.deployments) {
    Json j = {{"id", d.id},
              {"status", d.primary ? "PRIMARY" : "ACTIVE"},
              {"taskDefinition", d.task_definition_arn},
              {"desiredCount", d.desired_count},
              {"pendingCount", d.pending_count},
              {"runningCount", d.running_count},
              {"failedTasks", d.failed_tasks},
              {"createdAt", EpochSeconds(d.created_at)},
              {"updatedAt", EpochSeconds(d.updated_at)},
              {"launchType", "EC2"},
              {"rolloutState", Name(d.rollout_state)}};
    if (!d.rollout_state_reason.empty()) j["rolloutStateReason"] = d.rollout_state_reason;
    deployments.push_back(std::move(j));
  }
  Json events = Json::array();
  for (const auto& e : svc.events)
    events.push_back({{"id", e.id}, {"createdAt", EpochSeconds(e.created_at)}, {"message", e.message}});
  Json out = {{"serviceArn", svc.arn},
              {"serviceName", svc.name},
              {"clusterArn", ctx.ClusterArn(svc.cluster)},
              {"status", Name(svc.status)},
              {"desiredCount", svc.desired_count},
              {"runningCount", svc.running_count},
              {"pendingCount", svc.pending_count},
              {"launchType", "EC2"},
              {"taskDefinition", svc.task_definition_arn},
              {"deploymentConfiguration",
               {{"deploymentCircuitBreaker", {{"enable", cfg.circuit_breaker}, {"rollback", cfg.rollback}}},
                {"maximumPercent", cfg.maximum_percent},
                {"minimumHealthyPercent", cfg.minimum_healthy_percent}}},
              {"deployments", deployments},
              {"events", events},
              {"createdAt", EpochSeconds(svc.created_at)},
              {"placementConstraints", constraints},
              {"placementStrategy", strategies},
              {"schedulingStrategy", svc.daemon ? "DAEMON" : "REPLICA"},
              {"deploymentController", {{"type", "ECS"}}},
              {"loadBalancers", Json::array()},
              {"serviceRegistries", Json::array()},
              {"enableECSManagedTags", false},
              {"propagateTags", "NONE"},
              {"enableExecuteCommand", false}};
  if (!svc.capacity_provider_strategy.empty()) {  // ECS answers one or the other
    out.erase("launchType");
    out["capacityProviderStrategy"] = ToJson(svc.capacity_provider_strategy);
  }
  if (tags) out["tags"] = ToJson(svc.tags, true);
  return out;
}

Json ToJson(const ContainerInstance& inst) {
  Json attrs = Json::array();
  for (const auto& a : inst.attributes) {
    Json j = {{"name", a.name}};
    if (a.value) j["value"] = *a.value;
    attrs.push_back(std::move(j));
  }
  Json gpus = Json::array();
  for (const auto& g : inst.gpus) {
    Json gpu = {{"gpuId", g.id},
                {"sharingMode", GpuModeName(g.mode)},
                {"totalMemoryInMiB", g.total_memory_mib},
                {"remainingMemoryInMiB", g.remaining_memory_mib},
                {"containerCount", g.container_count}};
    if (g.held) gpu["heldAfterFault"] = true;  // the agent holds it until its MPS server is healthy again
    gpus.push_back(std::move(gpu));
  }
  Json out = {{"containerInstanceArn", inst.arn},
              {"ec2InstanceId", inst.ec2_instance_id},
              {"version", inst.version},
              {"versionInfo", {{"agentVersion", inst.agent_version}}},
              {"remainingResources", ResourcesJson(inst.remaining)},
              {"registeredResources", ResourcesJson(inst.registered)},
              {"status", Name(inst.status)},
              {"agentConnected", inst.agent_connected},
              {"runningTasksCount", inst.running_tasks_count},
              {"pendingTasksCount", inst.pending_tasks_count},
              {"attributes", attrs},
              {"registeredAt", EpochSeconds(inst.registered_at)},
              {"attachments", Json::array()},
              {"tags", Json::array()},
              {"gpuDevices", gpus}};
  if (!inst.status_reason.empty()) out["statusReason"] = inst.status_reason;
  if (const Attribute* cp = inst.FindAttribute(kCapacityProviderAttribute); cp && cp->value)
    out["capacityProviderName"] = *cp->value;
  // ECS's instance health: the agent reports the instance impaired when its MPS control daemon stops answering.
  const char* health = inst.impaired ? "IMPAIRED" : "OK";
  out["healthStatus"] = {{"overallStatus", health},
                         {"details", Json::array({{{"type", "CONTAINER_RUNTIME"}, {"status", health}}})}};
  return out;
}

Json ToJson(const PlacementFailure& f) {
  Json j = {{"arn", f.arn}, {"reason", f.reason}};
  if (!f.detail.empty()) j["detail"] = f.detail;
  return j;
}

}  // namespace gpupack::api
