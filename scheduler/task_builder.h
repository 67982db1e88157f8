// BuildTask: the one place a placement decision becomes the Task record that is reserved (ClusterState::
// ReserveTask), stored and pushed to the agent. RunTask/StartTask (engine/control_plane.cc), the capacity planner
// (planner/simulation.cc) and the placement benchmark build their tasks here, so they reserve the same thing.
// Pure functions of their arguments.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "scheduler/model.h"

namespace gpupack {

// NewTaskFields: what the caller decides about a new task besides where it goes.
struct NewTaskFields {
  std::string id;            // task id
  std::string arn;           // task ARN
  std::string cluster;       // cluster name
  std::string group;
  std::string started_by;
  std::string client_token;
  EpochMs created_at = 0;
  TaskOverride overrides;
  std::vector<KeyValuePair> tags;
  // container ARN for a container name; null = empty container ARNs (planner, benchmarks)
  std::function<std::string(const std::string& container_name)> container_arn;
};

// BuildTask: the Task record RunTask reserves for a placement: host CPU/memory reserved from the demand,
// GPU reservations (ReservationsFor), one Container per container definition with its image, essential flag,
// and its GPUs (shared: the chosen GPU and gpuSharingStrategy; dedicated: `value` GPUs each, in order).
//
// In detail: task_definition_arn = td.arn, container_instance_arn = instance.arn, reserved = demand's CPU and
// memory; gpu_reservations = ReservationsFor(demand, instance, gpu_indices, n) where n counts the GPU
// requirements of td's containers with `fields.overrides` applied (EffectiveRequirements); containers in td's
// order, each with the overrides applied: a shared GPU requirement gives the container gpu_indices[0] and its
// nvidiaMps settings, a dedicated one `value` (at least 1) of the next unassigned gpu_indices. `demand` is
// DemandOf(td, fields.overrides) as the Placer placed it; `gpu_indices` is Placement::gpu_indices on `instance`.
Task BuildTask(NewTaskFields fields, const TaskDefinition& td, const TaskDemand& demand,
               const ContainerInstance& instance, const std::vector<size_t>& gpu_indices);

// BuildTask without a task definition: the placement part of the record only (reserved, gpu_reservations with
// `gpu_containers` GPU containers sharing a shared GPU, the instance, and the caller's fields); no containers and
// an empty task_definition_arn. For the capacity planner, whose tasks are shapes, not definitions: it reserves
// exactly what the full BuildTask reserves for a definition with `gpu_containers` GPU containers.
Task BuildTask(NewTaskFields fields, const TaskDemand& demand, int gpu_containers,
               const ContainerInstance& instance, const std::vector<size_t>& gpu_indices);

// BuildWaitingTask: the record of a task acknowledged PROVISIONING, before any placement: the caller's fields,
// td's ARN, one Container per container definition (name, ARN, image, essential, and gpuSharingStrategy for a
// shared GPU container, without GPUs), nothing reserved and no instance. BuildTask with the same fields gives the
// record once it is placed.
Task BuildWaitingTask(NewTaskFields fields, const TaskDefinition& td);

// BuildPlacedTask: the record of the waiting task `waiting` (BuildWaitingTask's) once placed: BuildTask with the
// waiting task's own fields (id, ARN, cluster, group, startedBy, clientToken, createdAt, overrides, tags and each
// container's ARN), keeping what only a waiting task has (its provider, place in line, priority, constraints,
// strategies) and its version.
Task BuildPlacedTask(const Task& waiting, const TaskDefinition& td, const TaskDemand& demand,
                     const ContainerInstance& instance, const std::vector<size_t>& gpu_indices);

}  // namespace gpupack
