#include "agent/agent_metrics.h"

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace gpupack::agent {

namespace {

using Samples = std::vector<MetricSample>;
using Clock = std::chrono::steady_clock;

constexpr double kBytesPerMiB = 1048576.0;

// TimedRuntime: the Runtime of AgentMetrics::TimeRuntime. Thread-safe as the runtime it wraps.
class TimedRuntime final : public Runtime {
 public:
  TimedRuntime(std::unique_ptr<Runtime> inner, MetricsRegistry::Histogram& calls)
      : inner_(std::move(inner)), calls_(calls), name_(inner_->Name()) {}

  std::string Name() const override { return name_; }
  Result<std::string> Start(const ContainerSpec& spec) override {
    return Timed("start", [&] { return inner_->Start(spec); });
  }
  Result<ContainerStatus> Inspect(const std::string& id) override {
    return Timed("inspect", [&] { return inner_->Inspect(id); });
  }
  Status Stop(const std::string& id, std::chrono::milliseconds grace) override {
    return Timed("stop", [&] { return inner_->Stop(id, grace); });
  }
  Status Remove(const std::string& id) override {
    return Timed("remove", [&] { return inner_->Remove(id); });
  }
  Result<std::vector<RuntimeContainer>> List() override {
    return Timed("list", [&] { return inner_->List(); });
  }
  Status CollectLogs(const std::string& task_arn, const std::string& container_name) override {
    return Timed("logs", [&] { return inner_->CollectLogs(task_arn, container_name); });
  }
  std::map<uint32_t, std::string> Owners(const std::vector<uint32_t>& pids) override {
    const auto start = Clock::now();
    auto owners = inner_->Owners(pids);
    Observe("owners", start, true);
    return owners;
  }

 private:
  template <typename F>
  auto Timed(const char* operation, F call) -> decltype(call()) {
    const auto start = Clock::now();
    auto result = call();
    Observe(operation, start, result.ok());
    return result;
  }
  void Observe(const char* operation, Clock::time_point start, bool ok) {
    calls_.Observe({{"operation", operation}, {"runtime", name_}, {"result", ok ? "ok" : "error"}},
                   std::chrono::duration<double>(Clock::now() - start).count());
  }

  std::unique_ptr<Runtime> inner_;
  MetricsRegistry::Histogram& calls_;
  const std::string name_;
};

// GpuMemoryReading: one reading of the GPU processes (NVML), attributed to the running containers as the
// watchdog attributes them (Runtime::Owners), in bytes.
struct GpuMemoryReading {
  struct Container {
    std::string arn, name, gpu_uuid;
    double used_bytes = 0;
    std::optional<double> limit_bytes;  // what a shared container declared; none for a dedicated GPU
  };
  bool ok = false;
  std::vector<Container> containers;             // per running container and GPU it was given or uses
  std::map<std::string, double> unattributed;    // GPU UUID -> bytes of processes of no container of ours
};

GpuMemoryReading ReadGpuMemory(GpuDiscovery& gpus, Runtime& runtime, const TaskStore& store) {
  struct Running {
    std::string arn, name, runtime_id;
    std::vector<std::string> gpu_ids;
    std::optional<MiB> declared;
  };
  std::vector<Running> running;
  store.Visit([&running](const TaskRecord& r) {
    if (r.report.status != protocol::TaskStatus::kRunning) return;
    for (size_t i = 0; i < r.report.containers.size() && i < r.assignment.containers.size(); ++i) {
      if (r.report.containers[i].status != protocol::TaskStatus::kRunning || i >= r.runtime_ids.size()) continue;
      const auto& a = r.assignment.containers[i];
      if (a.gpu_ids.empty()) continue;
      std::optional<MiB> declared;
      if (a.mps) declared = a.mps->memory_mib;
      running.push_back({r.arn(), a.name, r.runtime_ids[i], a.gpu_ids, declared});
    }
  });
  GpuMemoryReading reading;
  auto processes = gpus.Processes();
  if (!processes.ok()) return reading;
  reading.ok = true;
  std::vector<uint32_t> pids;
  for (const auto& p : *processes) pids.push_back(p.pid);
  const auto owners = pids.empty() ? std::map<uint32_t, std::string>{} : runtime.Owners(pids);
  std::map<std::string, std::map<std::string, double>> used;  // runtime id -> GPU UUID -> bytes
  for (const auto& p : *processes) {
    const double bytes = static_cast<double>(p.used_mib) * kBytesPerMiB;
    if (auto it = owners.find(p.pid); it != owners.end()) used[it->second][p.gpu_uuid] += bytes;
    else reading.unattributed[p.gpu_uuid] += bytes;
  }
  for (const Running& c : running) {
    std::map<std::string, double> per_gpu;  // the GPUs it was given (0 when idle) and any other it uses
    for (const auto& g : c.gpu_ids) per_gpu[g] = 0;
    if (auto u = used.find(c.runtime_id); u != used.end())
      for (const auto& [gpu, bytes] : u->second) per_gpu[gpu] += bytes;
    for (const auto& [gpu, bytes] : per_gpu) {
      GpuMemoryReading::Container out{c.arn, c.name, gpu, bytes, std::nullopt};
      if (c.declared) out.limit_bytes = static_cast<double>(*c.declared) * kBytesPerMiB;
      reading.containers.push_back(std::move(out));
    }
  }
  return reading;
}

// ReadingCache: one GPU memory reading shared by the families of one scrape (a reading newer than kFresh is
// reused), so a scrape lists the processes once.
class ReadingCache {
 public:
  static constexpr std::chrono::milliseconds kFresh{500};
  GpuMemoryReading Get(GpuDiscovery& gpus, Runtime& runtime, const TaskStore& store) {
    std::lock_guard lock(mu_);
    if (!at_ || Clock::now() - *at_ > kFresh) {
      reading_ = ReadGpuMemory(gpus, runtime, store);
      at_ = Clock::now();
    }
    return reading_;
  }

 private:
  std::mutex mu_;
  std::optional<Clock::time_point> at_;  // guarded by mu_
  GpuMemoryReading reading_;             // guarded by mu_
};

}  // namespace

AgentMetrics::AgentMetrics(std::string hostname)
    : hostname_(std::move(hostname)),
      runtime_calls_(registry_.AddHistogram(
          "gpupack_agent_runtime_call_duration_seconds",
          "Container runtime call latency by operation (start creates and starts), runtime and result.",
          {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30})),
      health_stops_(registry_.AddCounter(
          "gpupack_agent_health_stops_total",
          "Tasks the agent stopped on its own, by cause: watchdog (a container over its declared GPU memory or on "
          "a GPU it was not given) or gpu_fault (a fatal GPU error).")) {
  health_stops_.Inc({{"Hostname", hostname_}, {"cause", "watchdog"}}, 0);
  health_stops_.Inc({{"Hostname", hostname_}, {"cause", "gpu_fault"}}, 0);
}

std::unique_ptr<Runtime> AgentMetrics::TimeRuntime(std::unique_ptr<Runtime> inner) {
  return std::make_unique<TimedRuntime>(std::move(inner), runtime_calls_);
}

void AgentMetrics::CountHealthStop(const StopRequest& request) {
  if (request.code == protocol::StopCode::kInfrastructureHealth)
    health_stops_.Inc({{"Hostname", hostname_}, {"cause", "gpu_fault"}});
  else if (request.watchdog)
    health_stops_.Inc({{"Hostname", hostname_}, {"cause", "watchdog"}});
}

void AgentMetrics::Watch(Sources src) {
  auto s = std::make_shared<Sources>(std::move(src));
  auto cache = std::make_shared<ReadingCache>();
  const std::string host = hostname_;
  auto gpu_labels = [s, host](const std::string& uuid) {
    std::string index;
    for (const auto& d : s->devices)
      if (d.uuid == uuid) index = std::to_string(d.index);
    return MetricLabels{{"Hostname", host}, {"UUID", uuid}, {"gpu", index}};
  };
  auto one = [host](bool v) { return Samples{{{{"Hostname", host}}, v ? 1.0 : 0.0}}; };

  registry_.AddCollected("gpupack_agent_info", "The agent: always 1; its cluster, instance and runtime are the labels.",
                         MetricType::kGauge, [s, host](Samples& out) {
                           const std::string arn = s->instance_arn ? s->instance_arn() : "";
                           out.push_back({{{"Hostname", host},
                                           {"cluster", s->cluster},
                                           {"container_instance", arn.substr(arn.rfind('/') + 1)},
                                           {"runtime", s->runtime.Name()}},
                                          1});
                         });
  registry_.AddCollected("gpupack_agent_mps_daemon_serving",
                         "1 when the MPS control daemon answered its last scheduled probe, else 0.", MetricType::kGauge,
                         [s, one](Samples& out) { out = one(s->health.mps_serving()); });
  registry_.AddCollected("gpupack_agent_mps_daemon_impaired",
                         "1 while the MPS control daemon failed its last probes in a row (the instance is impaired: "
                         "the server places nothing there), else 0.",
                         MetricType::kGauge, [s, one](Samples& out) { out = one(s->mps.impaired()); });
  registry_.AddCollected("gpupack_agent_mps_probe_failures", "MPS control daemon probes failed in a row now.",
                         MetricType::kGauge, [s, host](Samples& out) {
                           out.push_back({{{"Hostname", host}}, static_cast<double>(s->mps.consecutive_failures())});
                         });
  registry_.AddCollected("gpupack_agent_gpu_memory_total_bytes", "GPU memory per GPU as NVML reports it.",
                         MetricType::kGauge, [s, gpu_labels](Samples& out) {
                           for (const auto& d : s->devices)
                             out.push_back({gpu_labels(d.uuid), static_cast<double>(d.total_mib) * kBytesPerMiB});
                         });
  registry_.AddCollected("gpupack_agent_gpu_held",
                         "1 while the agent holds the GPU after a fault (until it recovered), else 0.",
                         MetricType::kGauge, [s, gpu_labels](Samples& out) {
                           for (const auto& d : s->devices) out.push_back({gpu_labels(d.uuid), s->health.Held(d.uuid) ? 1.0 : 0.0});
                         });
  registry_.AddCollected("gpupack_agent_tasks", "Tasks the agent keeps a record of, by status.", MetricType::kGauge,
                         [s, host](Samples& out) {
                           std::map<std::string, double> counts = {{"PENDING", 0}, {"RUNNING", 0}, {"STOPPED", 0}};
                           s->store.Visit([&counts](const TaskRecord& r) { ++counts[protocol::Name(r.report.status)]; });
                           for (const auto& [status, n] : counts) out.push_back({{{"Hostname", host}, {"status", status}}, n});
                         });
  registry_.AddCollected("gpupack_agent_gpu_memory_reading_ok",
                         "1 when the GPU processes could be read (NVML) at this scrape, else 0.", MetricType::kGauge,
                         [s, cache, one](Samples& out) { out = one(cache->Get(s->gpus, s->runtime, s->store).ok); });
  auto task_labels = [host, gpu_labels](const GpuMemoryReading::Container& c) {
    MetricLabels labels = {{"task_arn", c.arn}, {"container", c.name}};
    for (auto& l : gpu_labels(c.gpu_uuid)) labels.push_back(std::move(l));
    return labels;
  };
  registry_.AddCollected("gpupack_agent_task_gpu_memory_used_bytes",
                         "GPU memory a running container's processes use on a GPU, as NVML lists it per process "
                         "(the watchdog's reading), summed per container and GPU.",
                         MetricType::kGauge, [s, cache, task_labels](Samples& out) {
                           for (const auto& c : cache->Get(s->gpus, s->runtime, s->store).containers)
                             out.push_back({task_labels(c), c.used_bytes});
                         });
  registry_.AddCollected("gpupack_agent_task_gpu_memory_limit_bytes",
                         "GPU memory a running shared container declared on its GPU (its MPS limit; none for a "
                         "dedicated GPU).",
                         MetricType::kGauge, [s, cache, task_labels](Samples& out) {
                           for (const auto& c : cache->Get(s->gpus, s->runtime, s->store).containers)
                             if (c.limit_bytes) out.push_back({task_labels(c), *c.limit_bytes});
                         });
  registry_.AddCollected("gpupack_agent_gpu_memory_unattributed_bytes",
                         "GPU memory used by processes of no container of this agent, per GPU.", MetricType::kGauge,
                         [s, cache, gpu_labels](Samples& out) {
                           const auto reading = cache->Get(s->gpus, s->runtime, s->store);
                           for (const auto& d : s->devices) {
                             auto it = reading.unattributed.find(d.uuid);
                             out.push_back({gpu_labels(d.uuid), it == reading.unattributed.end() ? 0.0 : it->second});
                           }
                         });
}

// ---- MetricsListener --------------------------------------------------------------------------------------

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// Impl: the io_context, its one thread and the acceptor; connections are served one after another.
struct MetricsListener::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::function<std::string()> render;
  std::string endpoint;
  std::thread thread;

  void Accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (!ec) Serve(std::make_shared<beast::tcp_stream>(std::move(socket)));
      else Accept();
    });
  }

  // Serve reads one request (bounded in time and size), answers it, closes, then accepts the next connection.
  void Serve(std::shared_ptr<beast::tcp_stream> stream) {
    auto buffer = std::make_shared<beast::flat_buffer>();
    auto parser = std::make_shared<http::request_parser<http::string_body>>();
    parser->header_limit(8192);
    parser->body_limit(1024);
    stream->expires_after(std::chrono::seconds(5));
    http::async_read(*stream, *buffer, *parser, [this, stream, buffer, parser](beast::error_code ec, size_t) {
      if (ec) {
        Close(*stream);
        return;
      }
      const auto& req = parser->get();
      auto res = std::make_shared<http::response<http::string_body>>();
      res->version(11);
      res->keep_alive(false);
      const std::string_view target(req.target().data(), req.target().size());
      const std::string_view path = target.substr(0, target.find('?'));
      if (req.method() != http::verb::get && req.method() != http::verb::head) {
        res->result(http::status::method_not_allowed);
        res->set(http::field::allow, "GET, HEAD");
        res->set(http::field::content_type, "text/plain");
        res->body() = "only GET /metrics is served here\n";
      } else if (path != "/metrics") {
        res->result(http::status::not_found);
        res->set(http::field::content_type, "text/plain");
        res->body() = "not found: the agent serves GET /metrics\n";
      } else {
        res->result(http::status::ok);
        res->set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
        res->body() = render();
      }
      res->prepare_payload();
      if (req.method() == http::verb::head) res->body().clear();
      http::async_write(*stream, *res, [this, stream, res](beast::error_code, size_t) { Close(*stream); });
    });
  }

  void Close(beast::tcp_stream& stream) {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
    Accept();
  }
};

Result<std::unique_ptr<MetricsListener>> MetricsListener::Start(const std::string& host_port,
                                                               std::function<std::string()> render) {
  const auto bad = [&](const std::string& why) {
    return Status::InvalidParameter("--metrics-listen " + host_port + ": " + why + " (expected HOST:PORT, e.g. "
                                    "127.0.0.1:9400)");
  };
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("no HOST:PORT");
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = host_port.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) > 65535)
    return bad("the port must be 0 to 65535");
  auto impl = std::make_unique<Impl>();
  impl->render = std::move(render);
  beast::error_code ec;
  tcp::resolver resolver(impl->io);
  auto results = resolver.resolve(host, port, tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) return bad("cannot resolve " + host + ": " + ec.message());
  const tcp::endpoint ep = *results.begin();
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return bad("cannot listen: " + ec.message());
  const tcp::endpoint bound = impl->acceptor.local_endpoint();
  const std::string address = bound.address().to_string();
  impl->endpoint = "http://" + (bound.address().is_v6() ? "[" + address + "]" : address) + ":" +
                   std::to_string(bound.port());
  impl->Accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<MetricsListener>(new MetricsListener(std::move(impl)));
}

MetricsListener::MetricsListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsListener::~MetricsListener() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string MetricsListener::endpoint() const { return impl_->endpoint; }

}  // namespace gpupack::agent
