// The parsers of the capacity-provider operations (CreateCapacityProvider, UpdateCapacityProvider,
// DeleteCapacityProvider, DescribeCapacityProviders, PutClusterCapacityProviders) and of capacityProviderStrategy,
// which RunTask and CreateService carry.
#include "api/ecs/codec.h"
#include "api/ecs/parse.h"
#include "api/ecs/parse_fields.h"

namespace gpupack::api {

namespace {

constexpr size_t kMaxProviderNames = 100;  // names in one DescribeCapacityProviders or PutClusterCapacityProviders
constexpr size_t kMaxDescribePage = 10;    // ECS: DescribeCapacityProviders pages of 1..10

// RefuseAutoScalingGroup: gpupack's providers are pools of container instances that agents join; there is no Auto
// Scaling group behind them, so its settings are refused by name rather than ignored.
Status RefuseAutoScalingGroup(const Json& in, const char* operation) {
  for (const char* key : {"autoScalingGroupProvider", "managedInstancesProvider", "cluster"}) {
    if (!in.contains(key) || in[key].is_null()) continue;
    return Status::Unsupported(std::string(operation) + ": " + key +
                               " is not supported: a gpupack capacity provider is the pool of container instances "
                               "whose agents join it (gpupack agent --capacity-provider NAME, docs/operations.md)");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<CapacityProviderStrategyItem>> ParseCapacityProviderStrategy(const Json& in, const char* key) {
  std::vector<CapacityProviderStrategyItem> out;
  Fields f(in);
  f.Array(
      key, false,
      [&](const Json& e, const std::string& path) -> Status {
        if (!e.is_object()) return Status::InvalidParameter(path + " must be an object");
        Fields item(e);
        CapacityProviderStrategyItem it;
        std::optional<int64_t> weight, base;
        item.String("capacityProvider", it.provider, /*required=*/true);
        item.Int32("weight", weight);
        item.Int32("base", base);
        GP_TRY(item.status());
        if (it.provider.empty()) return Status::InvalidParameter(path + ".capacityProvider must not be empty");
        if (it.provider.size() > 255 || HasControlCharacter(it.provider))
          return Status::InvalidParameter(path + ".capacityProvider is not a capacity provider name");
        if (weight && (*weight < 0 || *weight > 1000))
          return Status::InvalidParameter(path + ".weight must be between 0 and 1000");
        if (base && (*base < 0 || *base > 100000))
          return Status::InvalidParameter(path + ".base must be between 0 and 100000");
        it.weight = static_cast<int>(weight.value_or(0));
        it.base = static_cast<int>(base.value_or(0));
        out.push_back(std::move(it));
        return Status::Ok();
      },
      /*max=*/20);
  GP_TRY(f.status());
  return out;
}

Result<CreateCapacityProviderRequest> ParseCreateCapacityProvider(const Json& in) {
  CreateCapacityProviderRequest r;
  GP_TRY(RefuseAutoScalingGroup(in, "CreateCapacityProvider"));
  Fields f(in);
  GP_TRY(RequireString(f, "name", r.name));
  GP_ASSIGN(tags, ParseTags(in));
  GP_TRY(CheckTags(tags));
  r.tags = std::move(tags);
  return r;
}

Result<UpdateCapacityProviderRequest> ParseUpdateCapacityProvider(const Json& in) {
  UpdateCapacityProviderRequest r;
  GP_TRY(RefuseAutoScalingGroup(in, "UpdateCapacityProvider"));
  Fields f(in);
  GP_TRY(RequireString(f, "name", r.name));
  return r;
}

Result<DeleteCapacityProviderRequest> ParseDeleteCapacityProvider(const Json& in) {
  DeleteCapacityProviderRequest r;
  Fields f(in);
  GP_TRY(RequireString(f, "capacityProvider", r.capacity_provider));
  return r;
}

Result<DescribeCapacityProvidersRequest> ParseDescribeCapacityProviders(const Json& in) {
  DescribeCapacityProvidersRequest r;
  Fields f(in);
  f.Strings("capacityProviders", r.capacity_providers, kMaxProviderNames);
  const std::vector<std::string> include = f.StringList("include");
  GP_TRY(f.status());
  for (const auto& v : include) {
    if (v != "TAGS") return Status::InvalidParameter("include: " + v.substr(0, 100) + " is not TAGS");
    r.tags = true;
  }
  const bool has_max = in.contains("maxResults") && !in["maxResults"].is_null();
  GP_ASSIGN(page, ParsePage(f));
  if (!has_max) page.limit = kMaxDescribePage;
  if (page.limit > kMaxDescribePage) return Status::InvalidParameter("maxResults must be between 1 and 10");
  r.page = page;
  return r;
}

Result<PutClusterCapacityProvidersRequest> ParsePutClusterCapacityProviders(const Json& in) {
  PutClusterCapacityProvidersRequest r;
  Fields f(in);
  GP_TRY(RequireString(f, "cluster", r.cluster));
  if (!in.contains("capacityProviders") || !in["capacityProviders"].is_array())
    return Status::InvalidParameter("capacityProviders is required (a list, empty to remove every provider)");
  if (!in.contains("defaultCapacityProviderStrategy") || !in["defaultCapacityProviderStrategy"].is_array())
    return Status::InvalidParameter("defaultCapacityProviderStrategy is required (a list, empty for none)");
  f.Strings("capacityProviders", r.capacity_providers, kMaxProviderNames);
  GP_TRY(f.status());
  GP_ASSIGN(strategy, ParseCapacityProviderStrategy(in, "defaultCapacityProviderStrategy"));
  r.default_strategy = std::move(strategy);
  return r;
}

}  // namespace gpupack::api
