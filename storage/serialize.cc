#include "storage/serialize.h"

#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/json_fields.h"

namespace gpupack::storage_internal {
namespace {

using json = nlohmann::json;

// ---- forward declarations: the overload sets call each other (vectors of structs, structs of structs).

json Enc(const std::string& v);
json Enc(int64_t v);
json Enc(int v);
json Enc(bool v);
json Enc(GpuMode v);
json Enc(TaskStatus v);
json Enc(InstanceStatus v);
json Enc(LifecycleStatus v);
json Enc(const MpsSharing& v);
json Enc(const ResourceRequirement& v);
json Enc(const KeyValuePair& v);
json Enc(const ContainerDefinition& v);
json Enc(const PlacementConstraint& v);
json Enc(const TaskDefinition& v);
json Enc(const ClusterSettings& v);
json Enc(const Cluster& v);
json Enc(const Gpu& v);
json Enc(const Resources& v);
json Enc(const Attribute& v);
json Enc(const ContainerInstance& v);
json Enc(const ContainerOverride& v);
json Enc(const TaskOverride& v);
json Enc(const Container& v);
json Enc(const GpuReservation& v);
json Enc(const Task& v);
json Enc(const ClientTokenRecord& v);
json Enc(ServiceStatus v);
json Enc(RolloutState v);
json Enc(const PlacementStrategy& v);
json Enc(const DeploymentConfiguration& v);
json Enc(const ServiceDeployment& v);
json Enc(const ServiceEvent& v);
json Enc(const Service& v);
template <typename T>
json Enc(const std::vector<T>& v);

// Dec reads the value `j` at `at` into `out`, keeping a problem in `f`; Read reads a stored object's members.
void Dec(JsonFields& f, const json& j, const JsonPath& at, std::string& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, int64_t& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, int& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, bool& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, GpuMode& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, TaskStatus& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, InstanceStatus& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, LifecycleStatus& out);
void Read(JsonFields& o, MpsSharing& out);
void Read(JsonFields& o, ResourceRequirement& out);
void Read(JsonFields& o, KeyValuePair& out);
void Read(JsonFields& o, ContainerDefinition& out);
void Read(JsonFields& o, PlacementConstraint& out);
void Read(JsonFields& o, TaskDefinition& out);
void Read(JsonFields& o, ClusterSettings& out);
void Read(JsonFields& o, Cluster& out);
void Read(JsonFields& o, Gpu& out);
void Read(JsonFields& o, Resources& out);
void Read(JsonFields& o, Attribute& out);
void Read(JsonFields& o, ContainerInstance& out);
void Read(JsonFields& o, ContainerOverride& out);
void Read(JsonFields& o, TaskOverride& out);
void Read(JsonFields& o, Container& out);
void Read(JsonFields& o, GpuReservation& out);
void Read(JsonFields& o, Task& out);
void Read(JsonFields& o, ClientTokenRecord& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, ServiceStatus& out);
void Dec(JsonFields& f, const json& j, const JsonPath& at, RolloutState& out);
void Read(JsonFields& o, PlacementStrategy& out);
void Read(JsonFields& o, DeploymentConfiguration& out);
void Read(JsonFields& o, ServiceDeployment& out);
void Read(JsonFields& o, ServiceEvent& out);
void Read(JsonFields& o, Service& out);
template <typename T>
void Dec(JsonFields& f, const json& j, const JsonPath& at, std::vector<T>& out);
template <typename T>
void Dec(JsonFields& f, const json& j, const JsonPath& at, std::optional<T>& out);
template <typename T>
  requires requires(JsonFields& o, T& v) { Read(o, v); }
void Dec(JsonFields& f, const json& j, const JsonPath& at, T& out);

// ---- encoding

// Obj builds one JSON object; an absent optional writes no key.
class ObjWriter {
 public:
  template <typename T>
  ObjWriter& Put(const char* key, const T& v) {
    j_[key] = Enc(v);
    return *this;
  }
  template <typename T>
  ObjWriter& Put(const char* key, const std::optional<T>& v) {
    if (v) j_[key] = Enc(*v);
    return *this;
  }
  json Done() { return std::move(j_); }

 private:
  json j_ = json::object();
};

json Enc(const std::string& v) { return v; }
json Enc(int64_t v) { return v; }
json Enc(int v) { return v; }
json Enc(bool v) { return v; }

json Enc(GpuMode v) {
  switch (v) {
    case GpuMode::kIdle: return "IDLE";
    case GpuMode::kMps: return "NVIDIA_MPS";
    case GpuMode::kDedicated: return "DEDICATED";
  }
  return "IDLE";
}

// Statuses are stored as ECS's names, as they were when the model held them as strings.
json Enc(TaskStatus v) { return Name(v); }
json Enc(InstanceStatus v) { return Name(v); }
json Enc(LifecycleStatus v) { return Name(v); }
json Enc(ServiceStatus v) { return Name(v); }
json Enc(RolloutState v) { return Name(v); }

template <typename T>
json Enc(const std::vector<T>& v) {
  json a = json::array();
  for (const auto& e : v) a.push_back(Enc(e));
  return a;
}

json Enc(const MpsSharing& v) {
  return ObjWriter().Put("memory_mib", v.memory_mib).Put("max_compute_percent", v.max_compute_percent).Done();
}

json Enc(const ResourceRequirement& v) {
  return ObjWriter()
      .Put("type", v.type)
      .Put("value", v.value)
      .Put("mps", v.mps)
      .Put("has_sharing_strategy", v.has_sharing_strategy)
      .Done();
}

json Enc(const KeyValuePair& v) { return ObjWriter().Put("name", v.name).Put("value", v.value).Done(); }

json Enc(const ContainerDefinition& v) {
  return ObjWriter()
      .Put("name", v.name)
      .Put("image", v.image)
      .Put("command", v.command)
      .Put("entry_point", v.entry_point)
      .Put("environment", v.environment)
      .Put("cpu", v.cpu)
      .Put("memory", v.memory)
      .Put("memory_reservation", v.memory_reservation)
      .Put("essential", v.essential)
      .Put("resource_requirements", v.resource_requirements)
      .Put("extra_json", v.extra_json)
      .Done();
}

json Enc(const PlacementConstraint& v) {
  return ObjWriter().Put("type", v.type).Put("expression", v.expression).Done();
}

json Enc(const TaskDefinition& v) {
  return ObjWriter()
      .Put("family", v.family)
      .Put("revision", v.revision)
      .Put("arn", v.arn)
      .Put("status", v.status)
      .Put("containers", v.containers)
      .Put("cpu", v.cpu)
      .Put("memory", v.memory)
      .Put("network_mode", v.network_mode)
      .Put("requires_compatibilities", v.requires_compatibilities)
      .Put("placement_constraints", v.placement_constraints)
      .Put("tags", v.tags)
      .Put("registered_at", v.registered_at)
      .Put("deregistered_at", v.deregistered_at)
      .Put("extra_json", v.extra_json)
      .Done();
}

json Enc(const ClusterSettings& v) {
  return ObjWriter().Put("compute_aware_placement", v.compute_aware_placement).Done();
}

json Enc(const Cluster& v) {
  return ObjWriter()
      .Put("name", v.name)
      .Put("arn", v.arn)
      .Put("status", v.status)
      .Put("settings", v.settings)
      .Put("tags", v.tags)
      .Put("created_at", v.created_at)
      .Done();
}

json Enc(const PlacementStrategy& v) { return ObjWriter().Put("type", v.type).Put("field", v.field).Done(); }

json Enc(const DeploymentConfiguration& v) {
  return ObjWriter()
      .Put("minimum_healthy_percent", v.minimum_healthy_percent)
      .Put("maximum_percent", v.maximum_percent)
      .Put("circuit_breaker", v.circuit_breaker)
      .Put("rollback", v.rollback)
      .Done();
}

json Enc(const ServiceDeployment& v) {
  return ObjWriter()
      .Put("id", v.id)
      .Put("primary", v.primary)
      .Put("task_definition_arn", v.task_definition_arn)
      .Put("desired_count", v.desired_count)
      .Put("pending_count", v.pending_count)
      .Put("running_count", v.running_count)
      .Put("failed_tasks", v.failed_tasks)
      .Put("rollout_state", v.rollout_state)
      .Put("rollout_state_reason", v.rollout_state_reason)
      .Put("created_at", v.created_at)
      .Put("updated_at", v.updated_at)
      .Done();
}

json Enc(const ServiceEvent& v) {
  return ObjWriter().Put("id", v.id).Put("created_at", v.created_at).Put("message", v.message).Done();
}

json Enc(const Service& v) {
  return ObjWriter()
      .Put("arn", v.arn)
      .Put("name", v.name)
      .Put("cluster", v.cluster)
      .Put("status", v.status)
      .Put("task_definition_arn", v.task_definition_arn)
      .Put("stable_task_definition_arn", v.stable_task_definition_arn)
      .Put("desired_count", v.desired_count)
      .Put("daemon", v.daemon)
      .Put("placement_constraints", v.placement_constraints)
      .Put("placement_strategy", v.placement_strategy)
      .Put("deployment_configuration", v.deployment_configuration)
      .Put("deployments", v.deployments)
      .Put("events", v.events)
      .Put("tags", v.tags)
      .Put("client_token", v.client_token)
      .Put("running_count", v.running_count)
      .Put("pending_count", v.pending_count)
      .Put("steady", v.steady)
      .Put("starved", v.starved)
      .Put("failure_streak", v.failure_streak)
      .Put("last_failure_at", v.last_failure_at)
      .Put("next_launch_at", v.next_launch_at)
      .Put("created_at", v.created_at)
      .Put("updated_at", v.updated_at)
      .Put("version", v.version)
      .Done();
}

json Enc(const Gpu& v) {
  return ObjWriter()
      .Put("id", v.id)
      .Put("total_memory_mib", v.total_memory_mib)
      .Put("remaining_memory_mib", v.remaining_memory_mib)
      .Put("mode", v.mode)
      .Put("container_count", v.container_count)
      .Put("compute_used_percent", v.compute_used_percent)
      .Put("held", v.held)
      .Done();
}

json Enc(const Resources& v) { return ObjWriter().Put("cpu", v.cpu).Put("memory", v.memory).Done(); }

json Enc(const Attribute& v) { return ObjWriter().Put("name", v.name).Put("value", v.value).Done(); }

json Enc(const ContainerInstance& v) {
  return ObjWriter()
      .Put("arn", v.arn)
      .Put("id", v.id)
      .Put("cluster", v.cluster)
      .Put("ec2_instance_id", v.ec2_instance_id)
      .Put("instance_type", v.instance_type)
      .Put("status", v.status)
      .Put("status_reason", v.status_reason)
      .Put("agent_connected", v.agent_connected)
      .Put("impaired", v.impaired)
      .Put("agent_version", v.agent_version)
      .Put("registered", v.registered)
      .Put("remaining", v.remaining)
      .Put("gpus", v.gpus)
      .Put("attributes", v.attributes)
      .Put("running_tasks_count", v.running_tasks_count)
      .Put("pending_tasks_count", v.pending_tasks_count)
      .Put("registered_at", v.registered_at)
      .Put("registered_by", v.registered_by)
      .Put("version", v.version)
      .Done();
}

json Enc(const ContainerOverride& v) {
  return ObjWriter()
      .Put("name", v.name)
      .Put("command", v.command)
      .Put("environment", v.environment)
      .Put("cpu", v.cpu)
      .Put("memory", v.memory)
      .Put("memory_reservation", v.memory_reservation)
      .Put("resource_requirements", v.resource_requirements)
      .Done();
}

json Enc(const TaskOverride& v) {
  return ObjWriter()
      .Put("container_overrides", v.container_overrides)
      .Put("cpu", v.cpu)
      .Put("memory", v.memory)
      .Done();
}

json Enc(const Container& v) {
  return ObjWriter()
      .Put("name", v.name)
      .Put("container_arn", v.container_arn)
      .Put("image", v.image)
      .Put("last_status", v.last_status)
      .Put("exit_code", v.exit_code)
      .Put("reason", v.reason)
      .Put("essential", v.essential)
      .Put("gpu_ids", v.gpu_ids)
      .Put("mps", v.mps)
      .Done();
}

json Enc(const GpuReservation& v) {
  return ObjWriter()
      .Put("gpu_id", v.gpu_id)
      .Put("memory_mib", v.memory_mib)
      .Put("compute_percent", v.compute_percent)
      .Put("containers", v.containers)
      .Put("dedicated", v.dedicated)
      .Done();
}

json Enc(const Task& v) {
  return ObjWriter()
      .Put("arn", v.arn)
      .Put("id", v.id)
      .Put("cluster", v.cluster)
      .Put("task_definition_arn", v.task_definition_arn)
      .Put("container_instance_arn", v.container_instance_arn)
      .Put("group", v.group)
      .Put("started_by", v.started_by)
      .Put("launch_type", v.launch_type)
      .Put("last_status", v.last_status)
      .Put("desired_status", v.desired_status)
      .Put("stop_code", v.stop_code)
      .Put("stopped_reason", v.stopped_reason)
      .Put("created_at", v.created_at)
      .Put("started_at", v.started_at)
      .Put("stopping_at", v.stopping_at)
      .Put("stopped_at", v.stopped_at)
      .Put("containers", v.containers)
      .Put("overrides", v.overrides)
      .Put("tags", v.tags)
      .Put("reserved", v.reserved)
      .Put("gpu_reservations", v.gpu_reservations)
      .Put("resources_released", v.resources_released)
      .Put("client_token", v.client_token)
      .Put("version", v.version)
      .Done();
}

json Enc(const ClientTokenRecord& v) {
  return ObjWriter()
      .Put("cluster", v.cluster)
      .Put("token", v.token)
      .Put("request_fingerprint", v.request_fingerprint)
      .Put("task_arns", v.task_arns)
      .Put("created_at", v.created_at)
      .Done();
}

// ---- decoding

const char* TypeName(const json& j) {
  if (j.is_number_integer()) return "integer";
  return j.type_name();
}

// StoreWords: the stores' words for a document that does not match the model (base/json_fields.h), e.g.
// "doc does not match the model: field 'gpus[1].total_memory_mib': expected integer, got string". A missing or
// null member is absent (its field keeps its default).
class StoreWords : public JsonDialect {
 public:
  Status Invalid(const std::string& path, const std::string& what) const override {
    return Status::Server("doc does not match the model: field '" + (path.empty() ? "(document)" : path) +
                          "': " + what);
  }
  Status Error(const JsonError& e) const override {
    const std::string path = e.path.str();
    if (e.got == nullptr) return Invalid(path, "is required");  // no member is required
    switch (e.want) {
      case JsonWant::kObject: return Invalid(path, std::string("expected object, got ") + TypeName(*e.got));
      case JsonWant::kString: return Invalid(path, std::string("expected string, got ") + TypeName(*e.got));
      case JsonWant::kBoolean: return Invalid(path, std::string("expected boolean, got ") + TypeName(*e.got));
      case JsonWant::kInteger:
        if (e.got->is_number_integer()) return Invalid(path, "integer " + e.got->dump() + " is out of range");
        return Invalid(path, std::string("expected integer, got ") + TypeName(*e.got));
      default: return Invalid(path, std::string("expected array, got ") + TypeName(*e.got));
    }
  }
  bool NullIsAbsent() const override { return true; }
};

const StoreWords kWords;

// Members reads the members of one stored object with Dec, chained: a missing (or null) member leaves its field
// at its default.
struct Members {
  JsonFields& o;
  template <typename T>
  Members& Get(const char* key, T& out) {
    if (const json* v = o.Get(key)) Dec(o, *v, JsonPath(o.path(), key), out);
    return *this;
  }
};

void Dec(JsonFields& f, const json& j, const JsonPath& at, std::string& out) { f.StringValue(j, at, out); }
void Dec(JsonFields& f, const json& j, const JsonPath& at, int64_t& out) { f.Int64Value(j, at, out); }
void Dec(JsonFields& f, const json& j, const JsonPath& at, int& out) { f.IntValue(j, at, out); }
void Dec(JsonFields& f, const json& j, const JsonPath& at, bool& out) { f.BoolValue(j, at, out); }

void Dec(JsonFields& f, const json& j, const JsonPath& at, GpuMode& out) {
  std::string s;
  if (!f.StringValue(j, at, s)) return;
  if (s == "IDLE") {
    out = GpuMode::kIdle;
  } else if (s == "NVIDIA_MPS") {
    out = GpuMode::kMps;
  } else if (s == "DEDICATED") {
    out = GpuMode::kDedicated;
  } else {
    f.Fail(at.str(), "unknown GPU mode '" + s + "'");
  }
}

// DecStatus reads a status stored as its ECS name; any other string is an error naming the field and the string.
template <typename E>
void DecStatus(JsonFields& f, const json& j, const JsonPath& at, std::optional<E> (*parse)(std::string_view),
               const char* what, E& out) {
  std::string s;
  if (!f.StringValue(j, at, s)) return;
  const std::optional<E> v = parse(s);
  if (!v) return f.Fail(at.str(), std::string("unknown ") + what + " '" + s + "'");
  out = *v;
}

void Dec(JsonFields& f, const json& j, const JsonPath& at, TaskStatus& out) {
  DecStatus(f, j, at, ParseTaskStatus, "task status", out);
}
void Dec(JsonFields& f, const json& j, const JsonPath& at, InstanceStatus& out) {
  DecStatus(f, j, at, ParseInstanceStatus, "container instance status", out);
}
void Dec(JsonFields& f, const json& j, const JsonPath& at, LifecycleStatus& out) {
  DecStatus(f, j, at, ParseLifecycleStatus, "status", out);
}
void Dec(JsonFields& f, const json& j, const JsonPath& at, ServiceStatus& out) {
  DecStatus(f, j, at, ParseServiceStatus, "service status", out);
}
void Dec(JsonFields& f, const json& j, const JsonPath& at, RolloutState& out) {
  DecStatus(f, j, at, ParseRolloutState, "rollout state", out);
}

template <typename T>
void Dec(JsonFields& f, const json& j, const JsonPath& at, std::vector<T>& out) {
  if (!f.ArrayValue(j, at)) return;
  out.clear();
  out.reserve(j.size());
  for (size_t i = 0; i < j.size() && f.ok(); ++i) {
    T e{};
    Dec(f, j[i], JsonPath(at, i), e);
    out.push_back(std::move(e));
  }
}

template <typename T>
void Dec(JsonFields& f, const json& j, const JsonPath& at, std::optional<T>& out) {
  T v{};
  Dec(f, j, at, v);
  if (f.ok()) out = std::move(v);
}

// A stored object: its members into `out`, the first problem into `f`.
template <typename T>
  requires requires(JsonFields& o, T& v) { Read(o, v); }
void Dec(JsonFields& f, const json& j, const JsonPath& at, T& out) {
  JsonFields o(j, at, kWords);
  Read(o, out);
  f.Take(o.status());
}

void Read(JsonFields& o, MpsSharing& out) {
  Members{o}.Get("memory_mib", out.memory_mib).Get("max_compute_percent", out.max_compute_percent);
}

void Read(JsonFields& o, ResourceRequirement& out) {
  Members{o}
      .Get("type", out.type)
      .Get("value", out.value)
      .Get("mps", out.mps)
      .Get("has_sharing_strategy", out.has_sharing_strategy);
}

void Read(JsonFields& o, KeyValuePair& out) {
  Members{o}.Get("name", out.name).Get("value", out.value);
}

void Read(JsonFields& o, ContainerDefinition& out) {
  Members{o}
      .Get("name", out.name)
      .Get("image", out.image)
      .Get("command", out.command)
      .Get("entry_point", out.entry_point)
      .Get("environment", out.environment)
      .Get("cpu", out.cpu)
      .Get("memory", out.memory)
      .Get("memory_reservation", out.memory_reservation)
      .Get("essential", out.essential)
      .Get("resource_requirements", out.resource_requirements)
      .Get("extra_json", out.extra_json);
}

void Read(JsonFields& o, PlacementConstraint& out) {
  Members{o}.Get("type", out.type).Get("expression", out.expression);
}

void Read(JsonFields& o, TaskDefinition& out) {
  Members{o}
      .Get("family", out.family)
      .Get("revision", out.revision)
      .Get("arn", out.arn)
      .Get("status", out.status)
      .Get("containers", out.containers)
      .Get("cpu", out.cpu)
      .Get("memory", out.memory)
      .Get("network_mode", out.network_mode)
      .Get("requires_compatibilities", out.requires_compatibilities)
      .Get("placement_constraints", out.placement_constraints)
      .Get("tags", out.tags)
      .Get("registered_at", out.registered_at)
      .Get("deregistered_at", out.deregistered_at)
      .Get("extra_json", out.extra_json);
}

void Read(JsonFields& o, ClusterSettings& out) {
  Members{o}.Get("compute_aware_placement", out.compute_aware_placement);
}

void Read(JsonFields& o, Cluster& out) {
  Members{o}
      .Get("name", out.name)
      .Get("arn", out.arn)
      .Get("status", out.status)
      .Get("settings", out.settings)
      .Get("tags", out.tags)
      .Get("created_at", out.created_at);
}

void Read(JsonFields& o, Gpu& out) {
  Members{o}
      .Get("id", out.id)
      .Get("total_memory_mib", out.total_memory_mib)
      .Get("remaining_memory_mib", out.remaining_memory_mib)
      .Get("mode", out.mode)
      .Get("container_count", out.container_count)
      .Get("compute_used_percent", out.compute_used_percent)
      .Get("held", out.held);
}

void Read(JsonFields& o, Resources& out) {
  Members{o}.Get("cpu", out.cpu).Get("memory", out.memory);
}

void Read(JsonFields& o, Attribute& out) {
  Members{o}.Get("name", out.name).Get("value", out.value);
}

void Read(JsonFields& o, ContainerInstance& out) {
  Members{o}
      .Get("arn", out.arn)
      .Get("id", out.id)
      .Get("cluster", out.cluster)
      .Get("ec2_instance_id", out.ec2_instance_id)
      .Get("instance_type", out.instance_type)
      .Get("status", out.status)
      .Get("status_reason", out.status_reason)
      .Get("agent_connected", out.agent_connected)
      .Get("impaired", out.impaired)
      .Get("agent_version", out.agent_version)
      .Get("registered", out.registered)
      .Get("remaining", out.remaining)
      .Get("gpus", out.gpus)
      .Get("attributes", out.attributes)
      .Get("running_tasks_count", out.running_tasks_count)
      .Get("pending_tasks_count", out.pending_tasks_count)
      .Get("registered_at", out.registered_at)
      .Get("registered_by", out.registered_by)
      .Get("version", out.version);
}

void Read(JsonFields& o, ContainerOverride& out) {
  Members{o}
      .Get("name", out.name)
      .Get("command", out.command)
      .Get("environment", out.environment)
      .Get("cpu", out.cpu)
      .Get("memory", out.memory)
      .Get("memory_reservation", out.memory_reservation)
      .Get("resource_requirements", out.resource_requirements);
}

void Read(JsonFields& o, TaskOverride& out) {
  Members{o}
      .Get("container_overrides", out.container_overrides)
      .Get("cpu", out.cpu)
      .Get("memory", out.memory);
}

void Read(JsonFields& o, Container& out) {
  Members{o}
      .Get("name", out.name)
      .Get("container_arn", out.container_arn)
      .Get("image", out.image)
      .Get("last_status", out.last_status)
      .Get("exit_code", out.exit_code)
      .Get("reason", out.reason)
      .Get("essential", out.essential)
      .Get("gpu_ids", out.gpu_ids)
      .Get("mps", out.mps);
}

void Read(JsonFields& o, GpuReservation& out) {
  Members{o}
      .Get("gpu_id", out.gpu_id)
      .Get("memory_mib", out.memory_mib)
      .Get("compute_percent", out.compute_percent)
      .Get("containers", out.containers)
      .Get("dedicated", out.dedicated);
}

void Read(JsonFields& o, Task& out) {
  Members{o}
      .Get("arn", out.arn)
      .Get("id", out.id)
      .Get("cluster", out.cluster)
      .Get("task_definition_arn", out.task_definition_arn)
      .Get("container_instance_arn", out.container_instance_arn)
      .Get("group", out.group)
      .Get("started_by", out.started_by)
      .Get("launch_type", out.launch_type)
      .Get("last_status", out.last_status)
      .Get("desired_status", out.desired_status)
      .Get("stop_code", out.stop_code)
      .Get("stopped_reason", out.stopped_reason)
      .Get("created_at", out.created_at)
      .Get("started_at", out.started_at)
      .Get("stopping_at", out.stopping_at)
      .Get("stopped_at", out.stopped_at)
      .Get("containers", out.containers)
      .Get("overrides", out.overrides)
      .Get("tags", out.tags)
      .Get("reserved", out.reserved)
      .Get("gpu_reservations", out.gpu_reservations)
      .Get("resources_released", out.resources_released)
      .Get("client_token", out.client_token)
      .Get("version", out.version);
}

void Read(JsonFields& o, ClientTokenRecord& out) {
  Members{o}
      .Get("cluster", out.cluster)
      .Get("token", out.token)
      .Get("request_fingerprint", out.request_fingerprint)
      .Get("task_arns", out.task_arns)
      .Get("created_at", out.created_at);
}

void Read(JsonFields& o, PlacementStrategy& out) { Members{o}.Get("type", out.type).Get("field", out.field); }

void Read(JsonFields& o, DeploymentConfiguration& out) {
  Members{o}
      .Get("minimum_healthy_percent", out.minimum_healthy_percent)
      .Get("maximum_percent", out.maximum_percent)
      .Get("circuit_breaker", out.circuit_breaker)
      .Get("rollback", out.rollback);
}

void Read(JsonFields& o, ServiceDeployment& out) {
  Members{o}
      .Get("id", out.id)
      .Get("primary", out.primary)
      .Get("task_definition_arn", out.task_definition_arn)
      .Get("desired_count", out.desired_count)
      .Get("pending_count", out.pending_count)
      .Get("running_count", out.running_count)
      .Get("failed_tasks", out.failed_tasks)
      .Get("rollout_state", out.rollout_state)
      .Get("rollout_state_reason", out.rollout_state_reason)
      .Get("created_at", out.created_at)
      .Get("updated_at", out.updated_at);
}

void Read(JsonFields& o, ServiceEvent& out) {
  Members{o}.Get("id", out.id).Get("created_at", out.created_at).Get("message", out.message);
}

void Read(JsonFields& o, Service& out) {
  Members{o}
      .Get("arn", out.arn)
      .Get("name", out.name)
      .Get("cluster", out.cluster)
      .Get("status", out.status)
      .Get("task_definition_arn", out.task_definition_arn)
      .Get("stable_task_definition_arn", out.stable_task_definition_arn)
      .Get("desired_count", out.desired_count)
      .Get("daemon", out.daemon)
      .Get("placement_constraints", out.placement_constraints)
      .Get("placement_strategy", out.placement_strategy)
      .Get("deployment_configuration", out.deployment_configuration)
      .Get("deployments", out.deployments)
      .Get("events", out.events)
      .Get("tags", out.tags)
      .Get("client_token", out.client_token)
      .Get("running_count", out.running_count)
      .Get("pending_count", out.pending_count)
      .Get("steady", out.steady)
      .Get("starved", out.starved)
      .Get("failure_streak", out.failure_streak)
      .Get("last_failure_at", out.last_failure_at)
      .Get("next_launch_at", out.next_launch_at)
      .Get("created_at", out.created_at)
      .Get("updated_at", out.updated_at)
      .Get("version", out.version);
}

template <typename T>
std::string Dump(const T& v) {
  // replace: a string that is not valid UTF-8 must not make a whole group commit fail.
  return Enc(v).dump(-1, ' ', false, json::error_handler_t::replace);
}

template <typename T>
Status Parse(std::string_view doc, T* out) {
  json j;
  try {
    j = json::parse(doc.begin(), doc.end());
  } catch (const json::exception& e) {
    return Status::Server(std::string("doc is not valid JSON: ") + e.what());
  }
  T v{};
  JsonFields root(j, JsonPath(), kWords);
  Read(root, v);
  if (!root.ok()) return root.status();
  *out = std::move(v);
  return Status::Ok();
}

}  // namespace

std::string ToDoc(const Cluster& v) { return Dump(v); }
std::string ToDoc(const TaskDefinition& v) { return Dump(v); }
std::string ToDoc(const ContainerInstance& v) { return Dump(v); }
std::string ToDoc(const Task& v) { return Dump(v); }
std::string ToDoc(const ClientTokenRecord& v) { return Dump(v); }
std::string ToDoc(const Service& v) { return Dump(v); }

Status FromDoc(std::string_view doc, Cluster* out) { return Parse(doc, out); }
Status FromDoc(std::string_view doc, TaskDefinition* out) { return Parse(doc, out); }
Status FromDoc(std::string_view doc, ContainerInstance* out) { return Parse(doc, out); }
Status FromDoc(std::string_view doc, Task* out) { return Parse(doc, out); }
Status FromDoc(std::string_view doc, ClientTokenRecord* out) { return Parse(doc, out); }
Status FromDoc(std::string_view doc, Service* out) { return Parse(doc, out); }

}  // namespace gpupack::storage_internal
