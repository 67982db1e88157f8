// The subcommands of the gpupack binary: flag sets and entry points. Wiring only.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace gpupack::cli {

inline constexpr const char* kVersion = "0.1.0";

struct ServerFlags {
  std::string listen = "127.0.0.1:8080";
  std::string db = "gpupack.db";
  std::string region = "us-east-1";
  std::string account_id = "000000000000";
  std::string credentials;
  std::string log_level = "info";
  bool insecure_no_auth = false;
  bool place_on_disconnected = false;  // benchmarks and simulations whose client plays the agent
  int64_t max_provisioning_tasks = 500;      // per cluster, tasks waiting for a capacity provider (ECS's quota)
  int64_t provisioning_timeout_s = 30 * 60;  // a waiting task stops after this long
  int64_t backfill_reservation_after_s = 5 * 60;  // a line's head holds an instance after waiting this long
  std::string default_strategy = "binpack:gpuMemory";  // for shared-GPU tasks that name none: TYPE[:FIELD]
  int threads = 2;
  std::string fragmentation_workload;  // JSON file: binpack(fragmentation)'s target workload; empty = learned
  // Several servers on one PostgreSQL --db (docs/ha.md): the URL the others forward to (default
  // http://LISTEN) and the leader lease's length.
  std::string advertise;
  std::vector<std::string> server_names;
  bool metrics_per_task = false;  // --metrics-per-task: /metrics names tasks and containers  // --server-name HOST[:PORT], repeatable: more names a signed Host may carry
  int lease_ttl_ms = 5000;
  int max_read_staleness_ms = 1000;
  std::string follow_pause_file;
  // The agent channel's bounds (api::ServerOptions; docs/security.md): connections open at once, the MiB one
  // connection may hold queued for sending, and the MiB of one hello's parts. Checked by ServerRuntime::Start.
  int64_t max_agent_channels = 1024;
  int64_t agent_send_queue_mib = 16;
  int64_t agent_hello_mib = 64;
  // The HTTP transport's bounds against stalled requests (api::ServerOptions; docs/security.md): HTTP
  // connections open at once from one client address, and the seconds within which a whole request (headers and
  // body) must arrive.
  int64_t max_connections_per_address = 256;
  int64_t http_read_timeout_s = 10;
};

void AddServerFlags(CLI::App& app, ServerFlags& flags);

// RunServer runs until SIGINT/SIGTERM; returns the process exit status (0, 1 on failure, 2 on bad usage).
int RunServer(const ServerFlags& flags);

// `gpupack backup`: an online copy of the server's database (SqliteStore::Backup), also while it serves.
struct BackupFlags {
  std::string db = "gpupack.db";
  std::string to;
};
void AddBackupFlags(CLI::App& app, BackupFlags& flags);
int RunBackup(const BackupFlags& flags);  // 0, 1 on failure

// `gpupack migrate`: the whole state from one database to another (storage/migrate.h): SQLite to PostgreSQL,
// back, or a backup restored. The servers on both must be stopped.
struct MigrateFlags {
  std::string from;
  std::string to;
  bool force = false;  // replace a target that holds records
};
void AddMigrateFlags(CLI::App& app, MigrateFlags& flags);
int RunMigrate(const MigrateFlags& flags);  // 0, 1 on failure, 2 on bad usage

struct AgentFlags {
  std::string server = "http://127.0.0.1:8080";
  std::string cluster = "default";
  std::string gpus = "nvml";
  std::string runtime = "process";
  std::string task_user;  // --task-user: who the process runtime runs tasks as (empty: nobody when root)
  std::string task_uids;  // --task-uids FIRST-LAST: a uid of its own for each process task (empty: none)
  std::string docker_socket = "/var/run/docker.sock";
  std::string docker_gpu = "auto";            // --docker-gpu: auto | nvidia | cdi | devices
  std::string driver_root;                    // --driver-root (devices mode)
  std::vector<std::string> docker_gpu_binds;  // --docker-gpu-bind HOST:CONTAINER[:ro|rw]
  std::string mps_pipe_dir = "/run/gpupack-mps";
  std::string mps_control = "nvidia-cuda-mps-control";
  std::string state_dir = "/var/lib/gpupack-agent";
  std::vector<std::string> attributes;  // NAME=VALUE
  std::string instance_type;
  std::string capacity_provider;  // --capacity-provider: joins the instance to this capacity provider
  std::string name;
  int64_t cpu = 0;
  int64_t memory = 0;
  int stop_grace_ms = 10000;
  int watchdog_ms = 1000;
  int mps_probe_ms = 5000;
  // Each container's output (agent/log_store.h): files x MiB kept, and hours after the task is gone.
  int log_file_mib = 10;
  int log_files = 3;
  int log_retention_hours = 24;
  int log_cap_mib = 4096;
  std::string log_level = "info";
  // SigV4 signing (server run with --credentials). Empty: $AWS_SHARED_CREDENTIALS_FILE, $AWS_PROFILE, and
  // $AWS_REGION / $AWS_DEFAULT_REGION, then us-east-1; no file at all means unsigned calls.
  std::string credentials;
  std::string profile;
  std::string region;
  // --check: print the GPU host checklist (agent/host_check.h) instead of running; exit 1 on any FAIL.
  bool check = false;
  // --metrics-listen HOST:PORT: serve the agent's own GET /metrics there (agent/agent_metrics.h); empty = off.
  std::string metrics_listen;
};

void AddAgentFlags(CLI::App& app, AgentFlags& flags);
int RunAgent(const AgentFlags& flags);

struct UpFlags {
  ServerFlags server;
  int agents = 1;
  std::string gpus = "fake:2x22587";
  std::string dir = ".gpupack-up";
  std::string runtime = "process";  // --runtime process|docker: docker runs each container's image
  std::string docker_socket = "/var/run/docker.sock";
};

void AddUpFlags(CLI::App& app, UpFlags& flags);
// RunUp: the server on its SQLite plus N agents with simulated GPUs and the process runtime (or docker), on
// loopback.
int RunUp(const UpFlags& flags);

// `gpupack plan`: the capacity planner (planner/, docs/planning.md).
struct PlanFlags {
  std::vector<std::string> inputs;  // fleet and workload files, told apart by content
  std::string fleet;
  std::string workload;
  std::string protocol = "fgd";
  std::vector<std::string> strategies;
  std::string gpu_units = "auto";
  std::string seeds = "42..51";
  int demand = 130;
  std::string format = "table";
  std::string svg;
  int jobs = 0;  // 0: one per hardware thread
  bool at_once = false;
  int buckets = 12;
  bool wait = false;                // replay: also with waiting (--wait)
  std::string target_wait_p95;      // size: --target-wait-p95, seconds as given ("60", "60s", "5m")
  std::vector<std::string> instance_types;
  bool quiet = false;
};

void AddPlanFlags(CLI::App& app, PlanFlags& flags);

// RunPlan prints the report on stdout; returns 0, 2 on bad usage or bad input, 1 on failure.
int RunPlan(const PlanFlags& flags);

// `gpupack aws-model`: the ECS service model of this machine's botocore plus the GPU-sharing shapes gpupack
// serves, installed under ~/.aws/models for the AWS CLI and boto3 (cli/aws_model.cc).
struct AwsModelFlags {
  std::string python = "python3";
  std::string from;        // a service-2.json (or .gz) instead of botocore's
  std::string models_dir;  // empty: $HOME/.aws/models
  bool to_stdout = false;
};

void AddAwsModelFlags(CLI::App& app, AwsModelFlags& flags);
// RunAwsModel returns 0, 1 when the model cannot be read or written, 2 on bad usage.
int RunAwsModel(const AwsModelFlags& flags);

// `gpupack keys issue-agent`: an agent key bound to one host, added to the server's credentials file
// (cli/keys.cc; docs/security.md).
struct KeysFlags {
  std::string host;
  std::string credentials;
  std::string profile;  // empty: agent-HOST
  std::string out;      // empty: the host's credentials file goes to stdout
};

void AddKeysFlags(CLI::App& app, KeysFlags& flags);
// RunKeys returns 0, 2 on bad usage (or a credentials file the server would refuse), 1 when it cannot write.
int RunKeys(const KeysFlags& flags);

}  // namespace gpupack::cli
