// Agent: the node agent. Discovers GPUs, supervises the MPS daemon, registers the instance, holds the channel to
// the server, and runs each assigned task through a runtime with the MPS limits injected. It is wiring; the work
// is done by its parts (docs/agent-channel.md, "The agent"):
//   - TaskManager and ManagedTask (task_manager.h, managed_task.h): one state machine per task, its events run on
//     that task's turn of a worker pool (TaskExecutor), so a slow stop or start delays only its own task; a
//     monitor thread notices containers that ended;
//   - TaskStore (task_store.h): the persisted task records;
//   - GpuHealth (gpu_health.h): MPS probes, GPU faults, held GPUs and the GPU memory watchdog, on its own thread;
//   - ServerConnection (server_connection.h): registration, the channel, acks, and heartbeats on their own timer.
//
// State survives a restart of the agent in `state_dir`: instance.json (the container instance ARN, so a
// restarted agent re-registers the same instance) and tasks/<id>.json (every task not yet reported STOPPED and
// acknowledged). The runtime keeps its own records of running containers there too.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "protocol/sigv4.h"
#include "base/status.h"

namespace gpupack::agent {

class TaskExecutor;  // agent/task_executor.h

struct AgentOptions {
  std::string server = "http://127.0.0.1:8080";
  std::string cluster = "default";
  std::string gpus = "nvml";            // nvml | fake:SPEC
  std::string runtime = "process";      // process | docker
  // The process runtime's task user (ProcessRuntimeOptions::task_user); empty: `nobody` when the agent runs as
  // root, else the agent's own user.
  std::string task_user;
  // The process runtime's range of task uids (ProcessRuntimeOptions::task_uids): a uid of its own for each task;
  // empty: every task runs as the task user.
  std::string task_uids;
  std::string docker_socket = "/var/run/docker.sock";
  // The docker runtime's GPU injection (agent/gpu_injection.h): auto | nvidia | cdi | devices; the driver root for
  // devices (empty: found); binds every GPU container also gets. An agent whose host can inject no GPU registers
  // none (fake GPUs excepted: their tasks are refused at start, with the reason).
  std::string docker_gpu = "auto";
  std::string driver_root;
  std::vector<std::string> docker_gpu_binds;
  std::string mps_pipe_dir = "/run/gpupack-mps";
  std::string mps_control_program = "nvidia-cuda-mps-control";
  std::string state_dir = "/var/lib/gpupack-agent";
  std::vector<std::pair<std::string, std::string>> attributes;
  std::string instance_type;
  std::string name;                     // this agent's name (seeds fake GPU UUIDs; docker label); default hostname
  int64_t cpu = 0;                      // CPU units to register; 0 = nproc x 1024
  int64_t memory = 0;                   // MiB to register; 0 = MemTotal minus 5%
  std::chrono::milliseconds stop_grace{10000};        // SIGTERM -> SIGKILL
  std::chrono::milliseconds monitor_interval{100};    // how often running containers are inspected
  std::chrono::milliseconds mps_probe_interval{5000};
  // The GPU memory watchdog (docs/agent-channel.md "Limits that hold"): every interval the agent reads each GPU process's
  // memory (NVML), sums it per container and stops a task whose container uses more than it declared on its
  // shared GPU, or uses a GPU it was not given, in `watchdog_strikes` readings in a row. 0 turns it off.
  std::chrono::milliseconds watchdog_interval{1000};
  int watchdog_strikes = 2;
  // At most this many tasks' events (starts, stops) run at once; each task's run one at a time.
  size_t task_threads = 32;
  // Workers shared by the agents of one process (gpupack up runs many): then task_threads is not used. Every
  // thread of the process makes each container start dearer (a fork copies every thread's stack mapping).
  std::shared_ptr<TaskExecutor> executor;
  bool stop_tasks_on_exit = false;      // gpupack up: Ctrl-C stops the tasks too
  // Each container's output is kept in state_dir/logs (agent/log_store.h): log_files files of log_file_bytes,
  // and for log_retention after the last write once the agent no longer has the task.
  uint64_t log_file_bytes = 10ull << 20;
  int log_files = 3;
  std::chrono::seconds log_retention{24 * 3600};
  // ... and all tasks' logs together at most log_cap_bytes (0: no cap): past it the logs of tasks the agent no
  // longer has go first, the least recently written first (agent/log_service.h).
  uint64_t log_cap_bytes = 4096ull << 20;
  // The key to SigV4-sign every call and the channel upgrade with (server run with --credentials); none = unsigned.
  std::optional<protocol::SigningIdentity> signing;
  // HOST:PORT where the agent serves its own GET /metrics (agent/agent_metrics.h); empty = not served.
  std::string metrics_listen;
};

class Agent {
 public:
  static Result<std::unique_ptr<Agent>> Create(AgentOptions options);
  ~Agent();  // Stop()

  // Start discovers GPUs, starts (or adopts) the MPS daemon, registers with the server and starts the parts.
  // Fails when the server cannot be reached or refuses the registration.
  Status Start();
  // Stop ends the parts and the channel and quits the MPS daemon this agent started. Containers keep running
  // unless stop_tasks_on_exit (then every task is stopped and reported first; a restarted agent re-adopts them
  // otherwise).
  void Stop();

  std::string instance_arn() const;
  // metrics_endpoint: "http://HOST:PORT" of the agent's /metrics once Start served it (metrics_listen), else "".
  std::string metrics_endpoint() const;

  struct Impl;

 private:
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupack::agent
