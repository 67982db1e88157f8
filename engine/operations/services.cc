// Services: CreateService, UpdateService, DeleteService, DescribeServices, ListServices. These change what a
// service asks for; the service scheduler (service_scheduler.cc) starts and stops its tasks, in the same
// transaction, once the operation is done.
#include <cmath>

#include "engine/operations/operations.h"
#include "engine/operations/resolve.h"
#include "scheduler/validation.h"

namespace gpupack::api {

namespace {

constexpr int kMaxDesiredCount = 5000;
constexpr size_t kMaxServicesPerCluster = 5000;

// CheckDeploymentConfiguration: ECS's bounds on the two percents, for a REPLICA or a DAEMON service.
Status CheckDeploymentConfiguration(const DeploymentConfiguration& c) {
  if (c.minimum_healthy_percent < 0 || c.minimum_healthy_percent > 100)
    return Status::InvalidParameter("minimumHealthyPercent must be between 0 and 100.");
  if (c.maximum_percent < 100 || c.maximum_percent > 200)
    return Status::InvalidParameter("maximumPercent must be between 100 and 200.");
  if (c.minimum_healthy_percent == 100 && c.maximum_percent == 100)
    return Status::InvalidParameter(
        "minimumHealthyPercent and maximumPercent cannot both be 100: no task could ever be replaced.");
  return Status::Ok();
}

// ActiveTaskDefinition: what a service runs: `ref` resolved to one revision, which must be ACTIVE.
Result<const TaskDefinition*> ActiveTaskDefinition(const ClusterState& state, const ArnContext& arn,
                                                   const std::string& ref) {
  GP_ASSIGN(td, ResolveTaskDefinition(state, arn, ref));
  if (td->status != LifecycleStatus::kActive)
    return Status::Client("TaskDefinition is inactive: " + arn.TaskDefinitionArn(td->family, td->revision));
  return td;
}

// ServiceArnOf: the ARN of the service `ref` (a name or an ARN) names in `cluster`.
Result<std::string> ServiceArnOf(const ArnContext& arn, const std::string& cluster, const std::string& ref) {
  GP_ASSIGN(name, ResourceIdFrom(arn, "service", ref, cluster));
  return arn.ServiceArn(cluster, name);
}

}  // namespace

Status CreateService(const CreateServiceRequest& in, Transaction& txn, ServiceResult& out) {
  const ClusterState& state = txn.state();
  GP_ASSIGN(cluster, ActiveCluster(state, txn.arn(), in.cluster));
  if (!IsValidName(in.service_name))
    return Status::InvalidParameter(
        "serviceName must be 1-255 letters (uppercase and lowercase), numbers, hyphens and underscores.");
  GP_ASSIGN(td, ActiveTaskDefinition(state, txn.arn(), in.task_definition));
  GP_TRY(ValidatePlacement(in.constraints, in.strategies));
  const DeploymentConfiguration defaults =
      in.daemon ? DeploymentConfiguration{0, 100, false, false} : DeploymentConfiguration{};
  const DeploymentConfiguration config = in.deployment_configuration.ApplyTo(defaults);
  if (in.daemon) {
    if (!in.strategies.empty())
      return Status::InvalidParameter("Placement strategies are not supported with the DAEMON scheduling strategy.");
    if (in.desired_count)
      return Status::InvalidParameter("desiredCount is not supported with the DAEMON scheduling strategy.");
  } else {
    if (!in.desired_count) return Status::InvalidParameter("desiredCount is required for a REPLICA service.");
    if (*in.desired_count < 0 || *in.desired_count > kMaxDesiredCount)
      return Status::InvalidParameter("desiredCount must be between 0 and 5000.");
  }
  GP_TRY(CheckDeploymentConfiguration(config));
  // A REPLICA service's tasks go to the providers of its strategy (or the cluster's default); DAEMON services run
  // one task on every instance and take none.
  if (in.daemon && !in.capacity_provider_strategy.empty())
    return Status::InvalidParameter(
        "Capacity provider strategies are not supported with the DAEMON scheduling strategy.");
  GP_ASSIGN(strategy, StrategyFor(state, *cluster, in.capacity_provider_strategy, in.launch_type_given || in.daemon));

  const std::string arn = txn.arn().ServiceArn(cluster->name, in.service_name);
  if (const Service* existing = state.FindService(arn); existing && existing->status != ServiceStatus::kInactive) {
    // A repeated request with the same clientToken is answered with the service it created.
    if (in.client_token && !in.client_token->empty() && *in.client_token == existing->client_token) {
      out.service = std::make_shared<const Service>(*existing);
      txn.MarkWrite();
      return Status::Ok();
    }
    return Status::InvalidParameter("Creation of service was not idempotent.");
  }
  size_t in_cluster = 0;
  state.ForEachService([&](const Service& s) {
    in_cluster += s.cluster == cluster->name && s.status != ServiceStatus::kInactive;
  });
  if (in_cluster >= kMaxServicesPerCluster)
    return Status::InvalidParameter("The cluster already has 5000 services, the most a cluster may hold.");

  Service svc;
  svc.arn = arn;
  svc.name = in.service_name;
  svc.cluster = cluster->name;
  svc.task_definition_arn = txn.arn().TaskDefinitionArn(td->family, td->revision);
  svc.daemon = in.daemon;
  svc.desired_count = in.daemon ? 0 : *in.desired_count;
  svc.placement_constraints = in.constraints;
  svc.placement_strategy = in.strategies;
  svc.capacity_provider_strategy = std::move(strategy);
  svc.deployment_configuration = config;
  svc.tags = in.tags;
  svc.client_token = in.client_token.value_or("");
  svc.created_at = svc.updated_at = txn.now();
  svc.deployments.push_back(NewDeployment(txn, svc.task_definition_arn, svc.desired_count));
  txn.PutService(std::move(svc));
  out.service = std::make_shared<const Service>(*state.FindService(arn));
  txn.MarkWrite();
  return Status::Ok();
}

Status UpdateService(const UpdateServiceRequest& in, Transaction& txn, ServiceResult& out) {
  const ClusterState& state = txn.state();
  GP_ASSIGN(cluster, ActiveCluster(state, txn.arn(), in.cluster));
  GP_ASSIGN(arn, ServiceArnOf(txn.arn(), cluster->name, in.service));
  const Service* found = state.FindService(arn);
  if (!found) return Status::ServiceNotFound("Service not found.");
  if (found->status != ServiceStatus::kActive) return Status::ServiceNotActive("Service was not ACTIVE.");
  Service svc = *found;

  if (in.desired_count) {
    if (svc.daemon) return Status::InvalidParameter("desiredCount is not supported with the DAEMON scheduling strategy.");
    if (*in.desired_count < 0 || *in.desired_count > kMaxDesiredCount)
      return Status::InvalidParameter("desiredCount must be between 0 and 5000.");
  }
  std::string td_arn = svc.task_definition_arn;
  if (in.task_definition) {
    GP_ASSIGN(td, ActiveTaskDefinition(state, txn.arn(), *in.task_definition));
    td_arn = txn.arn().TaskDefinitionArn(td->family, td->revision);
  }
  if (in.constraints || in.strategies)
    GP_TRY(ValidatePlacement(in.constraints.value_or(svc.placement_constraints),
                             in.strategies.value_or(svc.placement_strategy)));
  if (svc.daemon && in.strategies && !in.strategies->empty())
    return Status::InvalidParameter("Placement strategies are not supported with the DAEMON scheduling strategy.");
  const DeploymentConfiguration config = in.deployment_configuration.ApplyTo(svc.deployment_configuration);
  GP_TRY(CheckDeploymentConfiguration(config));

  // A new deployment when what the tasks run or where they may run changed, or when asked for.
  const bool redeploy = td_arn != svc.task_definition_arn ||
                        (in.constraints && *in.constraints != svc.placement_constraints) ||
                        (in.strategies && *in.strategies != svc.placement_strategy) || in.force_new_deployment;
  if (in.desired_count) svc.desired_count = *in.desired_count;
  if (in.constraints) svc.placement_constraints = *in.constraints;
  if (in.strategies) svc.placement_strategy = *in.strategies;
  svc.deployment_configuration = config;
  if (redeploy) {
    svc.task_definition_arn = td_arn;
    for (auto& d : svc.deployments) {
      d.primary = false;
      d.updated_at = txn.now();
    }
    // Only the tasks of the deployment before keep an ACTIVE deployment alive; a FAILED one with no task left
    // has nothing more to say.
    svc.deployments.insert(svc.deployments.begin(), NewDeployment(txn, td_arn, svc.desired_count));
  } else if (!svc.deployments.empty()) {
    svc.deployments.front().desired_count = svc.daemon ? svc.deployments.front().desired_count : svc.desired_count;
  }
  // A user's change starts afresh: no back-off, and the steady state is to be reached again.
  svc.failure_streak = 0;
  svc.next_launch_at = 0;
  svc.steady = false;
  svc.updated_at = txn.now();
  txn.PutService(std::move(svc));
  out.service = std::make_shared<const Service>(*state.FindService(arn));
  txn.MarkWrite();
  return Status::Ok();
}

// DeleteService: a REPLICA service must be scaled to 0 first unless `force`; the service turns DRAINING, its
// tasks are stopped by the service scheduler, and it turns INACTIVE once the last one is gone.
Status DeleteService(const DeleteServiceRequest& in, Transaction& txn, ServiceResult& out) {
  const ClusterState& state = txn.state();
  GP_ASSIGN(cluster, ActiveCluster(state, txn.arn(), in.cluster));
  GP_ASSIGN(arn, ServiceArnOf(txn.arn(), cluster->name, in.service));
  const Service* found = state.FindService(arn);
  if (!found || found->status == ServiceStatus::kInactive) return Status::ServiceNotFound("Service not found.");
  if (found->status == ServiceStatus::kActive) {
    if (!found->daemon && found->desired_count > 0 && !in.force)
      return Status::InvalidParameter("The service cannot be stopped while it is scaled above 0.");
    Service svc = *found;
    svc.status = ServiceStatus::kDraining;
    svc.desired_count = 0;
    svc.steady = false;
    svc.next_launch_at = 0;
    svc.updated_at = txn.now();
    txn.PutService(std::move(svc));
  }
  out.service = std::make_shared<const Service>(*state.FindService(arn));
  txn.MarkWrite();
  return Status::Ok();
}

Status DescribeServices(const DescribeServicesRequest& in, const ReadContext& ctx, ServicesResult& out) {
  GP_ASSIGN(cluster, ActiveCluster(ctx.view, ctx.arn, in.cluster));
  out.tags = in.tags;
  for (const auto& ref : in.services) {
    auto arn = ServiceArnOf(ctx.arn, cluster->name, ref);
    auto svc = arn.ok() ? ctx.view.FindService(*arn) : nullptr;
    if (svc) {
      out.services.push_back(std::move(svc));
    } else {
      out.failures.push_back({arn.ok() ? *arn : ref, "MISSING", ""});
    }
  }
  return Status::Ok();
}

// ListServices: the ACTIVE and DRAINING services of the cluster, by ARN.
Status ListServices(const ListServicesRequest& in, const ReadContext& ctx, ListPage& out) {
  GP_ASSIGN(cluster, ActiveCluster(ctx.view, ctx.arn, in.cluster));
  std::vector<std::string> arns;
  const std::string prefix = ctx.arn.ServiceArn(cluster->name, "");
  const std::set<std::string>& all = ctx.view.ServiceArns();
  for (auto it = all.lower_bound(prefix); it != all.end() && it->rfind(prefix, 0) == 0; ++it) {
    const std::shared_ptr<const Service> found = ctx.view.FindService(*it);
    if (!found) continue;
    const Service& s = *found;
    if (s.status == ServiceStatus::kInactive) continue;
    if (in.daemon && s.daemon != *in.daemon) continue;
    arns.push_back(s.arn);
  }
  out = PageOf("serviceArns", std::move(arns), in.page.begin, in.page.limit);
  return Status::Ok();
}

}  // namespace gpupack::api
