// Clusters: CreateCluster, DeleteCluster, UpdateClusterSettings, DescribeClusters, ListClusters.
#include "engine/operations/operations.h"
#include "engine/operations/resolve.h"

namespace gpupack::api {

namespace {

ClusterCounts CountsOf(const ClusterState& state, const std::string& cluster) {
  ClusterCounts counts;
  for (const ContainerInstance* inst : state.InstancesOf(cluster)) {
    if (inst->status == InstanceStatus::kInactive) continue;
    ++counts.registered_instances;
    counts.running_tasks += inst->running_tasks_count;
    counts.pending_tasks += inst->pending_tasks_count;
  }
  state.ForEachService([&](const Service& svc) {
    if (svc.cluster != cluster) return;
    counts.active_services += svc.status == ServiceStatus::kActive;
    counts.draining_services += svc.status == ServiceStatus::kDraining;
  });
  return counts;
}

}  // namespace

// CreateCluster is idempotent: an ACTIVE cluster of that name is answered as it is.
Status CreateCluster(const CreateClusterRequest& in, Transaction& txn, ClusterResult& out) {
  GP_ASSIGN(name, ClusterNameFrom(txn.arn(), in.cluster_name));
  const Cluster* existing = txn.state().FindCluster(name);
  if (existing && existing->status == LifecycleStatus::kActive) {
    out = {*existing, CountsOf(txn.state(), name)};
    return Status::Ok();
  }
  Cluster c;
  c.name = name;
  c.arn = txn.arn().ClusterArn(name);
  c.settings.compute_aware_placement = in.compute_aware.value_or(false);
  c.settings.manual_instance_acceptance = in.manual_instance_acceptance.value_or(false);
  c.tags = in.tags;
  c.created_at = txn.now();
  txn.PutCluster(c);
  out = {c, CountsOf(txn.state(), name)};
  return Status::Ok();
}

Status UpdateClusterSettings(const UpdateClusterSettingsRequest& in, Transaction& txn, ClusterResult& out) {
  GP_ASSIGN(cluster, ActiveCluster(txn.state(), txn.arn(), in.cluster));
  Cluster c = *cluster;
  if (in.compute_aware) c.settings.compute_aware_placement = *in.compute_aware;
  if (in.manual_instance_acceptance) c.settings.manual_instance_acceptance = *in.manual_instance_acceptance;
  txn.PutCluster(c);
  out = {c, CountsOf(txn.state(), c.name)};
  return Status::Ok();
}

// DeleteCluster: only a cluster without registered instances and without running tasks.
Status DeleteCluster(const DeleteClusterRequest& in, Transaction& txn, ClusterResult& out) {
  GP_ASSIGN(cluster, ActiveCluster(txn.state(), txn.arn(), in.cluster));
  for (const ContainerInstance* inst : txn.state().InstancesOf(cluster->name))
    if (inst->status != InstanceStatus::kInactive)
      return Status::Client("The cluster cannot be deleted while container instances are active or draining.");
  bool active_tasks = false;
  txn.state().ForEachTask([&](const Task& t) {
    active_tasks = active_tasks || (t.cluster == cluster->name && t.last_status != TaskStatus::kStopped);
  });
  if (active_tasks) return Status::Client("The cluster cannot be deleted while tasks are active.");
  Cluster c = *cluster;
  c.status = LifecycleStatus::kInactive;
  txn.PutCluster(c);
  out = {c, CountsOf(txn.state(), c.name)};
  return Status::Ok();
}

Status DescribeClusters(const DescribeClustersRequest& in, const ReadContext& ctx, ClustersResult& out) {
  out.statistics = in.statistics;
  for (const auto& ref : in.clusters) {
    auto name = ClusterNameFrom(ctx.arn, ref);
    const Cluster* c = name.ok() ? ctx.view.FindCluster(*name) : nullptr;
    if (c) out.clusters.push_back({*c, ctx.view.CountsOf(c->name)});
    else out.failures.push_back({name.ok() ? ctx.arn.ClusterArn(*name) : ref, "MISSING", ""});
  }
  return Status::Ok();
}

Status ListClusters(const ListClustersRequest& in, const ReadContext& ctx, ListPage& out) {
  std::vector<std::string> arns;
  for (const Cluster* c : ctx.view.Clusters())
    if (c->status == LifecycleStatus::kActive) arns.push_back(ctx.arn.ClusterArn(c->name));
  out = PageOf("clusterArns", std::move(arns), in.page.begin, in.page.limit);
  return Status::Ok();
}

}  // namespace gpupack::api
