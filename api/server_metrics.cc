#include "api/server_metrics.h"

namespace gpupack::api {

namespace {

using Samples = std::vector<MetricSample>;

// GpuGauge: a per-GPU gauge over the instances of the current read view.
void AddGpuGauge(MetricsRegistry& metrics, const ControlPlane& cp, const char* name, const char* help,
                 double (*value)(const Gpu&), bool with_mode = false) {
  metrics.AddCollected(name, help, MetricType::kGauge, [&cp, value, with_mode](Samples& out) {
    auto view = cp.applier().View();
    for (const Cluster* c : view->Clusters())
      for (const InstanceRecord* rec : view->InstancesOf(c->name)) {
        if (rec->instance.status == InstanceStatus::kInactive) continue;
        for (const Gpu& g : rec->instance.gpus) {
          MetricLabels labels = {{"cluster", c->name}, {"instance", rec->instance.id}, {"gpu", g.id}};
          if (with_mode) labels.emplace_back("mode", GpuModeName(g.mode));
          out.push_back({std::move(labels), value(g), ""});
        }
      }
  });
}

template <typename F>
void AddOne(MetricsRegistry& metrics, const char* name, const char* help, MetricType type, F read) {
  metrics.AddCollected(name, help, type, [read](Samples& out) { out.push_back({{}, static_cast<double>(read()), ""}); });
}

}  // namespace

void AddControlPlaneMetrics(MetricsRegistry& metrics, const ControlPlane& cp) {
  AddOne(metrics, "gpupack_placements_total", "Tasks placed.", MetricType::kCounter,
         [&cp] { return cp.applier().counters().placements; });
  metrics.AddCollected("gpupack_placement_failures_total",
                       "Placement failures (one per rejected instance) by reason.", MetricType::kCounter,
                       [&cp](Samples& out) {
                         for (const auto& [reason, n] : cp.applier().counters().failures_by_reason)
                           out.push_back({{{"reason", reason}}, static_cast<double>(n), ""});
                       });
  AddGpuGauge(metrics, cp, "gpupack_gpu_memory_total_mib", "GPU memory per GPU.",
              [](const Gpu& g) { return static_cast<double>(g.total_memory_mib); });
  AddGpuGauge(metrics, cp, "gpupack_gpu_memory_allocated_mib", "GPU memory declared by tasks.",
              [](const Gpu& g) { return static_cast<double>(g.total_memory_mib - g.remaining_memory_mib); });
  AddGpuGauge(metrics, cp, "gpupack_gpu_containers", "GPU containers per GPU.",
              [](const Gpu& g) { return static_cast<double>(g.container_count); });
  AddGpuGauge(metrics, cp, "gpupack_gpu_mode", "Sharing mode per GPU.", [](const Gpu&) { return 1.0; }, true);
}

void AddServerMetrics(MetricsRegistry& metrics, const HttpServer& http, const GroupCommitter& committer,
                      const AgentChannel& channel) {
  AddOne(metrics, "gpupack_http_connections_open", "HTTP connections open now.", MetricType::kGauge,
         [&http] { return http.stats().connections_open; });
  AddOne(metrics, "gpupack_http_requests_total", "HTTP requests read, every path.", MetricType::kCounter,
         [&http] { return http.stats().requests; });
  AddOne(metrics, "gpupack_http_websocket_refusals_total",
         "Agent channel upgrades answered 503 because the channel limit was reached.", MetricType::kCounter,
         [&http] { return http.stats().rejected_websockets; });
  AddOne(metrics, "gpupack_http_websocket_queued_bytes", "Bytes queued for sending on all agent channels now.",
         MetricType::kGauge, [&http] { return http.stats().websocket_queued_bytes; });
  AddOne(metrics, "gpupack_http_websocket_overflow_closes_total",
         "Agent channels closed because their send queue passed its bound (a peer that does not read).",
         MetricType::kCounter, [&http] { return http.stats().websocket_overflow_closes; });
  AddOne(metrics, "gpupack_agents_connected", "Agents holding a channel now.", MetricType::kGauge,
         [&channel] { return channel.connected(); });
  AddOne(metrics, "gpupack_store_commits_total", "Store transactions committed (each holds one or more batches).",
         MetricType::kCounter, [&committer] { return committer.stats().commits; });
  AddOne(metrics, "gpupack_store_batches_total", "Write batches committed.", MetricType::kCounter,
         [&committer] { return committer.stats().batches; });
  AddOne(metrics, "gpupack_agent_channel_auth_refusals_total", "Agent channel upgrades refused by authentication.",
         MetricType::kCounter, [&channel] { return channel.auth_refusals(); });
  AddOne(metrics, "gpupack_agent_push_retries_total", "Pushes to agents sent again for want of an ack.",
         MetricType::kCounter, [&channel] { return channel.push_retries(); });
  AddOne(metrics, "gpupack_agent_push_unacked_closes_total",
         "Agent channels closed because a push was never acked.", MetricType::kCounter,
         [&channel] { return channel.push_unacked_closes(); });
}

}  // namespace gpupack::api
