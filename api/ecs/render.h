// Render: the typed results of the engine (engine/core/results.h) as ECS's JSON response shapes, through the codec.
// Total: every result renders.
#pragma once

#include "api/ecs/codec.h"
#include "engine/core/results.h"

namespace gpupack::api {

Json Render(const ArnContext& ctx, const ClusterResult& r);
Json Render(const ArnContext& ctx, const ClustersResult& r);
Json Render(const ArnContext& ctx, const ListPage& r);
Json Render(const ArnContext& ctx, const TaskDefinitionResult& r);
Json Render(const ArnContext& ctx, const TasksResult& r);
Json Render(const ArnContext& ctx, const TaskResult& r);
Json Render(const ArnContext& ctx, const InstanceResult& r);
Json Render(const ArnContext& ctx, const InstancesResult& r);
Json Render(const ArnContext& ctx, const AttributesResult& r);
Json Render(const ArnContext& ctx, const AckResult& r);
Json Render(const ArnContext& ctx, const ExplainResult& r);
Json Render(const ArnContext& ctx, const ServiceResult& r);
Json Render(const ArnContext& ctx, const ServicesResult& r);
Json Render(const ArnContext& ctx, const CapacityProviderResult& r);
Json Render(const ArnContext& ctx, const CapacityProvidersResult& r);

}  // namespace gpupack::api
