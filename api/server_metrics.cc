#include "api/server_metrics.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <utility>

#include "engine/core/fragmentation_figures.h"

namespace gpupack::api {

namespace {

using Samples = std::vector<MetricSample>;

// InstanceLabels: the labels of an instance's series (its cluster, id and the host name it registered with).
MetricLabels InstanceLabels(const ContainerInstance& instance) {
  return {{"cluster", instance.cluster}, {"container_instance", instance.id}, {"Hostname", instance.ec2_instance_id}};
}

// GpuLabels: an instance's labels plus the GPU's UUID and index on its host (its place in the registered list,
// which the agent sends in NVML index order), as dcgm-exporter labels its series.
MetricLabels GpuLabels(const ContainerInstance& instance, size_t index) {
  MetricLabels labels = InstanceLabels(instance);
  labels.emplace_back("UUID", instance.gpus[index].id);
  labels.emplace_back("gpu", std::to_string(index));
  return labels;
}

// ForEachLiveInstance calls `f(const ContainerInstance&)` for every instance of the view that is not INACTIVE.
template <typename F>
void ForEachLiveInstance(const ReadView& view, F&& f) {
  for (const Cluster* c : view.Clusters())
    for (const InstanceRecord* rec : view.InstancesOf(c->name))
      if (rec->instance.status != InstanceStatus::kInactive) f(rec->instance);
}

// AddGpuGauge: a per-GPU gauge over the live instances of the current read view.
void AddGpuGauge(MetricsRegistry& metrics, const ControlPlane& cp, const char* name, const char* help,
                 double (*value)(const Gpu&), bool with_mode = false) {
  metrics.AddCollected(name, help, MetricType::kGauge, [&cp, value, with_mode](Samples& out) {
    auto view = cp.applier().View();
    ForEachLiveInstance(*view, [&](const ContainerInstance& inst) {
      for (size_t i = 0; i < inst.gpus.size(); ++i) {
        MetricLabels labels = GpuLabels(inst, i);
        if (with_mode) labels.emplace_back("mode", GpuModeName(inst.gpus[i].mode));
        out.push_back({std::move(labels), value(inst.gpus[i])});
      }
    });
  });
}

// AddInstanceGauge: a per-instance gauge over the live instances of the current read view.
void AddInstanceGauge(MetricsRegistry& metrics, const ControlPlane& cp, const char* name, const char* help,
                      double (*value)(const ContainerInstance&)) {
  metrics.AddCollected(name, help, MetricType::kGauge, [&cp, value](Samples& out) {
    auto view = cp.applier().View();
    ForEachLiveInstance(*view, [&](const ContainerInstance& inst) { out.push_back({InstanceLabels(inst), value(inst)}); });
  });
}

// AddServiceGauge: a per-service gauge over the services of the current read view that are not INACTIVE (ACTIVE and
// DRAINING ones, as ListServices lists them), labelled by cluster and service name, in ARN order.
void AddServiceGauge(MetricsRegistry& metrics, const ControlPlane& cp, const char* name, const char* help,
                     double (*value)(const Service&)) {
  metrics.AddCollected(name, help, MetricType::kGauge, [&cp, value](Samples& out) {
    auto view = cp.applier().View();
    for (const std::string& arn : view->ServiceArns())
      if (auto svc = view->FindService(arn); svc && svc->status != ServiceStatus::kInactive)
        out.push_back({{{"cluster", svc->cluster}, {"service", svc->name}}, value(*svc)});
  });
}

// GpuAllocation: what one container of a live task holds on one GPU.
struct GpuAllocation {
  MetricLabels labels;
  double memory_bytes = 0;   // declared (shared) or the whole GPU (dedicated)
  double compute_ratio = 0;  // the compute ceiling: maxComputePercent / 100 (shared; 1 when absent) or 1
};

// GpuAllocations: every GPU container of every task not yet STOPPED in the view, per GPU it was given.
std::vector<GpuAllocation> GpuAllocations(const ReadView& view) {
  std::vector<GpuAllocation> out;
  view.ForEachTask([&](const Task& t) {
    if (t.last_status == TaskStatus::kStopped || t.resources_released) return;
    const ContainerInstance* inst = view.FindInstance(t.container_instance_arn);
    if (inst == nullptr) return;
    for (const Container& c : t.containers)
      for (const std::string& uuid : c.gpu_ids) {
        size_t index = 0;
        while (index < inst->gpus.size() && inst->gpus[index].id != uuid) ++index;
        if (index == inst->gpus.size()) continue;
        GpuAllocation a;
        a.labels = {{"cluster", t.cluster}, {"task_arn", t.arn}, {"container", c.name}};
        for (auto& l : GpuLabels(*inst, index))
          if (l.first != "cluster") a.labels.push_back(std::move(l));
        a.labels.emplace_back("mode", c.mps ? GpuModeName(GpuMode::kMps) : GpuModeName(GpuMode::kDedicated));
        a.memory_bytes = static_cast<double>(c.mps ? c.mps->memory_mib : inst->gpus[index].total_memory_mib) * kBytesPerMiB;
        a.compute_ratio = c.mps ? c.mps->EffectiveComputePercent() / 100.0 : 1.0;
        out.push_back(std::move(a));
      }
  });
  return out;
}

// AddFragmentationGauge: a fragmentation gauge (engine/core/fragmentation_figures.h) per cluster, and with
// `by_type` per (cluster, instance_type), from figures every family of one scrape shares.
void AddFragmentationGauge(MetricsRegistry& metrics, const ControlPlane& cp,
                           const std::shared_ptr<FragmentationCache>& cache, const char* name,
                           const std::string& help, MiB FreeMemory::*member, bool by_type) {
  metrics.AddCollected(name, help, MetricType::kGauge, [&cp, cache, member, by_type](Samples& out) {
    const auto figures = cache->Get(cp.applier().View(), cp.applier().Now());
    for (const auto& [cluster, f] : *figures) {
      if (!by_type) {
        out.push_back({{{"cluster", cluster}}, static_cast<double>(f.total.*member) * kBytesPerMiB});
        continue;
      }
      for (const auto& [type, m] : f.by_instance_type)
        out.push_back({{{"cluster", cluster}, {"instance_type", type}}, static_cast<double>(m.*member) * kBytesPerMiB});
    }
  });
}

// AddFragmentationMetrics: the largest free GPU-memory block, free and stranded GPU memory, per cluster and per
// instance type, and the smallest recent shared demand they are judged by (docs/operations.md "Fragmentation").
void AddFragmentationMetrics(MetricsRegistry& metrics, const ControlPlane& cp) {
  auto cache = std::make_shared<FragmentationCache>();
  constexpr const char* kHow =
      " Free: a GPU's memory not declared by a task, on ACTIVE instances, GPUs not DEDICATED or held.";
  AddFragmentationGauge(
      metrics, cp, cache, "gpupack_cluster_gpu_largest_free_block_bytes",
      std::string("Largest free GPU memory on one GPU of the cluster: the largest shared task that fits now. Far "
                   "below the free total means the free memory is fragmented.") + kHow,
      &FreeMemory::largest_block, false);
  AddFragmentationGauge(
      metrics, cp, cache, "gpupack_instance_type_gpu_largest_free_block_bytes",
      std::string("Largest free GPU memory on one GPU, per cluster and instance type (ecs.instance-type; empty "
                   "when none was registered).") + kHow,
      &FreeMemory::largest_block, true);
  AddFragmentationGauge(metrics, cp, cache, "gpupack_cluster_gpu_memory_free_bytes",
                        std::string("Free GPU memory of the cluster, summed over its GPUs.") + kHow,
                        &FreeMemory::free, false);
  AddFragmentationGauge(
      metrics, cp, cache, "gpupack_cluster_gpu_memory_stranded_bytes",
      std::string("Free GPU memory in pieces too small for every task shape the cluster saw lately (tasks "
                   "created in the last hour): below the smallest shared task, and not a whole IDLE GPU when "
                   "dedicated tasks were seen. 0 when no GPU task was created in the hour. Divide by "
                   "gpupack_cluster_gpu_memory_free_bytes for the share of free memory that is unusable now.") + kHow,
      &FreeMemory::stranded, false);
  AddFragmentationGauge(metrics, cp, cache, "gpupack_instance_type_gpu_memory_stranded_bytes",
                        "Stranded GPU memory (as gpupack_cluster_gpu_memory_stranded_bytes) per cluster and "
                        "instance type.",
                        &FreeMemory::stranded, true);
  metrics.AddCollected("gpupack_cluster_recent_smallest_gpu_demand_bytes",
                       "The smallest shared task (its nvidiaMps memory on one GPU) the cluster saw created in the "
                       "last hour: free pieces below it are stranded. Absent for a cluster without one.",
                       MetricType::kGauge, [&cp, cache](Samples& out) {
                         const auto figures = cache->Get(cp.applier().View(), cp.applier().Now());
                         for (const auto& [cluster, f] : *figures)
                           if (f.smallest_recent_demand)
                             out.push_back({{{"cluster", cluster}},
                                            static_cast<double>(*f.smallest_recent_demand) * kBytesPerMiB});
                       });
}

// PairCounter: a counter family keyed by (cluster, reason) in the placement counters.
void AddPairCounter(MetricsRegistry& metrics, const ControlPlane& cp, const char* name, const char* help,
                    std::map<std::pair<std::string, std::string>, uint64_t> PlacementCounters::*member) {
  metrics.AddCollected(name, help, MetricType::kCounter, [&cp, member](Samples& out) {
    const PlacementCounters counters = cp.applier().counters();
    for (const auto& [key, n] : counters.*member)
      out.push_back({{{"cluster", key.first}, {"reason", key.second}}, static_cast<double>(n)});
  });
}

// AddQueueMetrics: the capacity-provider lines: how many tasks wait now, and how long the placed ones waited.
void AddQueueMetrics(MetricsRegistry& metrics, const ControlPlane& cp) {
  metrics.AddCollected("gpupack_capacity_provider_waiting_tasks",
                       "Tasks waiting in PROVISIONING for a capacity provider's capacity now, by cluster and provider.",
                       MetricType::kGauge, [&cp](Samples& out) {
                         for (const auto& [key, n] : cp.applier().counters().waiting)
                           out.push_back({{{"cluster", key.first}, {"capacity_provider", key.second}},
                                          static_cast<double>(n)});
                       });
  metrics.AddCollected(
      "gpupack_capacity_provider_wait_seconds",
      "How long the tasks placed from a capacity provider's line waited, from RunTask's PROVISIONING answer to "
      "their placement, by provider.",
      MetricType::kHistogram, [&cp](Samples& out) {
        for (const auto& [provider, h] : cp.applier().counters().waits) {
          uint64_t cumulative = 0;
          for (size_t b = 0; b < h.buckets.size(); ++b) {
            cumulative += h.buckets[b];
            char le[32];
            std::snprintf(le, sizeof le, "%g", b < std::size(kWaitBucketsSeconds) ? kWaitBucketsSeconds[b] : 0.0);
            out.push_back({{{"capacity_provider", provider},
                            {"le", b < std::size(kWaitBucketsSeconds) ? std::string(le) : std::string("+Inf")}},
                           static_cast<double>(cumulative), "_bucket"});
          }
          out.push_back({{{"capacity_provider", provider}}, h.sum_seconds, "_sum"});
          out.push_back({{{"capacity_provider", provider}}, static_cast<double>(h.count), "_count"});
        }
      });
}

template <typename F>
void AddOne(MetricsRegistry& metrics, const char* name, const char* help, MetricType type, F read) {
  metrics.AddCollected(name, help, type, [read](Samples& out) { out.push_back({{}, static_cast<double>(read())}); });
}

// TimedStore: the Store that TimeStoreCommits returns.
class TimedStore final : public Store {
 public:
  TimedStore(Store& store, MetricsRegistry::Histogram& durations) : store_(store), durations_(durations) {}
  Result<Snapshot> Load() override { return store_.Load(); }
  Result<Snapshot> LoadStreaming(const TaskSink& on_task) override { return store_.LoadStreaming(on_task); }
  Status Commit(const WriteBatch& batch) override {
    const auto start = std::chrono::steady_clock::now();
    Status s = store_.Commit(batch);
    durations_.Observe({{"result", s.ok() ? "ok" : "error"}},
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return s;
  }

 private:
  Store& store_;
  MetricsRegistry::Histogram& durations_;
};

}  // namespace

void AddControlPlaneMetrics(MetricsRegistry& metrics, const ControlPlane& cp, bool per_task) {
  AddOne(metrics, "gpupack_placements_total", "Tasks placed.", MetricType::kCounter,
         [&cp] { return cp.applier().counters().placements; });
  AddPairCounter(metrics, cp, "gpupack_placement_failures_total",
                 "Tasks that RunTask or StartTask did not place, by cluster and reason (the reason most instances "
                 "refused the task for).",
                 &PlacementCounters::tasks_not_placed);
  AddPairCounter(metrics, cp, "gpupack_placement_instance_refusals_total",
                 "Placement refusals by an instance (one per instance per task not placed), by cluster and reason.",
                 &PlacementCounters::instance_refusals);
  metrics.AddCollected("gpupack_tasks", "Tasks the server keeps, by cluster and last status (STOPPED ones until "
                       "they expire).", MetricType::kGauge, [&cp](Samples& out) {
    auto view = cp.applier().View();
    std::map<std::string, std::map<TaskStatus, int64_t>> counts;
    for (const Cluster* c : view->Clusters())
      for (TaskStatus s : {TaskStatus::kPending, TaskStatus::kRunning, TaskStatus::kStopped}) counts[c->name][s] = 0;
    view->ForEachTask([&counts](const Task& t) { ++counts[t.cluster][t.last_status]; });
    for (const auto& [cluster, by_status] : counts)
      for (const auto& [status, n] : by_status)
        out.push_back({{{"cluster", cluster}, {"status", Name(status)}}, static_cast<double>(n)});
  });
  AddInstanceGauge(metrics, cp, "gpupack_instance_agent_connected",
                   "1 while the instance's agent holds its channel (or, without a channel, is taken as up), else 0.",
                   [](const ContainerInstance& i) { return i.agent_connected ? 1.0 : 0.0; });
  AddInstanceGauge(metrics, cp, "gpupack_instance_impaired",
                   "1 while the agent reports its MPS control daemon not answering (nothing is placed), else 0.",
                   [](const ContainerInstance& i) { return i.impaired ? 1.0 : 0.0; });
  AddGpuGauge(metrics, cp, "gpupack_gpu_memory_total_bytes", "GPU memory the agent registered per GPU.",
              [](const Gpu& g) { return static_cast<double>(g.total_memory_mib) * kBytesPerMiB; });
  AddGpuGauge(metrics, cp, "gpupack_gpu_memory_allocated_bytes",
              "GPU memory declared by the tasks on the GPU that are not STOPPED (registered total minus remaining).",
              [](const Gpu& g) { return static_cast<double>(g.total_memory_mib - g.remaining_memory_mib) * kBytesPerMiB; });
  AddGpuGauge(metrics, cp, "gpupack_gpu_compute_allocated_ratio",
              "Sum of the compute ceilings (maxComputePercent / 100) of the shared containers on the GPU.",
              [](const Gpu& g) { return g.compute_used_percent / 100.0; });
  AddGpuGauge(metrics, cp, "gpupack_gpu_containers", "GPU containers per GPU.",
              [](const Gpu& g) { return static_cast<double>(g.container_count); });
  AddGpuGauge(metrics, cp, "gpupack_gpu_held", "1 while the agent holds the GPU after a fault (nothing is placed), else 0.",
              [](const Gpu& g) { return g.held ? 1.0 : 0.0; });
  AddGpuGauge(metrics, cp, "gpupack_gpu_mode", "Sharing mode per GPU (always 1; the mode is the label).",
              [](const Gpu&) { return 1.0; }, true);
  AddServiceGauge(metrics, cp, "gpupack_service_desired_tasks",
                  "Tasks the service wants running (desiredCount; a DAEMON service's: one per eligible instance).",
                  [](const Service& s) { return static_cast<double>(s.desired_count); });
  AddServiceGauge(metrics, cp, "gpupack_service_running_tasks",
                  "The service's tasks RUNNING and not being stopped (runningCount).",
                  [](const Service& s) { return static_cast<double>(s.running_count); });
  AddServiceGauge(metrics, cp, "gpupack_service_pending_tasks",
                  "The service's tasks placed and not yet RUNNING (pendingCount); tasks it could not place are "
                  "not counted.",
                  [](const Service& s) { return static_cast<double>(s.pending_count); });
  AddServiceGauge(metrics, cp, "gpupack_service_deployments_in_progress",
                  "The service's deployments whose rolloutState is IN_PROGRESS.", [](const Service& s) {
                    return static_cast<double>(std::count_if(
                        s.deployments.begin(), s.deployments.end(),
                        [](const ServiceDeployment& d) { return d.rollout_state == RolloutState::kInProgress; }));
                  });
  AddFragmentationMetrics(metrics, cp);
  AddQueueMetrics(metrics, cp);
  if (!per_task) return;  // the task ARNs and container names are asked for, never shown by default
  metrics.AddCollected("gpupack_task_gpu_memory_allocated_bytes",
                       "GPU memory a container of a task not yet STOPPED holds on a GPU: what it declared (shared) or "
                       "the whole GPU (dedicated).",
                       MetricType::kGauge, [&cp](Samples& out) {
                         for (auto& a : GpuAllocations(*cp.applier().View())) out.push_back({std::move(a.labels), a.memory_bytes});
                       });
  metrics.AddCollected("gpupack_task_gpu_compute_limit_ratio",
                       "Compute ceiling of a container of a task not yet STOPPED on a GPU: maxComputePercent / 100 "
                       "(shared; 1 when not declared) or 1 (dedicated).",
                       MetricType::kGauge, [&cp](Samples& out) {
                         for (auto& a : GpuAllocations(*cp.applier().View())) out.push_back({std::move(a.labels), a.compute_ratio});
                       });
}

void AddServerMetrics(MetricsRegistry& metrics, const HttpServer& http, const GroupCommitter& committer,
                      const AgentChannel& channel) {
  AddOne(metrics, "gpupack_http_connections_open", "HTTP connections open now.", MetricType::kGauge,
         [&http] { return http.stats().connections_open; });
  AddOne(metrics, "gpupack_http_requests_total", "HTTP requests read, every path.", MetricType::kCounter,
         [&http] { return http.stats().requests; });
  AddOne(metrics, "gpupack_http_connection_refusals_total",
         "HTTP connections answered 503 at accept: too many open in all, or from one client address.",
         MetricType::kCounter, [&http] {
           const auto s = http.stats();
           return s.rejected_connections + s.rejected_address_connections;
         });
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
  AddOne(metrics, "gpupack_store_failed_batches_total", "Write batches whose commit failed.", MetricType::kCounter,
         [&committer] { return committer.stats().failed_batches; });
  AddOne(metrics, "gpupack_agent_channel_auth_refusals_total", "Agent channel upgrades refused by authentication.",
         MetricType::kCounter, [&channel] { return channel.auth_refusals(); });
  AddOne(metrics, "gpupack_agent_push_retries_total", "Pushes to agents sent again for want of an ack.",
         MetricType::kCounter, [&channel] { return channel.push_retries(); });
  AddOne(metrics, "gpupack_agent_heartbeats_unchanged_total",
         "Agent heartbeats that changed nothing, acked from the read view without the writer.", MetricType::kCounter,
         [&channel] { return channel.heartbeats_from_view(); });
  AddOne(metrics, "gpupack_agent_heartbeats_written_total",
         "Agent heartbeats applied by the writer (they changed the instance, or followed a write not yet in view).",
         MetricType::kCounter, [&channel] { return channel.heartbeats_written(); });
  AddOne(metrics, "gpupack_agent_push_unacked_closes_total",
         "Agent channels closed because a push was never acked.", MetricType::kCounter,
         [&channel] { return channel.push_unacked_closes(); });
}

std::unique_ptr<Store> TimeStoreCommits(Store& store, MetricsRegistry& metrics) {
  auto& durations = metrics.AddHistogram(
      "gpupack_store_commit_duration_seconds", "Store commit latency (one per store transaction) by result.",
      {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5});
  return std::make_unique<TimedStore>(store, durations);
}

}  // namespace gpupack::api
