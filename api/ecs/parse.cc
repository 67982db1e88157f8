#include "api/ecs/parse.h"

#include <algorithm>
#include <set>

#include "api/ecs/codec.h"
#include "api/ecs/ecs_dialect.h"
#include "api/ecs/parse_fields.h"
#include "base/json_fields.h"
#include "protocol/field_limits.h"

namespace gpupack::api {

namespace {

constexpr int kMaxRunCount = 10;

// ECS's limits on what a caller sends (docs/security.md, "Limits on input"): with them every answer has a
// bounded size (docs/reliability.md gives the largest).
constexpr size_t kMaxOverridesChars = 8192;  // the overrides' JSON, formatting included, as ECS counts it
constexpr size_t kMaxStartedBy = 128;
constexpr size_t kMaxGroup = 255;
constexpr size_t kMaxStopReason = 255;
// What agents report (reasons, stop codes) is cut to these lengths, never refused: a report must not be lost
// for a long error text.
constexpr size_t kMaxReportReason = 255;
constexpr size_t kMaxStopCode = 64;

// Utf16Length counts a UTF-8 text the way ECS (Java) counts characters: UTF-16 code units.
size_t Utf16Length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    n += c >= 0xF0 ? 2 : 1;            // 4-byte sequences are surrogate pairs
  }
  return n;
}

// CutUtf8 shortens `s` to at most `max` bytes without splitting a character.
void CutUtf8(std::string& s, size_t max) {
  if (s.size() <= max) return;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
}

void CutUtf8(std::optional<std::string>& s, size_t max) {
  if (s) CutUtf8(*s, max);
}


// ParseClusterSettings: the cluster settings gpupack understands (containerInsights is accepted and ignored);
// what a request leaves out stays nullopt.
template <typename Req>
Status ParseClusterSettings(const Json& settings, Req& r) {
  GP_ASSIGN(attrs, ParseAttributes(settings, "settings"));
  for (const auto& a : attrs) {
    if (a.name == "gpupack.computeAwarePlacement") {
      if (a.value != "enabled" && a.value != "disabled")
        return Status::InvalidParameter("setting gpupack.computeAwarePlacement must be 'enabled' or 'disabled'");
      r.compute_aware = a.value == "enabled";
    } else if (a.name == "gpupack.instanceAcceptance") {
      if (a.value != "automatic" && a.value != "manual")
        return Status::InvalidParameter("setting gpupack.instanceAcceptance must be 'automatic' or 'manual'");
      r.manual_instance_acceptance = a.value == "manual";
    } else if (a.name != "containerInsights") {
      return Status::InvalidParameter("unknown cluster setting '" + a.name + "'");
    }
  }
  return Status::Ok();
}

// ParseOverrides: the overrides' JSON (compact, as sent) is at most 8,192 characters, ECS's limit and message.
Result<TaskOverride> ParseOverrides(const Json& in) {
  if (!in.contains("overrides")) return TaskOverride{};
  const Json& overrides = in["overrides"];
  if (!overrides.is_null() &&
      Utf16Length(overrides.dump(-1, ' ', false, Json::error_handler_t::replace)) > kMaxOverridesChars)
    return Status::InvalidParameter("Container Overrides length must be at most " + std::to_string(kMaxOverridesChars));
  return ParseTaskOverride(overrides, "overrides");
}

Status ParsePlaceTasks(const Json& in, PlaceTasksRequest& r, bool start_task) {
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  GP_TRY(RequireString(f, "taskDefinition", r.task_definition));
  const auto count = f.Int32("count");
  GP_TRY(f.status());
  r.count = count.value_or(1);
  if (!start_task && (r.count < 1 || r.count > kMaxRunCount))
    return Status::InvalidParameter("count must be between 1 and 10");
  const auto launch_type = f.Text("launchType");
  GP_TRY(f.status());
  if (launch_type && *launch_type != "EC2")
    return Status::InvalidParameter("launchType " + *launch_type + " is not supported; gpupack places EC2-style tasks");
  r.launch_type_given = launch_type.has_value();
  if (!start_task) {
    GP_ASSIGN(strategy, ParseCapacityProviderStrategy(in, "capacityProviderStrategy"));
    r.capacity_provider_strategy = std::move(strategy);
  }
  f.String("group", r.group);
  GP_TRY(f.status());
  GP_TRY(CheckText(r.group, "group", kMaxGroup));
  if (r.group && r.group->rfind("service:", 0) == 0)
    return Status::InvalidParameter("group: the prefix 'service:' is kept for the tasks of services (CreateService)");
  f.String("startedBy", r.started_by);
  GP_TRY(f.status());
  GP_TRY(CheckText(r.started_by, "startedBy", kMaxStartedBy));
  f.String("clientToken", r.client_token);
  GP_TRY(f.status());
  if (r.client_token && r.client_token->size() > 64)
    return Status::InvalidParameter("clientToken is at most 64 characters");
  GP_ASSIGN(tags, ParseTags(in));
  GP_TRY(CheckTags(tags));
  r.tags = std::move(tags);
  GP_ASSIGN(overrides, ParseOverrides(in));
  r.overrides = std::move(overrides);
  GP_ASSIGN(constraints, ParsePlacementConstraints(in, "placementConstraints"));
  r.constraints = std::move(constraints);
  GP_ASSIGN(strategies, ParsePlacementStrategies(in, "placementStrategy"));
  r.strategies = std::move(strategies);
  if (start_task) {
    r.container_instances = f.StringList("containerInstances");
    GP_TRY(f.status());
  }
  r.fingerprint = in.dump();
  return Status::Ok();
}

// ParseContainerReport: one entry of SubmitTaskStateChange's containers; its status is checked after the types
// of all its fields.
Result<ContainerStateReport> ParseContainerReport(const Json& c, const char* name_key) {
  ContainerStateReport r;
  Fields f(c);
  f.String(name_key, r.name);
  const auto status = f.Text("status");
  f.Int32("exitCode", r.exit_code);
  f.String("reason", r.reason);
  GP_TRY(f.status());
  if (status) {
    r.status = ParseTaskStatus(*status);
    if (r.status == TaskStatus::kProvisioning) r.status.reset();  // only the server puts a task in line
    if (!r.status) return Status::InvalidParameter("containers[].status must be PENDING, RUNNING or STOPPED");
  }
  CutUtf8(r.reason, kMaxReportReason);
  return r;
}

Result<std::vector<AttributeTarget>> ParseAttributeTargets(const Json& list, bool put) {
  std::vector<AttributeTarget> out;
  for (size_t i = 0; i < list.size(); ++i) {
    GP_ASSIGN(one, ParseAttributes(Json::array({list[i]}), "attributes"));
    Fields f(list[i]);
    const auto target_type = f.Text("targetType");
    const auto target_id = f.Text("targetId");
    GP_TRY(f.status());
    if (put && target_type && *target_type != "container-instance")
      return Status::InvalidParameter("attributes[" + std::to_string(i) + "].targetType must be container-instance");
    if (!target_id)
      return Status::InvalidParameter(put ? "attributes[" + std::to_string(i) + "].targetId is required"
                                          : std::string("attributes[].targetId is required"));
    const Attribute& a = one[0];
    if (put) {
      if (a.name.size() > 128) return Status::InvalidParameter("attribute names are at most 128 characters");
      if (a.value && a.value->size() > 128) return Status::InvalidParameter("attribute values are at most 128 characters");
      if (a.name.rfind("ecs.", 0) == 0) return Status::InvalidParameter("attributes starting with 'ecs.' are reserved");
    }
    out.push_back({a, *target_id});
  }
  return out;
}

}  // namespace

// ---- clusters

Result<CreateClusterRequest> ParseCreateCluster(const Json& in) {
  CreateClusterRequest r;
  Fields f(in);
  const auto name = f.Text("clusterName");
  GP_TRY(f.status());
  r.cluster_name = name.value_or("default");
  GP_ASSIGN(tags, ParseTags(in));
  GP_TRY(CheckTags(tags));
  r.tags = std::move(tags);
  if (in.contains("settings") && !in["settings"].is_null()) GP_TRY(ParseClusterSettings(in["settings"], r));
  return r;
}

Result<DeleteClusterRequest> ParseDeleteCluster(const Json& in) {
  DeleteClusterRequest r;
  Fields f(in);
  GP_TRY(RequireString(f, "cluster", r.cluster));
  return r;
}

Result<UpdateClusterSettingsRequest> ParseUpdateClusterSettings(const Json& in) {
  UpdateClusterSettingsRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  if (!in.contains("settings")) return Status::InvalidParameter("settings is required");
  GP_TRY(ParseClusterSettings(in["settings"], r));
  return r;
}

Result<DescribeClustersRequest> ParseDescribeClusters(const Json& in) {
  DescribeClustersRequest r;
  Fields f(in);
  std::vector<std::string> refs = f.StringList("clusters");
  GP_TRY(f.status());
  if (refs.size() > kMaxDescribe) return Status::InvalidParameter("clusters can have at most 100 entries");
  if (refs.empty()) refs.push_back("default");
  r.clusters = std::move(refs);
  const std::vector<std::string> include = f.StringList("include");
  GP_TRY(f.status());
  for (const auto& v : include) {
    if (v == "STATISTICS") r.statistics = true;
    else if (v != "ATTACHMENTS" && v != "CONFIGURATIONS" && v != "SETTINGS" && v != "TAGS")
      return Status::InvalidParameter("include: " + v.substr(0, 100) +
                                      " is not one of ATTACHMENTS, CONFIGURATIONS, SETTINGS, STATISTICS, TAGS");
  }
  return r;
}

Result<ListClustersRequest> ParseListClusters(const Json& in) {
  ListClustersRequest r;
  Fields f(in);
  GP_ASSIGN(page, ParsePage(f));
  r.page = page;
  return r;
}

// ---- task definitions

Result<RegisterTaskDefinitionRequest> ParseRegisterTaskDefinitionRequest(const Json& in) {
  GP_ASSIGN(td, ParseRegisterTaskDefinition(in));
  GP_TRY(CheckTags(td.tags, /*control_ok=*/true));
  return RegisterTaskDefinitionRequest{std::move(td)};
}

Result<DeregisterTaskDefinitionRequest> ParseDeregisterTaskDefinition(const Json& in) {
  DeregisterTaskDefinitionRequest r;
  Fields f(in);
  GP_TRY(RequireString(f, "taskDefinition", r.task_definition));
  return r;
}

Result<DescribeTaskDefinitionRequest> ParseDescribeTaskDefinition(const Json& in) {
  DescribeTaskDefinitionRequest r;
  Fields f(in);
  GP_TRY(RequireString(f, "taskDefinition", r.task_definition));
  return r;
}

Result<ListTaskDefinitionsRequest> ParseListTaskDefinitions(const Json& in) {
  ListTaskDefinitionsRequest r;
  Fields f(in);
  f.String("familyPrefix", r.family_prefix);
  const auto status = f.Text("status");
  const auto sort = f.Text("sort");
  GP_TRY(f.status());
  if (status && *status == "DELETE_IN_PROGRESS") {
    r.status = std::nullopt;  // ECS's; accepted, and no revision here is ever in it
  } else if (status) {
    r.status = ParseLifecycleStatus(*status);
    if (!r.status) return Status::InvalidParameter("status must be ACTIVE or INACTIVE");
  }
  if (sort && *sort != "ASC" && *sort != "DESC") return Status::InvalidParameter("sort must be ASC or DESC");
  r.descending = sort && *sort == "DESC";
  GP_ASSIGN(page, ParsePage(f));
  r.page = page;
  return r;
}

Result<ListTaskDefinitionFamiliesRequest> ParseListTaskDefinitionFamilies(const Json& in) {
  ListTaskDefinitionFamiliesRequest r;
  Fields f(in);
  f.String("familyPrefix", r.family_prefix);
  const auto status = f.Text("status");
  GP_TRY(f.status());
  if (status && *status == "ALL") {
    r.status = std::nullopt;
  } else if (status) {
    r.status = ParseLifecycleStatus(*status);
    if (!r.status) return Status::InvalidParameter("status must be ACTIVE, INACTIVE or ALL");
  }
  GP_ASSIGN(page, ParsePage(f));
  r.page = page;
  return r;
}

// ---- tasks

Result<RunTaskRequest> ParseRunTask(const Json& in) {
  RunTaskRequest r;
  GP_TRY(ParsePlaceTasks(in, r, false));
  return r;
}

Result<StartTaskRequest> ParseStartTask(const Json& in) {
  StartTaskRequest r;
  GP_TRY(ParsePlaceTasks(in, r, true));
  return r;
}

Result<StopTaskRequest> ParseStopTask(const Json& in) {
  StopTaskRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  GP_TRY(RequireString(f, "task", r.task));
  f.String("reason", r.reason);
  GP_TRY(f.status());
  if (r.reason && r.reason->size() > kMaxStopReason)
    return Status::InvalidParameter("reason can be at most 255 characters long, got " +
                                    std::to_string(r.reason->size()) + ".");
  return r;
}

Result<DescribeTasksRequest> ParseDescribeTasks(const Json& in) {
  DescribeTasksRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  GP_TRY(RequireRefs(f, "tasks", "task", r.tasks));
  return r;
}

Result<ListTasksRequest> ParseListTasks(const Json& in) {
  ListTasksRequest r;
  // Filters gpupack cannot apply are refused, never ignored (an ignored filter would answer every task).
  Fields f(in);
  f.String("serviceName", r.service_name);
  GP_TRY(f.status());
  const auto launch_type = f.Text("launchType");
  GP_TRY(f.status());
  if (launch_type && *launch_type != "EC2")
    return Status::Unsupported("ListTasks: launchType " + launch_type->substr(0, 100) +
                               " is not supported: every gpupack task runs on a container instance (EC2)");
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  f.String("containerInstance", r.container_instance);
  f.String("family", r.family);
  f.String("startedBy", r.started_by);
  const auto desired = f.Text("desiredStatus");
  GP_TRY(f.status());
  if (desired) {
    const std::optional<TaskStatus> parsed = ParseTaskStatus(*desired);
    if (!parsed || *parsed == TaskStatus::kProvisioning)
      return Status::InvalidParameter("desiredStatus must be RUNNING, PENDING or STOPPED");
    r.desired_status = *parsed;
  }
  GP_ASSIGN(page, ParsePage(f));
  r.page = page;
  return r;
}

Result<ExplainPlacementRequest> ParseExplainPlacement(const Json& in) {
  ExplainPlacementRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  GP_TRY(RequireString(f, "taskDefinition", r.task_definition));
  GP_ASSIGN(overrides, ParseOverrides(in));
  r.overrides = std::move(overrides);
  GP_ASSIGN(constraints, ParsePlacementConstraints(in, "placementConstraints"));
  r.constraints = std::move(constraints);
  GP_ASSIGN(strategies, ParsePlacementStrategies(in, "placementStrategy"));
  r.strategies = std::move(strategies);
  f.String("group", r.group);
  GP_TRY(f.status());
  GP_TRY(CheckText(r.group, "group", kMaxGroup));
  const auto seed = f.Int32("seed");
  GP_TRY(f.status());
  r.seed = static_cast<uint64_t>(seed.value_or(0));
  return r;
}

Result<SubmitTaskStateChangeRequest> ParseSubmitTaskStateChange(const Json& in) {
  SubmitTaskStateChangeRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  GP_TRY(RequireString(f, "task", r.task));
  std::string status;
  GP_TRY(RequireString(f, "status", status));
  const std::optional<TaskStatus> parsed = ParseTaskStatus(status);
  if (!parsed || *parsed == TaskStatus::kProvisioning)  // only the server puts a task in line
    return Status::InvalidParameter("status must be PENDING, RUNNING or STOPPED");
  r.report.status = *parsed;
  f.String("reason", r.report.reason);
  f.String("stopCode", r.report.stop_code);  // ours: the agent names why a task stopped
  GP_TRY(f.status());
  CutUtf8(r.report.reason, kMaxReportReason);
  CutUtf8(r.report.stop_code, kMaxStopCode);
  r.report.has_containers = in.contains("containers");
  if (in.contains("containers") && in["containers"].is_array()) {
    for (const auto& c : in["containers"]) {
      GP_ASSIGN(report, ParseContainerReport(c, "containerName"));
      r.report.containers.push_back(std::move(report));
    }
  }
  return r;
}

Result<SubmitContainerStateChangeRequest> ParseSubmitContainerStateChange(const Json& in) {
  SubmitContainerStateChangeRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  GP_TRY(RequireString(f, "task", r.task));
  GP_TRY(RequireString(f, "containerName", r.container_name));
  const auto status = f.Text("status");
  f.Int32("exitCode", r.exit_code);
  f.String("reason", r.reason);
  GP_TRY(f.status());
  if (status) {
    r.status = ParseTaskStatus(*status);
    if (r.status == TaskStatus::kProvisioning) r.status.reset();  // only the server puts a task in line
    if (!r.status) return Status::InvalidParameter("status must be PENDING, RUNNING or STOPPED");
  }
  CutUtf8(r.reason, kMaxReportReason);
  return r;
}

// ---- container instances

Result<RegisterContainerInstanceRequest> ParseRegisterContainerInstance(const Json& in) {
  RegisterContainerInstanceRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  const auto existing = f.Text("containerInstanceArn");
  GP_TRY(f.status());
  if (existing && !existing->empty()) r.container_instance_arn = existing;
  // totalResources: CPU and MEMORY are required.
  bool has_cpu = false, has_mem = false;
  if (in.contains("totalResources")) {
    const Json& tr = in["totalResources"];
    if (!tr.is_array()) return Status::InvalidParameter("totalResources: expected a list");
    for (const auto& res : tr) {
      Fields rf(res);
      const auto name = rf.Text("name");
      const auto iv = rf.Int32("integerValue");
      GP_TRY(rf.status());
      if (!name) return Status::InvalidParameter("totalResources[].name is required");
      if (*name == "CPU" || *name == "MEMORY") {
        if (!iv || *iv < 0) return Status::InvalidParameter("totalResources " + *name + " needs a non-negative integerValue");
        if (*name == "CPU") {
          r.total.cpu = *iv;
          has_cpu = true;
        } else {
          r.total.memory = *iv;
          has_mem = true;
        }
      }
    }
  }
  if (!has_cpu || !has_mem) return Status::InvalidParameter("totalResources must give CPU and MEMORY");
  // platformDevices: GPUs with gpuInfo.memoryInMiB.
  std::set<std::string> ids;
  if (in.contains("platformDevices") && !in["platformDevices"].is_null()) {
    const Json& pd = in["platformDevices"];
    if (!pd.is_array() || pd.size() > 64) return Status::InvalidParameter("platformDevices: expected a list of at most 64");
    for (size_t i = 0; i < pd.size(); ++i) {
      const Json& d = pd[i];
      const std::string at = "platformDevices[" + std::to_string(i) + "]";
      Fields df(d);
      const auto id = df.Text("id");
      const auto type = df.Text("type");
      GP_TRY(df.status());
      if (!id) return Status::InvalidParameter(at + ".id is required");
      GP_TRY(protocol::CheckField(*id, protocol::kGpuIdLimit, at + ".id"));
      if (type.value_or("") != "GPU") return Status::InvalidParameter(at + ".type must be GPU");
      if (!ids.insert(*id).second) return Status::InvalidParameter("platformDevices: GPU " + *id + " is listed twice");
      MiB mem = 0;
      if (d.contains("gpuInfo")) {
        Fields gf(d["gpuInfo"]);
        const auto m = gf.Int32("memoryInMiB");
        GP_TRY(gf.status());
        if (m) mem = *m;
      }
      if (mem <= 0) return Status::InvalidParameter(at + ".gpuInfo.memoryInMiB must be a positive integer");
      Gpu g;
      g.id = *id;
      g.total_memory_mib = g.remaining_memory_mib = mem;
      r.gpus.push_back(std::move(g));
    }
  }
  if (in.contains("attributes")) {
    GP_ASSIGN(attrs, ParseAttributes(in["attributes"], "attributes"));
    r.attributes = std::move(attrs);
  }
  if (in.contains("versionInfo") && in["versionInfo"].is_object()) {
    Fields vf(in["versionInfo"]);
    std::string agent_version;
    vf.String("agentVersion", agent_version);
    GP_TRY(vf.status());
    if (!agent_version.empty()) GP_TRY(protocol::CheckField(agent_version, protocol::kAgentVersionLimit));
    r.agent_version = agent_version;
  }
  const auto identity = f.Text("instanceIdentityDocument");
  GP_TRY(f.status());
  if (identity && !identity->empty()) {
    if (identity->size() > protocol::kMaxIdentityDocumentBytes)
      return Status::InvalidParameter("instanceIdentityDocument must be at most " +
                                      std::to_string(protocol::kMaxIdentityDocumentBytes) + " bytes, got " +
                                      std::to_string(identity->size()));
    Json d = Json::parse(*identity, nullptr, false);
    if (d.is_object() && d.contains("instanceId") && d["instanceId"].is_string()) r.ec2_instance_id = d["instanceId"];
    if (d.is_object() && d.contains("instanceType") && d["instanceType"].is_string()) r.instance_type = d["instanceType"];
    // Both land in labels and attributes (/metrics' Hostname, ecs.instance-type): bounded, no control characters.
    if (!r.ec2_instance_id.empty()) GP_TRY(protocol::CheckField(r.ec2_instance_id, protocol::kInstanceIdLimit));
    if (!r.instance_type.empty()) GP_TRY(protocol::CheckField(r.instance_type, protocol::kInstanceTypeLimit));
  }
  return r;
}

Result<DeregisterContainerInstanceRequest> ParseDeregisterContainerInstance(const Json& in) {
  DeregisterContainerInstanceRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  GP_TRY(RequireString(f, "containerInstance", r.container_instance));
  f.Bool("force", r.force);
  GP_TRY(f.status());
  return r;
}

Result<DescribeContainerInstancesRequest> ParseDescribeContainerInstances(const Json& in) {
  DescribeContainerInstancesRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  GP_TRY(RequireRefs(f, "containerInstances", "instance", r.container_instances));
  return r;
}

Result<ListContainerInstancesRequest> ParseListContainerInstances(const Json& in) {
  ListContainerInstancesRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  f.String("filter", r.filter);
  const auto status = f.Text("status");
  GP_TRY(f.status());
  if (status) {
    // ECS's other transitional statuses are accepted; no instance here is ever in them.
    const std::optional<InstanceStatus> parsed = ParseInstanceStatus(*status);
    if (parsed && *parsed != InstanceStatus::kInactive)
      r.status = parsed;
    else if (*status == "DEREGISTERING" || *status == "REGISTRATION_FAILED")
      r.status_matches_none = true;
    else
      return Status::InvalidParameter(
          "status must be ACTIVE, DRAINING, REGISTERING, DEREGISTERING or REGISTRATION_FAILED");
  }
  GP_ASSIGN(page, ParsePage(f));
  r.page = page;
  return r;
}

Result<UpdateContainerInstancesStateRequest> ParseUpdateContainerInstancesState(const Json& in) {
  UpdateContainerInstancesStateRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  std::vector<std::string> refs = f.StringList("containerInstances");
  std::string status;
  GP_TRY(RequireString(f, "status", status));
  const std::optional<InstanceStatus> parsed = ParseInstanceStatus(status);
  if (!parsed || (*parsed != InstanceStatus::kActive && *parsed != InstanceStatus::kDraining))
    return Status::InvalidParameter("status must be ACTIVE or DRAINING");
  r.status = *parsed;
  if (refs.empty() || refs.size() > 10) return Status::InvalidParameter("containerInstances must name 1 to 10 instances");
  r.container_instances = std::move(refs);
  return r;
}

// ---- attributes

Result<PutAttributesRequest> ParsePutAttributes(const Json& in) {
  PutAttributesRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  if (!in.contains("attributes")) return Status::InvalidParameter("attributes is required");
  const Json& list = in["attributes"];
  if (!list.is_array() || list.empty() || list.size() > 10)
    return Status::InvalidParameter("attributes must be a list of 1 to 10 attributes");
  GP_ASSIGN(targets, ParseAttributeTargets(list, true));
  r.attributes = std::move(targets);
  return r;
}

Result<DeleteAttributesRequest> ParseDeleteAttributes(const Json& in) {
  DeleteAttributesRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  if (!in.contains("attributes") || !in["attributes"].is_array() || in["attributes"].empty())
    return Status::InvalidParameter("attributes must be a non-empty list");
  GP_ASSIGN(targets, ParseAttributeTargets(in["attributes"], false));
  r.attributes = std::move(targets);
  return r;
}

Result<ListAttributesRequest> ParseListAttributes(const Json& in) {
  ListAttributesRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  std::string target_type;
  GP_TRY(RequireString(f, "targetType", target_type));
  if (target_type != "container-instance") return Status::InvalidParameter("targetType must be container-instance");
  f.String("attributeName", r.attribute_name);
  f.String("attributeValue", r.attribute_value);
  GP_TRY(f.status());
  if (r.attribute_value && !r.attribute_name) return Status::InvalidParameter("attributeValue needs attributeName");
  GP_ASSIGN(page, ParsePage(f));
  r.page = page;
  return r;
}

}  // namespace gpupack::api
