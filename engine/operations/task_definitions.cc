// Task definitions: RegisterTaskDefinition, DeregisterTaskDefinition, DescribeTaskDefinition,
// ListTaskDefinitions, ListTaskDefinitionFamilies.
#include <algorithm>

#include "engine/operations/operations.h"
#include "engine/operations/resolve.h"
#include "scheduler/host_settings.h"
#include "scheduler/validation.h"

namespace gpupack::api {

// RegisterTaskDefinition validates the definition (GPU sharing rules included) and stores the family's next
// revision.
Status RegisterTaskDefinition(const RegisterTaskDefinitionRequest& in, Transaction& txn, TaskDefinitionResult& out) {
  TaskDefinition td = in.definition;
  GP_TRY(ValidateTaskDefinition(td));
  GP_TRY(RefuseHostSettings(td));
  td.revision = txn.state().LatestRevision(td.family) + 1;
  td.arn = txn.arn().TaskDefinitionArn(td.family, td.revision);
  td.status = LifecycleStatus::kActive;
  td.registered_at = txn.now();
  out = {std::make_shared<const TaskDefinition>(td), true};
  txn.PutTaskDefinition(std::move(td));
  return Status::Ok();
}

// DeregisterTaskDefinition marks one revision INACTIVE (tasks running it are left alone).
Status DeregisterTaskDefinition(const DeregisterTaskDefinitionRequest& in, Transaction& txn,
                                TaskDefinitionResult& out) {
  GP_ASSIGN(r, TaskDefinitionRefFrom(txn.arn(), in.task_definition));
  if (!r.revision) return Status::Client("taskDefinition must name a revision (family:revision or an ARN)");
  const TaskDefinition* found = txn.state().FindTaskDefinition(r.family, r.revision);
  if (!found) return Status::Client("The specified task definition does not exist.");
  TaskDefinition td = *found;
  if (td.status != LifecycleStatus::kInactive) {
    td.status = LifecycleStatus::kInactive;
    td.deregistered_at = txn.now();
    txn.PutTaskDefinition(td);
  }
  out = {std::make_shared<const TaskDefinition>(std::move(td)), false};
  return Status::Ok();
}

Status DescribeTaskDefinition(const DescribeTaskDefinitionRequest& in, const ReadContext& ctx,
                              TaskDefinitionResult& out) {
  GP_ASSIGN(td, ResolveTaskDefinition(ctx.view, ctx.arn, in.task_definition));
  const auto& family = ctx.view.TaskDefinitions().at(td->family);
  out = {family->at(td->revision), true};
  return Status::Ok();
}

// ListTaskDefinitions: ARNs of the revisions in `status`, by family then revision. ECS's familyPrefix matches
// the whole family name here.
Status ListTaskDefinitions(const ListTaskDefinitionsRequest& in, const ReadContext& ctx, ListPage& out) {
  std::vector<std::string> arns;
  for (const auto& [family, revisions] : ctx.view.TaskDefinitions()) {
    if (in.family_prefix && family != *in.family_prefix) continue;
    for (const auto& [rev, td] : *revisions)
      if (in.status && td->status == *in.status) arns.push_back(td->arn);
  }
  if (in.descending) std::reverse(arns.begin(), arns.end());
  out = PageOf("taskDefinitionArns", std::move(arns), in.page.begin, in.page.limit);
  return Status::Ok();
}

// ListTaskDefinitionFamilies: a family is ACTIVE while any revision is.
Status ListTaskDefinitionFamilies(const ListTaskDefinitionFamiliesRequest& in, const ReadContext& ctx, ListPage& out) {
  std::vector<std::string> families;
  for (const auto& [family, revisions] : ctx.view.TaskDefinitions()) {
    if (in.family_prefix && family.rfind(*in.family_prefix, 0) != 0) continue;
    const bool any_active = std::any_of(revisions->begin(), revisions->end(),
                                        [](const auto& r) { return r.second->status == LifecycleStatus::kActive; });
    if (!in.status || (*in.status == LifecycleStatus::kActive) == any_active) families.push_back(family);
  }
  out = PageOf("families", std::move(families), in.page.begin, in.page.limit);
  return Status::Ok();
}

}  // namespace gpupack::api
