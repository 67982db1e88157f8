#include "agent/agent.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "agent/agent_metrics.h"
#include "agent/channel_client.h"
#include "agent/gpu_discovery.h"
#include "agent/gpu_health.h"
#include "agent/gpu_injection.h"
#include "agent/log_service.h"
#include "agent/mps_daemon.h"
#include "agent/runtime.h"
#include "agent/server_connection.h"
#include "agent/task_manager.h"
#include "agent/task_store.h"

namespace gpupack::agent {

namespace fs = std::filesystem;

namespace {

int64_t HostMemoryMiB() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemTotal:") return kb / 1024;
  return 0;
}

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "gpupack-agent";
  return buf;
}

}  // namespace

// Impl owns the parts and is the connection's Listener: what the server says goes to the TaskManager. Members are
// destroyed in reverse order, users before what they use.
struct Agent::Impl final : ServerConnection::Listener {
  AgentOptions options;
  ServerEndpoint server;                 // the first of --server's URLs
  std::vector<ServerEndpoint> servers;   // every URL of --server (the replicas of one control plane)
  std::unique_ptr<AgentMetrics> metrics;  // before the runtime: the runtime it times observes into it
  std::unique_ptr<GpuDiscovery> gpus;
  std::unique_ptr<MpsSupervisor> mps;
  std::unique_ptr<Runtime> runtime;
  RuntimeKind runtime_kind = RuntimeKind::kProcess;
  // docker: how containers get their GPU; kNone registers no real GPUs (the summary says why).
  GpuInjectionMode injection = GpuInjectionMode::kNone;
  std::string injection_summary;
  bool fake_gpus = false;
  std::unique_ptr<TaskStore> store;
  std::unique_ptr<GpuHealth> health;
  std::unique_ptr<ServerConnection> connection;
  std::unique_ptr<TaskContext> context;
  std::unique_ptr<TaskManager> tasks;
  std::unique_ptr<LogService> logs;
  std::unique_ptr<MetricsListener> metrics_listener;  // last: it reads every part above
  std::mutex mu;
  bool stopped = false;  // guarded by mu

  std::vector<protocol::TaskReport> HelloTasks() override {
    std::vector<protocol::TaskReport> reports;
    store->Visit([&reports](const TaskRecord& r) { reports.push_back(r.report); });
    return reports;
  }
  void OnWelcome(const protocol::Welcome& welcome, const std::set<std::string>& hello_stopped) override {
    tasks->Welcome(welcome, hello_stopped);
  }
  void OnAssign(protocol::Assignment assignment, int64_t push_id) override {
    tasks->Assign(std::move(assignment), push_id);
  }
  void OnStop(const protocol::StopOrder& order, int64_t push_id) override {
    tasks->StopOrder(order, push_id, protocol::StopCode::kUserInitiated);
  }
  void OnReportAcked(const std::string& arn, protocol::TaskStatus status) override { tasks->ReportAcked(arn, status); }
  void OnDeregistered() override { StopEverything(); }

  // StopEverything stops every task this agent runs, bounded: its instance was deregistered, so what runs there
  // holds GPUs the server no longer counts.
  void StopEverything() {
    tasks->StopAll("container instance deregistered", options.stop_grace * 8 + std::chrono::seconds(10));
  }
  void OnLogs(protocol::LogsRequest request) override {
    ServerConnection* conn = connection.get();
    logs->Post(std::move(request), [conn](const protocol::LogsAnswer& answer) { conn->SendLogs(answer); });
  }
};

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Agent::~Agent() { Stop(); }

Result<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  auto impl = std::make_unique<Impl>();
  if (options.name.empty()) options.name = HostName();
  // --server URL[,URL...]: the replicas of one control plane; the first is asked first.
  for (size_t from = 0; from <= options.server.size();) {
    const size_t comma = std::min(options.server.find(',', from), options.server.size());
    auto one = ServerEndpoint::Parse(options.server.substr(from, comma - from));
    if (!one.ok()) return one.status();
    one->signing = options.signing;
    impl->servers.push_back(*one);
    from = comma + 1;
  }
  impl->server = impl->servers.front();
  impl->metrics = std::make_unique<AgentMetrics>(options.name);
  auto gpus = MakeGpuDiscovery(options.gpus, options.name);
  if (!gpus.ok()) return gpus.status();
  impl->gpus = std::move(*gpus);
  impl->fake_gpus = options.gpus.rfind("fake:", 0) == 0;
  auto store = TaskStore::Open((fs::path(options.state_dir) / "tasks").string());
  if (!store.ok()) return Status::InvalidParameter("--state-dir " + options.state_dir + ": " + store.status().message());
  {  // The agent's state (its instance, its epoch, its tasks' records and logs) is its own: owner only.
    std::error_code ec;
    fs::permissions(options.state_dir, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (ec)
      return Status::InvalidParameter("--state-dir " + options.state_dir + ": cannot make it owner-only: " +
                                      ec.message());
  }
  impl->store = std::move(*store);
  MpsOptions mps;
  mps.control_program = options.mps_control_program;
  mps.pipe_dir = options.mps_pipe_dir;
  mps.log_dir = options.mps_pipe_dir + "/log";
  impl->mps = impl->fake_gpus ? MakeFakeMps(mps) : MakeMpsControlDaemon(mps);
  if (options.runtime == "process") {
    ProcessRuntimeOptions process;
    process.state_dir = options.state_dir + "/runtime";
    process.log_dir = options.state_dir + "/logs";
    process.log_limits = LogLimits{options.log_file_bytes, options.log_files};
    process.monitor_program = BundledMonitorProgram();
    // Never root unless asked for: a root agent runs its tasks as nobody by default.
    process.task_user = !options.task_user.empty() ? options.task_user : geteuid() == 0 ? "nobody" : "";
    process.task_uids = options.task_uids;
    auto rt = MakeProcessRuntime(std::move(process));
    if (!rt.ok()) return rt.status();
    impl->runtime = impl->metrics->TimeRuntime(std::move(*rt));
    impl->runtime_kind = RuntimeKind::kProcess;
  } else if (options.runtime == "docker") {
    GpuInjectionOptions gpu;
    gpu.mode = options.docker_gpu;
    gpu.driver_root = options.driver_root;
    gpu.extra_binds = options.docker_gpu_binds;
    auto devices = impl->gpus->Discover();
    if (!devices.ok()) return devices.status();
    // Simulated GPUs have no device to hand over: their containers get the GPU environment only (said once, below).
    auto plan = impl->fake_gpus ? Result<GpuInjection>(EnvironmentOnlyInjection(*devices))
                                : DetectGpuInjection(options.docker_socket, gpu, *devices);
    if (!plan.ok()) return plan.status();
    impl->injection = plan->mode;
    impl->injection_summary = plan->summary;
    if (plan->mode == GpuInjectionMode::kNone) {
      spdlog::warn("agent: docker GPU injection: {}", plan->summary);
    } else {
      spdlog::info("agent: docker GPU injection {}", plan->summary);
    }
    DockerRuntimeOptions docker;
    docker.socket_path = options.docker_socket;
    docker.agent_label = options.name;
    docker.log_dir = options.state_dir + "/logs";
    docker.log_limits = LogLimits{options.log_file_bytes, options.log_files};
    auto rt = MakeDockerRuntime(std::move(docker), std::move(*plan));
    if (!rt.ok()) return rt.status();
    impl->runtime = impl->metrics->TimeRuntime(std::move(*rt));
    impl->runtime_kind = RuntimeKind::kDocker;
  } else {
    return Status::InvalidParameter("--runtime must be process or docker (got " + options.runtime + ")");
  }
  impl->options = std::move(options);
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Status Agent::Start() {
  Impl& a = *impl_;
  const AgentOptions& o = a.options;
  // The metrics listener first, so a bad --metrics-listen fails before anything registers; its families are
  // completed below (a scrape meanwhile shows those registered so far).
  if (!o.metrics_listen.empty()) {
    AgentMetrics* m = a.metrics.get();
    auto listener = MetricsListener::Start(o.metrics_listen, [m] { return m->Render(); });
    if (!listener.ok()) return listener.status();
    a.metrics_listener = std::move(*listener);
  }
  auto devices = a.gpus->Discover();
  if (!devices.ok()) return devices.status();
  if (a.runtime_kind == RuntimeKind::kDocker && a.injection == GpuInjectionMode::kNone && !a.fake_gpus &&
      !devices->empty()) {
    // No container could see a GPU: offer none rather than take tasks that would all fail to start.
    spdlog::warn("agent: registering no GPUs ({} found): {}", devices->size(), a.injection_summary);
    devices->clear();
  }
  if (Status s = a.mps->Start(); !s.ok())
    spdlog::warn("agent: MPS control daemon did not start: {} (shared tasks will be refused until it does)", s.message());

  GpuHealthOptions health;
  health.tick = o.monitor_interval;
  health.mps_probe_interval = o.mps_probe_interval;
  health.watchdog_interval = o.watchdog_interval;
  health.watchdog_strikes = o.watchdog_strikes;
  health.fake_gpus = a.fake_gpus;
  health.mps_pipe_dir = o.mps_pipe_dir;
  a.health = std::make_unique<GpuHealth>(health, *a.gpus, *devices, *a.mps, *a.runtime, *a.store);
  a.health->ProbeMps();

  ConnectionOptions connection;
  connection.server = a.server;
  if (a.servers.size() > 1) connection.servers = a.servers;
  connection.state_dir = o.state_dir;
  Registration& reg = connection.registration;
  reg.cluster = o.cluster;
  reg.devices = *devices;
  reg.attributes = o.attributes;
  reg.attributes.emplace_back("gpupack.runtime", o.runtime);  // the console says whether images are used
  reg.instance_type = o.instance_type;
  reg.name = o.name;
  reg.cpu = o.cpu > 0 ? o.cpu : static_cast<int64_t>(std::thread::hardware_concurrency()) * 1024;
  reg.memory = o.memory > 0 ? o.memory : HostMemoryMiB() * 95 / 100;
  GpuHealth* h = a.health.get();
  a.connection = std::make_unique<ServerConnection>(
      std::move(connection), a,
      ServerConnection::Health{[h] { return h->impaired(); }, [h] { return h->held_gpus(); },
                               [h] { return h->mps_serving(); },
                               [h] { return HeartbeatGpuMemory(h->task_memory(), std::chrono::steady_clock::now()); }});
  a.context = std::make_unique<TaskContext>(
      TaskContext{*a.store, *a.runtime, a.runtime_kind, *a.health, *a.connection, o.mps_pipe_dir, o.stop_grace});
  a.tasks = std::make_unique<TaskManager>(
      *a.context, TaskManagerOptions{o.monitor_interval, o.stop_grace, o.task_threads, o.executor});
  if (Status s = a.connection->Register(); !s.ok()) {
    if (a.connection->deregistered()) {
      // Deregistered while this agent was down: what it left running must stop before it gives up.
      spdlog::error("agent: {}", s.message());
      a.tasks->Start();
      a.StopEverything();  // Stop() (the destructor) ends the task manager
    }
    return s;
  }
  TaskManager* tasks = a.tasks.get();
  ServerConnection* conn = a.connection.get();
  AgentMetrics* metrics = a.metrics.get();
  a.health->SetHooks({[tasks, metrics](const std::string& arn, StopRequest r) {
                        metrics->CountHealthStop(r);
                        tasks->RequestStop(arn, std::move(r));
                      },
                      [conn] { conn->HeartbeatNow(); }, [conn](bool serving) { conn->MpsServingChanged(serving); }});
  a.metrics->Watch({*a.gpus, a.health->devices(), *a.mps, *a.health, *a.runtime, *a.store, o.cluster,
                    [conn] { return conn->instance_arn(); }});
  TaskStore* store = a.store.get();
  Runtime* runtime = a.runtime.get();
  LogServiceOptions log_options;
  log_options.root = o.state_dir + "/logs";
  log_options.retention = o.log_retention;
  log_options.cap_bytes = o.log_cap_bytes;
  a.logs = std::make_unique<LogService>(
      std::move(log_options),
      LogService::Hooks{[runtime](const std::string& arn, const std::string& container) {
                          if (Status s = runtime->CollectLogs(arn, container); !s.ok())
                            spdlog::warn("agent: logs of {} {}: {}", arn, container, s.message());
                        },
                        [store](const std::string& task_id) {
                          bool known = false;
                          store->Visit([&](const TaskRecord& r) {
                            const auto slash = r.report.task_arn.rfind('/');
                            if (r.report.task_arn.substr(slash == std::string::npos ? 0 : slash + 1) == task_id)
                              known = true;
                          });
                          return known;
                        }});
  a.tasks->Start();
  a.health->Start();
  a.connection->Start();
  return Status::Ok();
}

void Agent::Stop() {
  Impl& a = *impl_;
  {
    std::lock_guard lock(a.mu);
    if (a.stopped) return;
    a.stopped = true;
  }
  a.metrics_listener.reset();  // no scrape reads the parts while they stop
  if (a.health) a.health->Stop();
  if (a.tasks) {
    a.tasks->Stop();
    if (a.options.stop_tasks_on_exit) {
      // Every task in parallel, bounded (a task stops its containers one after another, each within the grace).
      a.tasks->StopAll("the agent was shut down", a.options.stop_grace * 8 + std::chrono::seconds(10));
      // Give the reports a moment to be acknowledged, so the records go.
      if (a.connection) a.connection->WaitForAcks(std::chrono::milliseconds(500));
    }
  }
  if (a.connection) a.connection->Stop();
  a.logs.reset();
  if (a.tasks) a.tasks->Shutdown();
  if (Status s = a.mps->Stop(); !s.ok()) spdlog::warn("agent: MPS quit: {}", s.message());
}

std::string Agent::instance_arn() const { return impl_->connection ? impl_->connection->instance_arn() : ""; }

std::string Agent::metrics_endpoint() const {
  return impl_->metrics_listener ? impl_->metrics_listener->endpoint() : "";
}

}  // namespace gpupack::agent
