// The agent's own /metrics (`gpupack agent --metrics-listen HOST:PORT`, off by default): the MPS control daemon's
// state, the GPUs it holds after a fault, the watchdog's and fault handling's stops, the latency of every runtime
// call, and each task's GPU memory in use as NVML lists it per client process (the list the watchdog reads),
// summed per container and GPU.
//
// Same conventions as the server's (api/server_metrics.h, docs/operations.md "Metrics"): base units, no label
// named `instance` or `job`, and GPU series labelled `UUID`, `gpu` (the NVML index) and `Hostname` (the name the
// agent registered with, by default the host name), as dcgm-exporter labels its series.
//
//   AgentMetrics metrics(options.name);
//   auto runtime = metrics.TimeRuntime(std::move(raw_runtime));   // before the parts use it
//   ... build GpuHealth, TaskStore ...
//   metrics.Watch({gpus, devices, mps, health, *runtime, store, cluster, instance_arn});
//   auto listener = MetricsListener::Start("127.0.0.1:9400", [&] { return metrics.Render(); });
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/gpu_discovery.h"
#include "agent/gpu_health.h"
#include "agent/managed_task.h"
#include "agent/mps_daemon.h"
#include "agent/runtime.h"
#include "agent/task_store.h"
#include "metrics/registry.h"
#include "base/status.h"

namespace gpupack::agent {

// AgentMetrics owns the agent's registry. Thread-safety: thread-safe; Watch once, before serving.
class AgentMetrics {
 public:
  // AgentMetricsSources: the parts the collected families read at scrape time; all must outlive the scrapes.
  struct Sources {
    GpuDiscovery& gpus;
    const std::vector<GpuDevice>& devices;
    MpsSupervisor& mps;
    GpuHealth& health;
    Runtime& runtime;
    const TaskStore& store;
    std::string cluster;
    std::function<std::string()> instance_arn;  // the container instance's ARN, "" before registration
  };

  explicit AgentMetrics(std::string hostname);
  AgentMetrics(const AgentMetrics&) = delete;
  AgentMetrics& operator=(const AgentMetrics&) = delete;

  // TimeRuntime wraps `inner` so that every call's duration is observed in
  // gpupack_agent_runtime_call_duration_seconds{operation,runtime,result}; the wrapper must not outlive this.
  std::unique_ptr<Runtime> TimeRuntime(std::unique_ptr<Runtime> inner);

  // Watch registers the collected families over `sources`.
  void Watch(Sources sources);

  // CountHealthStop counts a stop that GpuHealth asked for: the watchdog's (a container over its GPU memory or on
  // a GPU it was not given) or a GPU fault's (InfrastructureHealth).
  void CountHealthStop(const StopRequest& request);

  std::string Render() const { return registry_.Render(); }
  MetricsRegistry& registry() { return registry_; }

 private:
  const std::string hostname_;
  MetricsRegistry registry_;
  MetricsRegistry::Histogram& runtime_calls_;
  MetricsRegistry::Counter& health_stops_;
};

// MetricsListener: a GET-only HTTP/1.1 listener that answers GET /metrics with `render()` (text format 0.0.4),
// 404 for other paths and 405 for other methods, one connection at a time with a 5 s read bound and the
// connection closed after each answer. Its thread runs until the object is destroyed.
class MetricsListener {
 public:
  // Start listens on `host_port` ("HOST:PORT"; port 0 picks a free one). An error when it cannot be parsed or
  // bound.
  static Result<std::unique_ptr<MetricsListener>> Start(const std::string& host_port,
                                                        std::function<std::string()> render);
  ~MetricsListener();
  MetricsListener(const MetricsListener&) = delete;
  MetricsListener& operator=(const MetricsListener&) = delete;

  // endpoint: "http://HOST:PORT" with the port bound.
  std::string endpoint() const;

  struct Impl;

 private:
  explicit MetricsListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupack::agent
