// The storage codec of services and capacity providers (storage/serialize_codec.h): Service and what it holds,
// CapacityProvider.
#include "storage/serialize.h"
#include "storage/serialize_codec.h"

namespace gpupack::storage_internal {

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
      .Put("capacity_provider_strategy", v.capacity_provider_strategy)
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

void Dec(JsonFields& f, const json& j, const JsonPath& at, ServiceStatus& out) {
  DecStatus(f, j, at, ParseServiceStatus, "service status", out);
}
void Dec(JsonFields& f, const json& j, const JsonPath& at, RolloutState& out) {
  DecStatus(f, j, at, ParseRolloutState, "rollout state", out);
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
      .Get("capacity_provider_strategy", out.capacity_provider_strategy)
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

std::string ToDoc(const Service& v) { return Dump(v); }
Status FromDoc(std::string_view doc, Service* out) { return Parse(doc, out); }

json Enc(CapacityProviderStatus v) { return Name(v); }
void Dec(JsonFields& f, const json& j, const JsonPath& at, CapacityProviderStatus& out) {
  DecStatus(f, j, at, ParseCapacityProviderStatus, "capacity provider status", out);
}

json Enc(const CapacityProviderStrategyItem& v) {
  return ObjWriter().Put("provider", v.provider).Put("weight", v.weight).Put("base", v.base).Done();
}
void Read(JsonFields& o, CapacityProviderStrategyItem& out) {
  Members{o}.Get("provider", out.provider).Get("weight", out.weight).Get("base", out.base);
}

json Enc(const CapacityProvider& v) {
  return ObjWriter()
      .Put("name", v.name)
      .Put("arn", v.arn)
      .Put("status", v.status)
      .Put("update_status", v.update_status)
      .Put("tags", v.tags)
      .Put("created_at", v.created_at)
      .Put("version", v.version)
      .Done();
}
void Read(JsonFields& o, CapacityProvider& out) {
  Members{o}
      .Get("name", out.name)
      .Get("arn", out.arn)
      .Get("status", out.status)
      .Get("update_status", out.update_status)
      .Get("tags", out.tags)
      .Get("created_at", out.created_at)
      .Get("version", out.version);
}

std::string ToDoc(const CapacityProvider& v) { return Dump(v); }
Status FromDoc(std::string_view doc, CapacityProvider* out) { return Parse(doc, out); }

}  // namespace gpupack::storage_internal
