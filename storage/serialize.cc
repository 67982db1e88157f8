#include "storage/serialize.h"

#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/json_fields.h"
#include "storage/serialize_codec.h"

namespace gpupack::storage_internal {

// ---- encoding

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
  return ObjWriter()
      .Put("compute_aware_placement", v.compute_aware_placement)
      .Put("manual_instance_acceptance", v.manual_instance_acceptance)
      .Done();
}

json Enc(const Cluster& v) {
  return ObjWriter()
      .Put("name", v.name)
      .Put("arn", v.arn)
      .Put("status", v.status)
      .Put("settings", v.settings)
      .Put("tags", v.tags)
      .Put("created_at", v.created_at)
      .Put("capacity_providers", v.capacity_providers)
      .Put("default_strategy", v.default_strategy)
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
      .Put("capacity_provider_name", v.capacity_provider_name)
      .Put("wait_seq", v.wait_seq)
      .Put("priority", v.priority)
      .Put("placement_constraints", v.placement_constraints)
      .Put("placement_strategy", v.placement_strategy)
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

namespace {

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

}  // namespace

const JsonDialect& StoreDialect() { return kWords; }

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

void Dec(JsonFields& f, const json& j, const JsonPath& at, TaskStatus& out) {
  DecStatus(f, j, at, ParseTaskStatus, "task status", out);
}
void Dec(JsonFields& f, const json& j, const JsonPath& at, InstanceStatus& out) {
  DecStatus(f, j, at, ParseInstanceStatus, "container instance status", out);
}
void Dec(JsonFields& f, const json& j, const JsonPath& at, LifecycleStatus& out) {
  DecStatus(f, j, at, ParseLifecycleStatus, "status", out);
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
  Members{o}
      .Get("compute_aware_placement", out.compute_aware_placement)
      .Get("manual_instance_acceptance", out.manual_instance_acceptance);  // absent before it existed: automatic
}

void Read(JsonFields& o, Cluster& out) {
  Members{o}
      .Get("name", out.name)
      .Get("arn", out.arn)
      .Get("status", out.status)
      .Get("settings", out.settings)
      .Get("tags", out.tags)
      .Get("created_at", out.created_at)
      .Get("capacity_providers", out.capacity_providers)
      .Get("default_strategy", out.default_strategy);
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
      .Get("capacity_provider_name", out.capacity_provider_name)
      .Get("wait_seq", out.wait_seq)
      .Get("priority", out.priority)
      .Get("placement_constraints", out.placement_constraints)
      .Get("placement_strategy", out.placement_strategy)
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

std::string ToDoc(const Cluster& v) { return Dump(v); }
std::string ToDoc(const TaskDefinition& v) { return Dump(v); }
std::string ToDoc(const ContainerInstance& v) { return Dump(v); }
std::string ToDoc(const Task& v) { return Dump(v); }
std::string ToDoc(const ClientTokenRecord& v) { return Dump(v); }

Status FromDoc(std::string_view doc, Cluster* out) { return Parse(doc, out); }
Status FromDoc(std::string_view doc, TaskDefinition* out) { return Parse(doc, out); }
Status FromDoc(std::string_view doc, ContainerInstance* out) { return Parse(doc, out); }
Status FromDoc(std::string_view doc, Task* out) { return Parse(doc, out); }
Status FromDoc(std::string_view doc, ClientTokenRecord* out) { return Parse(doc, out); }

}  // namespace gpupack::storage_internal
