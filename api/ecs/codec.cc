#include "api/ecs/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

namespace gpupack::api {

namespace {

// CodecError carries a Status out of deep parsing code; it never leaves this file.
struct CodecError {
  Status status;
};

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw CodecError{Status::Client(path + ": " + what)};
}

const char* TypeName(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "a list";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_float: return "a number with a fraction";
    default: return "a number";
  }
}

std::string Join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

const Json* Field(const Json& obj, const std::string& key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> GetString(const Json& obj, const std::string& key, const std::string& path) {
  const Json* f = Field(obj, key);
  if (!f) return std::nullopt;
  if (!f->is_string()) Fail(Join(path, key), std::string("expected a string, got ") + TypeName(*f));
  return f->get<std::string>();
}

std::optional<int64_t> GetInt(const Json& obj, const std::string& key, const std::string& path) {
  const Json* f = Field(obj, key);
  if (!f) return std::nullopt;
  if (f->is_number_integer() || f->is_number_unsigned()) {
    if (f->is_number_unsigned() && f->get<uint64_t>() > static_cast<uint64_t>(INT32_MAX))
      Fail(Join(path, key), "integer out of range");
    int64_t v = f->get<int64_t>();
    if (v > INT32_MAX || v < INT32_MIN) Fail(Join(path, key), "integer out of range");
    return v;
  }
  if (f->is_number_float()) {
    double d = f->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= INT32_MAX) return static_cast<int64_t>(d);
    if (std::isfinite(d) && d == std::floor(d)) Fail(Join(path, key), "integer out of range");  // e.g. 2^64, 1e300
    Fail(Join(path, key), "expected an integer, got a number with a fraction");
  }
  Fail(Join(path, key), std::string("expected an integer, got ") + TypeName(*f));
}

std::optional<int64_t> GetInt64(const Json& obj, const std::string& key, const std::string& path) {
  const Json* f = Field(obj, key);
  if (!f) return std::nullopt;
  if (f->is_number_unsigned() && f->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    Fail(Join(path, key), "integer out of range");
  if (f->is_number_integer()) return f->get<int64_t>();
  Fail(Join(path, key), std::string("expected an integer, got ") + TypeName(*f));
}

std::optional<bool> GetBool(const Json& obj, const std::string& key, const std::string& path) {
  const Json* f = Field(obj, key);
  if (!f) return std::nullopt;
  if (!f->is_boolean()) Fail(Join(path, key), std::string("expected a boolean, got ") + TypeName(*f));
  return f->get<bool>();
}

const Json* GetList(const Json& obj, const std::string& key, const std::string& path, size_t max = 1000) {
  const Json* f = Field(obj, key);
  if (!f) return nullptr;
  if (!f->is_array()) Fail(Join(path, key), std::string("expected a list, got ") + TypeName(*f));
  if (f->size() > max) Fail(Join(path, key), "at most " + std::to_string(max) + " entries are allowed");
  return f;
}

const Json* GetObject(const Json& obj, const std::string& key, const std::string& path) {
  const Json* f = Field(obj, key);
  if (!f) return nullptr;
  if (!f->is_object()) Fail(Join(path, key), std::string("expected an object, got ") + TypeName(*f));
  return f;
}

std::vector<std::string> GetStringList(const Json& obj, const std::string& key, const std::string& path,
                                       size_t max = 1000) {
  std::vector<std::string> out;
  const Json* l = GetList(obj, key, path, max);
  if (!l) return out;
  for (size_t i = 0; i < l->size(); ++i) {
    const Json& e = (*l)[i];
    if (!e.is_string())
      Fail(Join(path, key) + "[" + std::to_string(i) + "]", std::string("expected a string, got ") + TypeName(e));
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::string Index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

std::vector<KeyValuePair> GetKeyValues(const Json& obj, const std::string& key, const std::string& path,
                                       const char* k = "name", const char* v = "value") {
  std::vector<KeyValuePair> out;
  const Json* l = GetList(obj, key, path);
  if (!l) return out;
  for (size_t i = 0; i < l->size(); ++i) {
    std::string p = Index(Join(path, key), i);
    const Json& e = (*l)[i];
    if (!e.is_object()) Fail(p, std::string("expected an object, got ") + TypeName(e));
    out.push_back({GetString(e, k, p).value_or(""), GetString(e, v, p).value_or("")});
  }
  return out;
}

std::vector<ResourceRequirement> GetResourceRequirements(const Json& obj, const std::string& path) {
  std::vector<ResourceRequirement> out;
  const Json* l = GetList(obj, "resourceRequirements", path, 16);
  if (!l) return out;
  for (size_t i = 0; i < l->size(); ++i) {
    std::string p = Index(Join(path, "resourceRequirements"), i);
    const Json& e = (*l)[i];
    if (!e.is_object()) Fail(p, std::string("expected an object, got ") + TypeName(e));
    ResourceRequirement r;
    r.type = GetString(e, "type", p).value_or("");
    r.value = GetString(e, "value", p);
    if (const Json* ss = GetObject(e, "sharingStrategy", p)) {
      r.has_sharing_strategy = true;
      std::string sp = Join(p, "sharingStrategy");
      if (const Json* mps = GetObject(*ss, "nvidiaMps", sp)) {
        std::string mp = Join(sp, "nvidiaMps");
        MpsSharing m;
        auto mem = GetInt(*mps, "memory", mp);
        if (!mem) Fail(mp, "memory is required (MiB of GPU memory for the container)");
        m.memory_mib = *mem;
        if (auto c = GetInt(*mps, "maxComputePercent", mp)) m.max_compute_percent = static_cast<int>(*c);
        r.mps = m;
      }
    }
    out.push_back(std::move(r));
  }
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

ContainerDefinition ParseContainerDefinition(const Json& e, const std::string& p) {
  if (!e.is_object()) Fail(p, std::string("expected an object, got ") + TypeName(e));
  ContainerDefinition c;
  c.name = GetString(e, "name", p).value_or("");
  c.image = GetString(e, "image", p).value_or("");
  c.command = GetStringList(e, "command", p);
  c.entry_point = GetStringList(e, "entryPoint", p);
  c.environment = GetKeyValues(e, "environment", p);
  c.cpu = GetInt(e, "cpu", p).value_or(0);
  c.memory = GetInt(e, "memory", p);
  c.memory_reservation = GetInt(e, "memoryReservation", p);
  c.essential = GetBool(e, "essential", p).value_or(true);
  c.resource_requirements = GetResourceRequirements(e, p);
  c.extra_json = ExtraFields(e, kContainerKnown);
  return c;
}

// Task-level cpu/memory are strings in ECS, but SDKs and scripts also send numbers.
std::optional<std::string> GetQuantity(const Json& obj, const std::string& key, const std::string& path) {
  const Json* f = Field(obj, key);
  if (!f) return std::nullopt;
  if (f->is_string()) return f->get<std::string>();
  if (f->is_number_integer() || f->is_number_unsigned()) return f->dump();  // 2^64-1 stays itself, not -1
  Fail(Join(path, key), std::string("expected a string, got ") + TypeName(*f));
}

template <typename F>
auto Guard(F&& f) -> Result<decltype(f())> {
  try {
    return f();
  } catch (const CodecError& e) {
    return e.status;
  } catch (const Json::exception& e) {
    return Status::Client(std::string("malformed request: ") + e.what());
  }
}

}  // namespace

// ---- requests ------------------------------------------------------------------------------------------

Result<TaskDefinition> ParseRegisterTaskDefinition(const Json& body) {
  return Guard([&]() -> TaskDefinition {
    TaskDefinition td;
    td.family = GetString(body, "family", "").value_or("");
    const Json* defs = GetList(body, "containerDefinitions", "", 100);
    if (defs)
      for (size_t i = 0; i < defs->size(); ++i)
        td.containers.push_back(ParseContainerDefinition((*defs)[i], Index("containerDefinitions", i)));
    td.cpu = GetQuantity(body, "cpu", "");
    td.memory = GetQuantity(body, "memory", "");
    td.network_mode = GetString(body, "networkMode", "").value_or("");
    td.requires_compatibilities = GetStringList(body, "requiresCompatibilities", "", 10);
    const Json* pcs = GetList(body, "placementConstraints", "", 100);
    if (pcs)
      for (size_t i = 0; i < pcs->size(); ++i) {
        std::string p = Index("placementConstraints", i);
        const Json& e = (*pcs)[i];
        if (!e.is_object()) Fail(p, std::string("expected an object, got ") + TypeName(e));
        td.placement_constraints.push_back(
            {GetString(e, "type", p).value_or(""), GetString(e, "expression", p).value_or("")});
      }
    td.tags = GetKeyValues(body, "tags", "", "key", "value");
    td.extra_json = ExtraFields(body, kTaskDefKnown);
    return td;
  });
}

Result<TaskOverride> ParseTaskOverride(const Json& overrides, const std::string& path) {
  return Guard([&]() -> TaskOverride {
    TaskOverride o;
    if (overrides.is_null()) return o;
    if (!overrides.is_object()) Fail(path, std::string("expected an object, got ") + TypeName(overrides));
    const Json* cos = GetList(overrides, "containerOverrides", path, 100);
    if (cos)
      for (size_t i = 0; i < cos->size(); ++i) {
        std::string p = Index(Join(path, "containerOverrides"), i);
        const Json& e = (*cos)[i];
        if (!e.is_object()) Fail(p, std::string("expected an object, got ") + TypeName(e));
        ContainerOverride co;
        co.name = GetString(e, "name", p).value_or("");
        if (Field(e, "command")) co.command = GetStringList(e, "command", p);
        co.environment = GetKeyValues(e, "environment", p);
        co.cpu = GetInt(e, "cpu", p);
        co.memory = GetInt(e, "memory", p);
        co.memory_reservation = GetInt(e, "memoryReservation", p);
        co.resource_requirements = GetResourceRequirements(e, p);
        o.container_overrides.push_back(std::move(co));
      }
    o.cpu = GetQuantity(overrides, "cpu", path);
    o.memory = GetQuantity(overrides, "memory", path);
    return o;
  });
}

Result<std::vector<PlacementConstraint>> ParsePlacementConstraints(const Json& body, const std::string& key) {
  return Guard([&]() -> std::vector<PlacementConstraint> {
    std::vector<PlacementConstraint> out;
    const Json* l = GetList(body, key, "", 100);
    if (!l) return out;
    for (size_t i = 0; i < l->size(); ++i) {
      std::string p = Index(key, i);
      const Json& e = (*l)[i];
      if (!e.is_object()) Fail(p, std::string("expected an object, got ") + TypeName(e));
      out.push_back({GetString(e, "type", p).value_or(""), GetString(e, "expression", p).value_or("")});
    }
    return out;
  });
}

Result<std::vector<PlacementStrategy>> ParsePlacementStrategies(const Json& body, const std::string& key) {
  return Guard([&]() -> std::vector<PlacementStrategy> {
    std::vector<PlacementStrategy> out;
    const Json* l = GetList(body, key, "", 100);
    if (!l) return out;
    for (size_t i = 0; i < l->size(); ++i) {
      std::string p = Index(key, i);
      const Json& e = (*l)[i];
      if (!e.is_object()) Fail(p, std::string("expected an object, got ") + TypeName(e));
      out.push_back({GetString(e, "type", p).value_or(""), GetString(e, "field", p).value_or("")});
    }
    return out;
  });
}

Result<std::vector<KeyValuePair>> ParseTags(const Json& body) {
  return Guard([&]() { return GetKeyValues(body, "tags", "", "key", "value"); });
}

Result<std::vector<Attribute>> ParseAttributes(const Json& list, const std::string& path) {
  return Guard([&]() -> std::vector<Attribute> {
    std::vector<Attribute> out;
    if (list.is_null()) return out;
    if (!list.is_array()) Fail(path, std::string("expected a list, got ") + TypeName(list));
    for (size_t i = 0; i < list.size(); ++i) {
      std::string p = Index(path, i);
      const Json& e = list[i];
      if (!e.is_object()) Fail(p, std::string("expected an object, got ") + TypeName(e));
      Attribute a;
      a.name = GetString(e, "name", p).value_or("");
      a.value = GetString(e, "value", p);
      if (a.name.empty()) Fail(p, "name is required");
      // ECS's character sets: names of letters, digits and - _ / \ . (1-128); values printable ASCII (ECS:
      // letters, digits, - _ . @ / \ : and spaces; we also let other punctuation through, e.g. a GPU model
      // name), at most 128, not starting or ending with a space. No control characters, no non-ASCII.
      auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_/\\.", c); };
      if (a.name.size() > 128 || !std::all_of(a.name.begin(), a.name.end(), [&](char c) { return c && name_char(c); }))
        throw CodecError{Status::InvalidParameter(
            p + ".name: must be 1-128 letters, numbers, hyphens, underscores, slashes, back slashes or periods")};
      if (a.value && (a.value->size() > 128 || std::any_of(a.value->begin(), a.value->end(), [](char c) {
                        return static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e;
                      }) || (!a.value->empty() && (a.value->front() == ' ' || a.value->back() == ' '))))
        throw CodecError{Status::InvalidParameter(
            p + ".value: must be at most 128 printable ASCII characters, not starting or ending with a space")};
      out.push_back(std::move(a));
    }
    return out;
  });
}

Result<std::optional<std::string>> OptString(const Json& body, const std::string& key) {
  return Guard([&]() { return GetString(body, key, ""); });
}
Result<std::optional<int64_t>> OptInt(const Json& body, const std::string& key) {
  return Guard([&]() { return GetInt(body, key, ""); });
}
Result<std::optional<int64_t>> OptInt64(const Json& body, const std::string& key) {
  return Guard([&]() { return GetInt64(body, key, ""); });
}
Result<std::optional<bool>> OptBool(const Json& body, const std::string& key) {
  return Guard([&]() { return GetBool(body, key, ""); });
}
Result<std::vector<std::string>> OptStringList(const Json& body, const std::string& key) {
  return Guard([&]() { return GetStringList(body, key, ""); });
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
       {{"name", "gpupack.computeAwarePlacement"}, {"value", c.settings.compute_aware_placement ? "enabled" : "disabled"}}});
  return {{"clusterArn", ctx.ClusterArn(c.name)},
          {"clusterName", c.name},
          {"status", Name(c.status)},
          {"registeredContainerInstancesCount", counts.registered_instances},
          {"runningTasksCount", counts.running_tasks},
          {"pendingTasksCount", counts.pending_tasks},
          {"activeServicesCount", 0},
          {"statistics", Json::array()},
          {"tags", ToJson(c.tags, true)},
          {"settings", settings},
          {"capacityProviders", Json::array()},
          {"defaultCapacityProviderStrategy", Json::array()}};
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
