// The parsers of the service operations (CreateService, UpdateService, DeleteService, DescribeServices,
// ListServices): ECS's members into the typed requests of engine/core/requests.h.
#include "api/ecs/codec.h"
#include "api/ecs/parse.h"
#include "api/ecs/parse_fields.h"

namespace gpupack::api {

namespace {

constexpr size_t kMaxDescribeServices = 10;

// RefuseUnsupported: ECS service members gpupack does not honour are refused by name, never ignored (a load
// balancer silently left out would be an outage nobody sees coming).
Status RefuseUnsupported(const Json& in, const char* operation) {
  static constexpr const char* kUnsupported[][2] = {
      {"loadBalancers", "load balancers"},
      {"serviceRegistries", "service discovery registries"},
      {"serviceConnectConfiguration", "ECS Service Connect"},
      {"capacityProviderStrategy", "capacity providers"},
      {"networkConfiguration", "awsvpc networking"},
      {"platformVersion", "Fargate platform versions"},
      {"healthCheckGracePeriodSeconds", "load balancer health checks"},
      {"volumeConfigurations", "managed volumes"},
      {"taskSets", "task sets"},
      {"vpcLatticeConfigurations", "VPC Lattice"},
  };
  const bool create = std::string_view(operation) == "CreateService";  // CreateService takes a strategy
  for (const auto& [key, what] : kUnsupported) {
    if (!in.contains(key) || (create && std::string_view(key) == "capacityProviderStrategy")) continue;
    const Json& v = in[key];
    if (v.is_null() || (v.is_array() && v.empty())) continue;
    if (std::string_view(key) == "capacityProviderStrategy")  // UpdateService
      return Status::Unsupported(std::string(operation) +
                                 ": capacityProviderStrategy is not supported: gpupack does not change a service's "
                                 "capacity provider strategy; create a service with the new strategy, scale it up, "
                                 "then delete the old one (docs/api.md, Capacity providers)");
    return Status::Unsupported(std::string(operation) + ": " + key + " is not supported: gpupack does not support " +
                               what + "; the supported fields are listed in docs/api.md (Services)");
  }
  if (in.contains("deploymentController") && in["deploymentController"].is_object()) {
    const Json& c = in["deploymentController"];
    if (c.contains("type") && c["type"] != "ECS")
      return Status::Unsupported(std::string(operation) +
                                 ": deploymentController type " + c["type"].dump().substr(0, 100) +
                                 " is not supported: gpupack runs rolling deployments (type ECS) only");
  }
  if (in.contains("launchType") && in["launchType"].is_string() && in["launchType"] != "EC2")
    return Status::InvalidParameter(std::string(operation) + ": launchType " +
                                    in["launchType"].get<std::string>().substr(0, 100) +
                                    " is not supported; gpupack places EC2-style tasks");
  return Status::Ok();
}

// ParseDeploymentConfiguration: the members given of deploymentConfiguration (ECS's Integer percents and the
// circuit breaker); alarms are refused by name.
Status ParseDeploymentConfiguration(Fields& f, DeploymentConfigurationChange& out) {
  const Json* v = f.Get("deploymentConfiguration");
  GP_TRY(f.status());
  if (!v || v->is_null()) return Status::Ok();
  Fields c(*v);
  if (!v->is_object()) return Status::InvalidParameter("deploymentConfiguration must be an object");
  if (v->contains("alarms") && !(*v)["alarms"].is_null())
    return Status::Unsupported("deploymentConfiguration.alarms is not supported: gpupack has no CloudWatch alarms");
  std::optional<int64_t> min, max;
  c.Int32("minimumHealthyPercent", min);
  c.Int32("maximumPercent", max);
  GP_TRY(c.status());
  if (min) out.minimum_healthy_percent = static_cast<int>(*min);
  if (max) out.maximum_percent = static_cast<int>(*max);
  if (const Json* cb = c.Get("deploymentCircuitBreaker"); cb && !cb->is_null()) {
    if (!cb->is_object()) return Status::InvalidParameter("deploymentCircuitBreaker must be an object");
    Fields b(*cb);
    bool enable = false, rollback = false;
    b.Bool("enable", enable, /*required=*/true);
    b.Bool("rollback", rollback, /*required=*/true);
    GP_TRY(b.status());
    out.circuit_breaker = enable;
    out.rollback = rollback;
  }
  return c.status();
}

Status CheckClientToken(const std::optional<std::string>& token) {
  if (token && token->size() > 64) return Status::InvalidParameter("clientToken is at most 64 characters");
  return CheckText(token, "clientToken", 64);
}

}  // namespace

Result<CreateServiceRequest> ParseCreateService(const Json& in) {
  CreateServiceRequest r;
  GP_TRY(RefuseUnsupported(in, "CreateService"));
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  GP_TRY(RequireString(f, "serviceName", r.service_name));
  GP_TRY(RequireString(f, "taskDefinition", r.task_definition));
  std::optional<int64_t> desired;
  f.Int32("desiredCount", desired);
  const auto strategy = f.Text("schedulingStrategy");
  f.String("clientToken", r.client_token);
  GP_TRY(f.status());
  GP_TRY(CheckClientToken(r.client_token));
  if (desired) r.desired_count = static_cast<int>(*desired);
  if (strategy && *strategy != "REPLICA" && *strategy != "DAEMON")
    return Status::InvalidParameter("schedulingStrategy must be REPLICA or DAEMON");
  r.daemon = strategy && *strategy == "DAEMON";
  GP_TRY(ParseDeploymentConfiguration(f, r.deployment_configuration));
  GP_ASSIGN(constraints, ParsePlacementConstraints(in, "placementConstraints"));
  r.constraints = std::move(constraints);
  GP_ASSIGN(strategies, ParsePlacementStrategies(in, "placementStrategy"));
  r.strategies = std::move(strategies);
  GP_ASSIGN(tags, ParseTags(in));
  GP_TRY(CheckTags(tags));
  r.tags = std::move(tags);
  GP_ASSIGN(cps, ParseCapacityProviderStrategy(in, "capacityProviderStrategy"));
  r.capacity_provider_strategy = std::move(cps);
  r.launch_type_given = in.contains("launchType") && !in["launchType"].is_null();
  return r;
}

Result<UpdateServiceRequest> ParseUpdateService(const Json& in) {
  UpdateServiceRequest r;
  GP_TRY(RefuseUnsupported(in, "UpdateService"));
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  GP_TRY(RequireString(f, "service", r.service));
  std::optional<int64_t> desired;
  f.Int32("desiredCount", desired);
  f.String("taskDefinition", r.task_definition);
  f.Bool("forceNewDeployment", r.force_new_deployment);
  GP_TRY(f.status());
  if (desired) r.desired_count = static_cast<int>(*desired);
  GP_TRY(ParseDeploymentConfiguration(f, r.deployment_configuration));
  if (in.contains("placementConstraints") && !in["placementConstraints"].is_null()) {
    GP_ASSIGN(constraints, ParsePlacementConstraints(in, "placementConstraints"));
    r.constraints = std::move(constraints);
  }
  if (in.contains("placementStrategy") && !in["placementStrategy"].is_null()) {
    GP_ASSIGN(strategies, ParsePlacementStrategies(in, "placementStrategy"));
    r.strategies = std::move(strategies);
  }
  return r;
}

Result<DeleteServiceRequest> ParseDeleteService(const Json& in) {
  DeleteServiceRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  GP_TRY(RequireString(f, "service", r.service));
  f.Bool("force", r.force);
  GP_TRY(f.status());
  return r;
}

Result<DescribeServicesRequest> ParseDescribeServices(const Json& in) {
  DescribeServicesRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  GP_TRY(f.status());
  if (!in.contains("services")) return Status::InvalidParameter("services is required");
  r.services = f.StringList("services");
  GP_TRY(f.status());
  if (r.services.empty()) return Status::InvalidParameter("services must name at least one service");
  if (r.services.size() > kMaxDescribeServices)
    return Status::InvalidParameter("services can have at most 10 entries");
  const std::vector<std::string> include = f.StringList("include");
  GP_TRY(f.status());
  for (const auto& v : include) {
    if (v != "TAGS") return Status::InvalidParameter("include: " + v.substr(0, 100) + " is not TAGS");
    r.tags = true;
  }
  return r;
}

Result<ListServicesRequest> ParseListServices(const Json& in) {
  ListServicesRequest r;
  Fields f(in);
  GP_TRY(OptionalRef(f, "cluster", r.cluster));
  const auto strategy = f.Text("schedulingStrategy");
  const auto launch_type = f.Text("launchType");
  GP_TRY(f.status());
  if (strategy) {
    if (*strategy != "REPLICA" && *strategy != "DAEMON")
      return Status::InvalidParameter("schedulingStrategy must be REPLICA or DAEMON");
    r.daemon = *strategy == "DAEMON";
  }
  if (launch_type && *launch_type != "EC2")
    return Status::Unsupported("ListServices: launchType " + launch_type->substr(0, 100) +
                               " is not supported: every gpupack service runs on container instances (EC2)");
  const bool has_max = in.contains("maxResults") && !in["maxResults"].is_null();
  GP_ASSIGN(page, ParsePage(f));
  if (!has_max) page.limit = 10;  // ECS's default page of ListServices
  r.page = page;
  return r;
}

}  // namespace gpupack::api
