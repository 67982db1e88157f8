#include "scheduler/task_builder.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "scheduler/cluster_state.h"
#include "scheduler/placement.h"

namespace gpupack {

namespace {

// FromFields: a task record with the caller's fields and nothing placed.
Task FromFields(NewTaskFields& fields) {
  Task t;
  t.id = std::move(fields.id);
  t.arn = std::move(fields.arn);
  t.cluster = std::move(fields.cluster);
  t.group = std::move(fields.group);
  t.started_by = std::move(fields.started_by);
  t.created_at = fields.created_at;
  t.overrides = std::move(fields.overrides);
  t.tags = std::move(fields.tags);
  t.client_token = std::move(fields.client_token);
  return t;
}

}  // namespace

Task BuildTask(NewTaskFields fields, const TaskDemand& demand, int gpu_containers, const ContainerInstance& instance,
               const std::vector<size_t>& gpu_indices) {
  Task t = FromFields(fields);
  t.container_instance_arn = instance.arn;
  t.reserved = {demand.cpu, demand.memory};
  t.gpu_reservations = ReservationsFor(demand, instance, gpu_indices, gpu_containers);
  return t;
}

Task BuildTask(NewTaskFields fields, const TaskDefinition& td, const TaskDemand& demand,
               const ContainerInstance& instance, const std::vector<size_t>& gpu_indices) {
  int gpu_containers = 0;
  for (const auto& cd : td.containers)
    for (const auto& r : EffectiveRequirements(cd, OverrideFor(fields.overrides, cd.name)))
      if (r.type == "GPU") ++gpu_containers;
  const auto container_arn = std::move(fields.container_arn);
  Task t = BuildTask(std::move(fields), demand, gpu_containers, instance, gpu_indices);
  t.task_definition_arn = td.arn;
  // Dedicated GPU containers take the placement's GPUs in order, `value` each.
  size_t next_dedicated = 0;
  for (const auto& cd : td.containers) {
    Container c;
    c.name = cd.name;
    if (container_arn) c.container_arn = container_arn(cd.name);
    c.image = cd.image;
    c.essential = cd.essential;
    for (const auto& r : EffectiveRequirements(cd, OverrideFor(t.overrides, cd.name))) {
      if (r.type != "GPU") continue;
      if (r.mps) {
        c.mps = r.mps;
        c.gpu_ids = {instance.gpus[gpu_indices.at(0)].id};
      } else if (r.value) {
        int n = std::max(1, std::atoi(r.value->c_str()));
        for (int k = 0; k < n && next_dedicated < gpu_indices.size(); ++k)
          c.gpu_ids.push_back(instance.gpus[gpu_indices[next_dedicated++]].id);
      }
    }
    t.containers.push_back(std::move(c));
  }
  return t;
}

Task BuildWaitingTask(NewTaskFields fields, const TaskDefinition& td) {
  Task t = FromFields(fields);
  t.task_definition_arn = td.arn;
  t.last_status = TaskStatus::kProvisioning;
  t.resources_released = true;  // it holds nothing yet
  for (const auto& cd : td.containers) {
    Container c;
    c.name = cd.name;
    if (fields.container_arn) c.container_arn = fields.container_arn(cd.name);
    c.image = cd.image;
    c.essential = cd.essential;
    for (const auto& r : EffectiveRequirements(cd, OverrideFor(t.overrides, cd.name)))
      if (r.type == "GPU" && r.mps) c.mps = r.mps;
    t.containers.push_back(std::move(c));
  }
  return t;
}

Task BuildPlacedTask(const Task& waiting, const TaskDefinition& td, const TaskDemand& demand,
                     const ContainerInstance& instance, const std::vector<size_t>& gpu_indices) {
  NewTaskFields fields;
  fields.id = waiting.id;
  fields.arn = waiting.arn;
  fields.cluster = waiting.cluster;
  fields.group = waiting.group;
  fields.started_by = waiting.started_by;
  fields.client_token = waiting.client_token;
  fields.created_at = waiting.created_at;
  fields.overrides = waiting.overrides;
  fields.tags = waiting.tags;
  fields.container_arn = [&waiting](const std::string& name) {
    for (const auto& c : waiting.containers)
      if (c.name == name) return c.container_arn;
    return std::string();
  };
  Task placed = BuildTask(std::move(fields), td, demand, instance, gpu_indices);
  placed.capacity_provider_name = waiting.capacity_provider_name;
  placed.wait_seq = waiting.wait_seq;
  placed.priority = waiting.priority;
  placed.placement_constraints = waiting.placement_constraints;
  placed.placement_strategy = waiting.placement_strategy;
  placed.version = waiting.version;
  return placed;
}

}  // namespace gpupack
