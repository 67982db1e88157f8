// The server's /metrics families beyond the request ones (api/ecs_handler.h): placements and refusals, the
// GPUs as the last published read view shows them, and the HTTP server's, store's and agent channel's own
// counters. All are collected at scrape time; none takes the applier's lock for longer than a copy of two
// counters.
#pragma once

#include "api/agent_channel.h"
#include "api/control_plane.h"
#include "api/http_server.h"
#include "api/metrics.h"
#include "storage/group_committer.h"

namespace gpupack::api {

// AddControlPlaneMetrics: gpupack_placements_total, gpupack_placement_failures_total and the per-GPU gauges.
void AddControlPlaneMetrics(MetricsRegistry& metrics, const ControlPlane& control_plane);

// AddServerMetrics: HTTP connections and requests, store commits, agents connected and the channel's counters.
// Every argument must outlive the registry's scrapes.
void AddServerMetrics(MetricsRegistry& metrics, const HttpServer& http, const GroupCommitter& committer,
                      const AgentChannel& channel);

}  // namespace gpupack::api
