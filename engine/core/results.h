// Typed results: what each operation answers, rendered to ECS's JSON shapes by the ECS front end
// (api/ecs/render.h).
//
// Entities are shared, immutable copies: a read result points into the read view it was answered from, a write
// result holds copies taken on the writer thread, so rendering needs no lock.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/read_view.h"
#include "scheduler/model.h"
#include "scheduler/placement.h"

namespace gpupack::api {

// Failure: failures[] of Describe and RunTask calls.
struct Failure {
  std::string arn;
  std::string reason;
  std::string detail;  // ours; empty = left out
};

struct ClusterResult {
  Cluster cluster;
  ClusterCounts counts;
};
struct ClustersResult {
  std::vector<ClusterResult> clusters;
  std::vector<Failure> failures;
  bool statistics = false;  // DescribeClusters include STATISTICS: fill each cluster's statistics list
};
// ListPage: one page of a List call: `key` names the list in the answer.
struct ListPage {
  const char* key = "";
  std::vector<std::string> items;
  std::optional<std::string> next_token;
};
struct TaskDefinitionResult {
  std::shared_ptr<const TaskDefinition> definition;
  bool with_tags = true;  // RegisterTaskDefinition and DescribeTaskDefinition answer tags beside it
};
struct TasksResult {
  std::vector<std::shared_ptr<const Task>> tasks;
  std::vector<Failure> failures;
};
struct TaskResult {
  std::shared_ptr<const Task> task;
};
struct InstanceResult {
  std::shared_ptr<const ContainerInstance> instance;
};
struct InstancesResult {
  std::vector<std::shared_ptr<const ContainerInstance>> instances;
  std::vector<Failure> failures;
};
struct AttributeRow {
  std::string name;
  std::optional<std::string> value;
  std::string target_arn;
};
struct AttributesResult {
  std::vector<AttributeRow> attributes;
  std::optional<std::string> next_token;  // ListAttributes only
};
struct ServiceResult {
  std::shared_ptr<const Service> service;
};
struct ServicesResult {
  std::vector<std::shared_ptr<const Service>> services;
  std::vector<Failure> failures;
  bool tags = false;  // DescribeServices include TAGS
};
struct CapacityProviderResult {
  CapacityProvider provider;
};
struct CapacityProvidersResult {
  std::vector<CapacityProvider> providers;
  std::vector<Failure> failures;
  bool tags = false;
  std::optional<std::string> next_token;
};
struct AckResult {};
struct ExplainResult {
  TaskDemand demand;
  std::vector<PlacementStrategy> strategies;  // as placed: the request's, or the default it got
  std::string group;                          // the task group spread counts
  std::vector<InstanceVerdict> instances;
  std::string chosen;  // empty when nothing fits
};

// PageOf: the page of `items` that `page` asks for, under `key` (nextToken when more remain).
ListPage PageOf(const char* key, std::vector<std::string> items, size_t begin, size_t limit);
// PageToken: the nextToken of a page that ends at offset `end` (PageRequest::begin of the next page).
std::string PageToken(size_t end);

}  // namespace gpupack::api
