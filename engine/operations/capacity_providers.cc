// Capacity providers: CreateCapacityProvider, UpdateCapacityProvider, DeleteCapacityProvider,
// DescribeCapacityProviders, PutClusterCapacityProviders, and the strategy rules RunTask and CreateService apply
// (StrategyFor). A provider is a named pool of container instances: an instance belongs to the provider its
// attribute kCapacityProviderAttribute names (docs/operations.md). The tasks that wait for a provider's capacity
// are capacity_queue.cc's.
#include <algorithm>
#include <cctype>
#include <set>
#include <string_view>

#include "engine/operations/operations.h"
#include "engine/operations/resolve.h"
#include "scheduler/validation.h"

namespace gpupack::api {

namespace {

constexpr size_t kMaxCapacityProviders = 500;  // providers the server holds, deleted ones included
constexpr size_t kMaxStrategyItems = 20;       // ECS: a strategy names at most 20 providers

// ProviderNameFrom: the name in `ref`, a name or a capacity-provider ARN of this region and account.
Result<std::string> ProviderNameFrom(const ArnContext& arn, const std::string& ref) {
  const std::string prefix = arn.CapacityProviderArn("");
  if (ref.rfind("arn:", 0) == 0) {
    if (ref.rfind(prefix, 0) != 0 || ref.size() == prefix.size())
      return Status::InvalidParameter("The capacity provider ARN is not valid: " + ref.substr(0, 300));
    return ref.substr(prefix.size());
  }
  return ref;
}

// ActiveProvider: the ACTIVE provider `ref` names, else ClientException (ECS's words).
Result<const CapacityProvider*> ActiveProvider(const ClusterState& state, const ArnContext& arn,
                                               const std::string& ref) {
  GP_ASSIGN(name, ProviderNameFrom(arn, ref));
  const CapacityProvider* p = state.FindCapacityProvider(name);
  if (!p || p->status != CapacityProviderStatus::kActive)
    return Status::Client("The specified capacity provider does not exist: " + name.substr(0, 255));
  return p;
}

bool Named(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// CheckStrategyShape: what a strategy must be whatever the cluster: 1..20 distinct providers, weights 0..1000,
// bases 0..100000, at most one base, and some weight (or a base) to place with.
Status CheckStrategyShape(const std::vector<CapacityProviderStrategyItem>& strategy) {
  if (strategy.size() > kMaxStrategyItems)
    return Status::InvalidParameter("A capacity provider strategy can contain at most 20 capacity providers.");
  std::set<std::string> seen;
  int bases = 0, weight = 0;
  for (const auto& item : strategy) {
    if (!seen.insert(item.provider).second)
      return Status::InvalidParameter("The capacity provider strategy names capacity provider " +
                                      item.provider.substr(0, 255) + " more than once.");
    if (item.weight < 0 || item.weight > 1000)
      return Status::InvalidParameter("capacityProviderStrategy weight must be between 0 and 1000.");
    if (item.base < 0 || item.base > 100000)
      return Status::InvalidParameter("capacityProviderStrategy base must be between 0 and 100000.");
    bases += item.base > 0;
    weight += item.weight;
  }
  if (bases > 1)
    return Status::InvalidParameter("Only one capacity provider in a capacity provider strategy can have a base.");
  if (!strategy.empty() && weight == 0 && bases == 0)
    return Status::InvalidParameter(
        "At least one capacity provider in a capacity provider strategy must have a weight greater than 0.");
  return Status::Ok();
}

}  // namespace

Result<std::vector<CapacityProviderStrategyItem>> StrategyFor(const ClusterState& state, const Cluster& cluster,
                                                              const std::vector<CapacityProviderStrategyItem>& given,
                                                              bool launch_type_given) {
  if (!given.empty() && launch_type_given)
    return Status::InvalidParameter(
        "Specifying both a launch type and capacity provider strategy is not supported. Remove one and try again.");
  if (given.empty()) {
    if (launch_type_given) return std::vector<CapacityProviderStrategyItem>{};
    return cluster.default_strategy;  // checked when it was put
  }
  GP_TRY(CheckStrategyShape(given));
  for (const auto& item : given) {
    const CapacityProvider* p = state.FindCapacityProvider(item.provider);
    if (!p || p->status != CapacityProviderStatus::kActive || !Named(cluster.capacity_providers, item.provider))
      return Status::InvalidParameter(
          "The specified capacity provider strategy cannot contain a capacity provider that is not associated with "
          "the cluster. Associate the capacity provider with the cluster or specify a valid capacity provider and "
          "try again. (capacity provider " + item.provider.substr(0, 255) + ")");
  }
  return given;
}

Status CreateCapacityProvider(const CreateCapacityProviderRequest& in, Transaction& txn, CapacityProviderResult& out) {
  const ClusterState& state = txn.state();
  if (!IsValidName(in.name))
    return Status::InvalidParameter(
        "The capacity provider name must be 1-255 letters (uppercase and lowercase), numbers, hyphens and "
        "underscores.");
  for (const char* reserved : {"aws", "ecs", "fargate"})
    if (in.name.size() >= std::string_view(reserved).size() &&
        std::equal(in.name.begin(), in.name.begin() + static_cast<std::ptrdiff_t>(std::string_view(reserved).size()),
                   reserved, [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; }))
      return Status::InvalidParameter("The capacity provider name cannot begin with 'aws', 'ecs' or 'fargate'.");
  const CapacityProvider* existing = state.FindCapacityProvider(in.name);
  if (existing && existing->status == CapacityProviderStatus::kActive)
    return Status::Client("The specified capacity provider already exists. To change the configuration of an "
                          "existing capacity provider, update the capacity provider.");
  size_t held = 0;
  state.ForEachCapacityProvider([&](const CapacityProvider&) { ++held; });
  if (!existing && held >= kMaxCapacityProviders)
    return Status::LimitExceeded("The server already holds 500 capacity providers, the most it may hold.");
  for (const auto& tag : in.tags)  // quotas (kQuotaTag, kQuotaTag:TEAM) are whole MiB
    if (tag.name == kQuotaTag || tag.name.rfind(std::string(kQuotaTag) + ":", 0) == 0) GP_TRY(QuotaOf(tag).status());
  CapacityProvider p;
  p.name = in.name;
  p.arn = txn.arn().CapacityProviderArn(in.name);
  p.tags = in.tags;
  p.created_at = txn.now();
  if (existing) p.version = existing->version;  // a name used again: its record goes on
  txn.PutCapacityProvider(p);
  out.provider = *state.FindCapacityProvider(in.name);
  txn.MarkWrite();
  return Status::Ok();
}

Status UpdateCapacityProvider(const UpdateCapacityProviderRequest& in, Transaction& txn, CapacityProviderResult& out) {
  GP_ASSIGN(p, ActiveProvider(txn.state(), txn.arn(), in.name));
  CapacityProvider updated = *p;
  updated.update_status = "UPDATE_COMPLETE";
  const std::string name = updated.name;
  txn.PutCapacityProvider(std::move(updated));
  out.provider = *txn.state().FindCapacityProvider(name);
  txn.MarkWrite();
  return Status::Ok();
}

// DeleteCapacityProvider: refused while a cluster has it (PutClusterCapacityProviders removes it, which in turn
// is refused while tasks or services use it); the provider turns INACTIVE and stays describable.
Status DeleteCapacityProvider(const DeleteCapacityProviderRequest& in, Transaction& txn, CapacityProviderResult& out) {
  const ClusterState& state = txn.state();
  GP_ASSIGN(p, ActiveProvider(state, txn.arn(), in.capacity_provider));
  for (const Cluster* c : state.Clusters())
    if (c->status == LifecycleStatus::kActive && Named(c->capacity_providers, p->name))
      return Status::Client("The specified capacity provider is in use and cannot be removed: cluster " + c->name +
                            " has it. Remove it from the cluster with PutClusterCapacityProviders first.");
  CapacityProvider deleted = *p;
  deleted.status = CapacityProviderStatus::kInactive;
  deleted.update_status = "DELETE_COMPLETE";
  const std::string name = deleted.name;
  txn.PutCapacityProvider(std::move(deleted));
  out.provider = *state.FindCapacityProvider(name);
  txn.MarkWrite();
  return Status::Ok();
}

// DescribeCapacityProviders: the named providers (unknown ones in failures), or every one, a page at a time.
Status DescribeCapacityProviders(const DescribeCapacityProvidersRequest& in, const ReadContext& ctx,
                                 CapacityProvidersResult& out) {
  out.tags = in.tags;
  if (!in.capacity_providers.empty()) {
    for (const auto& ref : in.capacity_providers) {
      auto name = ProviderNameFrom(ctx.arn, ref);
      const CapacityProvider* p = name.ok() ? ctx.view.FindCapacityProvider(*name) : nullptr;
      if (p) {
        out.providers.push_back(*p);
      } else {
        out.failures.push_back({name.ok() ? ctx.arn.CapacityProviderArn(*name) : ref, "MISSING", ""});
      }
    }
    return Status::Ok();
  }
  size_t index = 0;
  for (const auto& [name, p] : ctx.view.CapacityProviders()) {
    if (index++ < in.page.begin) continue;
    if (out.providers.size() == in.page.limit) {
      out.next_token = PageToken(in.page.begin + in.page.limit);
      break;
    }
    out.providers.push_back(p);
  }
  return Status::Ok();
}

// PutClusterCapacityProviders: the cluster's whole list and default strategy, replaced. A provider that leaves the
// list while tasks of the cluster wait for it or run on it, or a service of the cluster names it, is refused.
Status PutClusterCapacityProviders(const PutClusterCapacityProvidersRequest& in, Transaction& txn, ClusterResult& out) {
  const ClusterState& state = txn.state();
  GP_ASSIGN(cluster, ActiveCluster(state, txn.arn(), in.cluster));
  std::vector<std::string> names;
  for (const auto& ref : in.capacity_providers) {
    GP_ASSIGN(p, ActiveProvider(state, txn.arn(), ref));
    if (Named(names, p->name))
      return Status::InvalidParameter("capacityProviders names " + p->name + " more than once.");
    names.push_back(p->name);
  }
  GP_TRY(CheckStrategyShape(in.default_strategy));
  for (const auto& item : in.default_strategy)
    if (!Named(names, item.provider))
      return Status::InvalidParameter(
          "The default capacity provider strategy can only contain capacity providers that are associated with the "
          "cluster (capacity provider " + item.provider.substr(0, 255) + ").");
  std::set<std::string> removed;
  for (const auto& name : cluster->capacity_providers)
    if (!Named(names, name)) removed.insert(name);
  if (!removed.empty()) {
    std::string busy;
    state.ForEachTask([&](const Task& t) {
      if (busy.empty() && t.cluster == cluster->name && t.last_status != TaskStatus::kStopped &&
          removed.count(t.capacity_provider_name))
        busy = "task " + t.id + " uses capacity provider " + t.capacity_provider_name;
    });
    state.ForEachService([&](const Service& s) {
      if (!busy.empty() || s.cluster != cluster->name || s.status == ServiceStatus::kInactive) return;
      for (const auto& item : s.capacity_provider_strategy)
        if (removed.count(item.provider)) busy = "service " + s.name + " uses capacity provider " + item.provider;
    });
    if (!busy.empty())
      return Status::ResourceInUse("The specified capacity provider is in use and cannot be removed: " + busy + ".");
  }
  Cluster c = *cluster;
  c.capacity_providers = std::move(names);
  c.default_strategy = in.default_strategy;
  txn.PutCluster(c);
  out.cluster = *state.FindCluster(c.name);
  txn.MarkWrite();
  return Status::Ok();
}

}  // namespace gpupack::api
