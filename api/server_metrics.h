// The server's /metrics families beyond the request ones (api/ecs/ecs_handler.h): placements and refusals, tasks by
// status, the instances and their GPUs, the services' replicas and the tasks' GPU allocations as the last
// published read view shows them, store commit latency, and the HTTP server's, store's and agent channel's own
// counters. All but the commit latency are collected at scrape time; none waits for the writer thread (the
// counters are the copy it published).
//
// Conventions (docs/operations.md "Metrics"): base units (`_bytes`, `_seconds`, `_ratio`); no label named
// `instance` or `job` (Prometheus sets those on every series it scrapes); GPU series carry `UUID` (the GPU's
// UUID), `gpu` (its index on its host) and `Hostname` (the name its agent registered with: the instance's
// ec2InstanceId), the labels dcgm-exporter puts on its series, so the two join without relabelling.
#pragma once

#include <memory>

#include "api/channel/agent_channel.h"
#include "engine/control_plane.h"
#include "api/http/http_server.h"
#include "metrics/registry.h"
#include "storage/group_committer.h"
#include "storage/store.h"

namespace gpupack::api {

// kBytesPerMiB: MiB figures of the model become bytes in /metrics.
inline constexpr double kBytesPerMiB = 1048576.0;

// AddControlPlaneMetrics: placements and placement failures, tasks by status, instance and per-GPU gauges, and
// per service (not INACTIVE) its desired, running and pending tasks and its deployments in progress, all from the
// control plane's current read view or counters; with `per_task` (gpupack server --metrics-per-task)
// also the per-task GPU allocations (gpupack_task_gpu_memory_allocated_bytes and
// gpupack_task_gpu_compute_limit_ratio), whose labels name each task's ARN and container: /metrics is served
// without a signature, so by default it names no task and no container (docs/security.md).
void AddControlPlaneMetrics(MetricsRegistry& metrics, const ControlPlane& control_plane, bool per_task = false);

// AddServerMetrics: HTTP connections and requests, store commits, agents connected and the channel's counters.
// Every argument must outlive the registry's scrapes.
void AddServerMetrics(MetricsRegistry& metrics, const HttpServer& http, const GroupCommitter& committer,
                      const AgentChannel& channel);

// TimeStoreCommits wraps `store` so that every Commit's duration is observed in
// gpupack_store_commit_duration_seconds (registered in `metrics` here). Loads pass through untimed. The wrapper
// is as thread-safe as `store`; `store` and `metrics` must outlive it.
std::unique_ptr<Store> TimeStoreCommits(Store& store, MetricsRegistry& metrics);

}  // namespace gpupack::api
