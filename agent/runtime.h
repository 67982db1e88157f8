// Container runtimes behind one interface: `process` (fork/exec in its own process group) and `docker`
// (Docker Engine API over its unix socket). The agent's per-task state machines drive them (ManagedTask).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/log_store.h"
#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack::agent {

// ContainerSpec: everything a runtime needs to start one container of a task.
struct ContainerSpec {
  std::string task_arn;
  std::string container_name;
  std::string image;                    // docker: the image; process: not used (ProcessImageNote says so)
  std::vector<std::string> entry_point; // process: argv = entry_point + command (at least one element)
  std::vector<std::string> command;
  std::vector<KeyValuePair> environment;  // final environment (MPS variables already injected)
  // Set for a shared (MPS) container, else empty. docker: bind-mounted at the same path; process: the container runs
  // as the task user, never a uid of the task's own (ProcessRuntimeOptions::task_uids says why).
  std::string mps_pipe_dir;
  int64_t cpu = 0;                      // CPU units (docker: CpuShares)
  std::optional<MiB> memory;            // hard limit (docker: Memory)
  std::optional<MiB> memory_reservation;
};

enum class ContainerState { kRunning, kExited, kMissing };

struct ContainerStatus {
  ContainerState state = ContainerState::kMissing;
  std::optional<int> exit_code;  // when exited (128 + signal for a signal)
  std::string reason;            // e.g. "OOMKilled", "killed by signal 9", "exec failed: No such file or directory"
};

// A container found by List(): what the runtime knows about a container this agent started earlier.
struct RuntimeContainer {
  std::string id;
  std::string task_arn;
  std::string container_name;
  ContainerStatus status;
};

// Runtime: thread-safe for different containers. The agent runs each task's events on a worker pool, so Start,
// Inspect, Stop and Remove of different containers (and List and Owners) may run at once; calls for one container
// never overlap (one task's events run one at a time).
class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string Name() const = 0;  // "process" | "docker"
  // Start creates and starts the container; returns its runtime id. A container that cannot start (no such
  // executable, no such image) is an error whose message says why (it becomes TaskFailedToStart).
  virtual Result<std::string> Start(const ContainerSpec& spec) = 0;
  virtual Result<ContainerStatus> Inspect(const std::string& id) = 0;
  // Stop sends SIGTERM (docker: stop with timeout), waits up to `grace`, then SIGKILL. Idempotent.
  virtual Status Stop(const std::string& id, std::chrono::milliseconds grace) = 0;
  // Remove forgets an exited container (docker: remove; process: delete its state files, keep its logs).
  virtual Status Remove(const std::string& id) = 0;
  // List returns every container this agent's runtime started and has not removed (for reconcile after a
  // restart of the agent).
  virtual Result<std::vector<RuntimeContainer>> List() = 0;
  // Owners maps processes (host pids, e.g. from NVML) to the running containers of this runtime they belong
  // to, by runtime id; pids of no container of ours are left out. The watchdog's link from GPU memory to tasks.
  //   process: a pid belongs to a container when it, or an ancestor, is in the workload's process group or the
  //            monitor's session (a program that both calls setsid() and double-forks escapes this; docs/agent-channel.md
  //            names docker for untrusted workloads).
  //   docker:  a pid belongs to a container when the container's id appears in /proc/<pid>/cgroup.
  virtual std::map<uint32_t, std::string> Owners(const std::vector<uint32_t>& pids) = 0;
  // CollectLogs brings the log stream of a task's container (log_store.h, LogDirectory) up to date before it is
  // read: docker copies the lines the engine has that the stream lacks; the process runtime's monitor writes the
  // stream itself (nothing to do). Pure, so a runtime that wraps another cannot drop it by accident.
  virtual Status CollectLogs(const std::string& task_arn, const std::string& container_name) = 0;
};

struct ProcessRuntimeOptions {
  std::string state_dir;  // per-container state (pid, exit code) survives an agent restart here
  std::string log_dir;    // <log_dir>/<task id>/<container>/: the log stream of stdout and stderr (log_store.h)
  LogLimits log_limits = {};  // how much of each container's output is kept
  // How long Start waits to learn whether the program was executed (the exec itself; not the program's run).
  std::chrono::milliseconds start_timeout{10000};
  // The monitor of each container is a program executed afresh, which copies nothing of the agent's memory;
  // false: a fork of the agent (dearer in a big process: see agent/process_launch.h).
  bool exec_monitor = true;
  // The program executed as the monitor: empty is this program (/proc/self/exe). The agent passes
  // BundledMonitorProgram() when it is there: a small static program that starts far faster than this one.
  std::string monitor_program;
  // The user every workload runs as (`gpupack agent --task-user`, whose default is `nobody` when the agent runs
  // as root): a user name or UID[:GID] (a name's primary group, else GID = UID). Empty: the agent's own user
  // (tests; an agent that is not root). Whatever the user, the workload has no supplementary groups, no capabilities
  // (root's are cleared by the change of uid) and no_new_privs; the state and log directories are 0700, so
  // it reads neither its own nor another task's state and logs, nor the agent's.
  std::string task_user;
  // `gpupack agent --task-uids FIRST-LAST` (ParseTaskUids), root agents only; empty: none. Each task then runs as a
  // uid of its own from this range (gid the same number, no supplementary groups, the same no-capability and
  // no_new_privs treatment), so that no task reads another's /proc/PID/environ or signals it. All containers of a
  // task share its uid. A uid is free once no container of this runtime holds it (a container's state file names
  // its uid until Remove; a restarted agent reads them back), no process on the host runs as it (one that left
  // its task's process group still holds it) and the host's user database does not name it; uids are handed out
  // in turn through the range, not lowest first, so a freed uid waits as long as it can before its next task. A
  // start that finds none free fails saying so.
  // Shared (MPS) containers keep the task user: the MPS control daemon runs one server per uid and makes clients
  // of another uid wait until every client of the running server has exited, so tasks of different uids would
  // take turns on a GPU instead of sharing it.
  std::string task_uids;
  // With task_uids: the directories where any uid may write, so a task's files outlive it there. Each time a uid
  // goes to a task, what it owns under these is removed first (agent/task_uids.h, SweepUid), so nothing an
  // earlier task of that uid left passes to the next. Empty: no sweep.
  std::vector<std::string> scratch_dirs = {"/tmp", "/var/tmp", "/dev/shm"};
};
// TaskUidRange: the uids of `--task-uids` (first <= last).
struct TaskUidRange {
  int64_t first = 0;
  int64_t last = -1;
};
// kMaxTaskUids bounds the size of a --task-uids range: far more than the tasks one agent runs at once.
inline constexpr int64_t kMaxTaskUids = 65536;
// ParseTaskUids reads `FIRST-LAST`, decimal uids with 1 <= FIRST <= LAST <= 2147483647 (higher uids are read as
// negative by some tools) and at most kMaxTaskUids of them; InvalidParameter saying what is wrong.
Result<TaskUidRange> ParseTaskUids(const std::string& text);
// TaskIdentity: the uid and gid a ProcessRuntimeOptions::task_user names; -1, -1: keep the agent's.
struct TaskIdentity {
  int64_t uid = -1;
  int64_t gid = -1;
};
// ResolveTaskUser: `task_user` as ids (see ProcessRuntimeOptions::task_user), for an agent whose effective uid is
// `agent_uid`; InvalidParameter naming the user when there is no such user.
Result<TaskIdentity> ResolveTaskUser(const std::string& task_user, int64_t agent_uid);
Result<std::unique_ptr<Runtime>> MakeProcessRuntime(ProcessRuntimeOptions options);

// kHostImage: the image name that says "run the command on the host" (the process runtime's own; docs/operations.md).
inline constexpr const char* kHostImage = "host";
// ProcessImageNote: what the process runtime tells about a container of `image`: "" for kHostImage, else that the
// image was not used and the command ran on the host (the container's reason while it runs).
std::string ProcessImageNote(const std::string& image);

// BundledMonitorProgram: `gpupack-monitor` in the directory of this program's executable when it is there and
// executable (the build and every install put it there), else empty.
std::string BundledMonitorProgram();

struct DockerRuntimeOptions {
  std::string socket_path = "/var/run/docker.sock";
  std::string agent_label;  // value of label gpupack.agent, so two agents on one engine keep apart (required)
  // Engine API version used as the path prefix (/v1.41/...). An engine whose minimum is newer gets its minimum
  // (the fields used here are unchanged since 1.41); an engine older than this is refused.
  std::string api_version = "1.41";
  std::string network_mode = "none";                  // HostConfig.NetworkMode of every container
  std::chrono::milliseconds request_timeout{30000};  // per engine request (Stop adds its grace period)
  size_t max_response_bytes = 16 << 20;               // larger engine responses are an error
  // Where each container's output is copied (log_store.h), with its rotation; empty: logs are not copied. The
  // engine keeps its own json-file log bounded the same way (HostConfig.LogConfig max-size and max-file).
  std::string log_dir = "";
  LogLimits log_limits = {};
};
Result<std::unique_ptr<Runtime>> MakeDockerRuntime(DockerRuntimeOptions options);

}  // namespace gpupack::agent
