#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <memory>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/host_check.h"
#include "agent/runtime.h"
#include "protocol/field_limits.h"
#include "agent/task_executor.h"
#include "protocol/sigv4.h"
#include "scheduler/model.h"
#include "cli/commands.h"
#include "cli/server_runtime.h"

namespace gpupack::cli {

void AddAgentFlags(CLI::App& app, AgentFlags& f) {
  app.add_option("--server", f.server,
                 "the gpupack server's URL, or URL,URL,... for several servers on one PostgreSQL database (the agent "
                 "connects to whichever answers and is sent on to the leader)")
      ->capture_default_str();
  app.add_option("--cluster", f.cluster, "cluster to register in")->capture_default_str();
  app.add_option("--gpus", f.gpus, "nvml, or fake:SPEC for simulated GPUs (e.g. fake:2x22587)")->capture_default_str();
  app.add_option("--runtime", f.runtime, "process or docker")->capture_default_str();
  app.add_option("--task-user", f.task_user,
                 "process runtime: the user NAME or UID[:GID] every task runs as, with no capabilities, no "
                 "supplementary groups and no_new_privs (default: nobody when the agent runs as root, else the "
                 "agent's own user; root only when named)");
  app.add_option("--task-uids", f.task_uids,
                 "process runtime, root agent: FIRST-LAST, a range of uids no user has (e.g. 70000-70999); each "
                 "task runs as a uid of its own from it (gid the same), so no task reads or signals another; shared "
                 "(MPS) tasks keep --task-user (default: none, every task runs as --task-user)")
      ->check(CLI::Validator(
          [](std::string& text) {  // the refusal without its "--task-uids 'TEXT': ", which CLI11 says already
            auto range = agent::ParseTaskUids(text);
            if (range.ok()) return std::string();
            const std::string& why = range.status().message();
            return why.substr(why.find("': ") + 3);
          },
          "FIRST-LAST"));
  app.add_option("--docker-socket", f.docker_socket, "Docker Engine socket (docker runtime)")->capture_default_str();
  app.add_option("--docker-gpu", f.docker_gpu,
                 "how the docker runtime hands containers their GPU: auto (the first that works of:) nvidia (the "
                 "engine's nvidia runtime), cdi (CDI specs), devices (device nodes and the driver's libraries)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "nvidia", "cdi", "devices"}));
  app.add_option("--driver-root", f.driver_root,
                 "devices mode: the directory holding the driver's libcuda.so.1 and libnvidia-ml.so.1 (in lib64, lib "
                 "or itself; default: found under /usr/local/nvidia, /run/nvidia/driver, ... or by ldconfig)");
  app.add_option("--docker-gpu-bind", f.docker_gpu_binds,
                 "HOST:CONTAINER[:ro|rw] bind every GPU container also gets, e.g. a host's CUDA toolkit (repeatable)");
  app.add_option("--mps-pipe-dir", f.mps_pipe_dir, "CUDA_MPS_PIPE_DIRECTORY of the MPS daemon this agent runs")
      ->capture_default_str();
  app.add_option("--mps-control", f.mps_control, "the MPS control program")->capture_default_str();
  app.add_option("--state-dir", f.state_dir, "where the agent keeps its tasks across restarts")->capture_default_str();
  app.add_option("--attribute", f.attributes, "NAME=VALUE instance attribute (repeatable)");
  app.add_option("--instance-type", f.instance_type, "instance type (becomes ecs.instance-type)");
  app.add_option("--capacity-provider", f.capacity_provider,
                 "the capacity provider this instance joins (becomes ecs.capacity-provider-name): tasks launched "
                 "through it run only on its instances; see docs/operations.md");
  app.add_option("--name", f.name, "this agent's name (default: the host name)");
  app.add_option("--cpu", f.cpu, "CPU units to offer (default: cores x 1024)");
  app.add_option("--memory", f.memory, "MiB of host memory to offer (default: 95% of MemTotal)");
  app.add_option("--stop-grace-ms", f.stop_grace_ms, "SIGTERM to SIGKILL grace")->capture_default_str();
  app.add_option("--watchdog-ms", f.watchdog_ms,
                 "how often the GPU memory watchdog reads NVML (0 turns it off; see docs/operations.md)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600 * 1000));
  app.add_option("--mps-probe-ms", f.mps_probe_ms, "how often the MPS control daemon is probed")
      ->capture_default_str()
      ->check(CLI::Range(100, 3600 * 1000));
  app.add_option("--log-file-mib", f.log_file_mib,
                 "each container's output is kept in files of this many MiB (rotated; see docs/api.md, Logs)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--log-files", f.log_files, "how many such files are kept per container (the oldest goes)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--log-retention-hours", f.log_retention_hours,
                 "a task's output is deleted this long after its last line once the agent no longer has the task")
      ->capture_default_str()
      ->check(CLI::Range(0, 24 * 365));
  app.add_option("--log-cap-mib", f.log_cap_mib,
                 "all tasks' output together is kept under this many MiB: past it the output of stopped tasks is "
                 "deleted, the least recently written first (0: no cap)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error or off")->capture_default_str();
  app.add_option("--credentials", f.credentials,
                 "AWS shared-credentials file (mode 0600) to SigV4-sign every call and the channel with "
                 "(default: $AWS_SHARED_CREDENTIALS_FILE; none: unsigned)");
  app.add_option("--profile", f.profile,
                 "profile of the credentials file to sign with (default: $AWS_PROFILE, else [default], else the "
                 "file's only profile)");
  app.add_option("--region", f.region,
                 "the server's --region, which signatures are scoped to (default: $AWS_REGION, "
                 "$AWS_DEFAULT_REGION, else us-east-1)");
  app.add_option("--metrics-listen", f.metrics_listen,
                 "HOST:PORT to serve the agent's own GET /metrics on (MPS daemon, held GPUs, watchdog, runtime "
                 "latency, per-task GPU memory; port 0 = any free port; default: not served)");
  app.add_flag("--check", f.check,
               "check this GPU host (NVML and GPUs, MPS, directories, the docker engine and its GPU runtime), print "
               "each item ok or FAIL with what to do, and exit (1 on any FAIL) without registering");
}

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// SigningFrom resolves the key the agent signs with, like the AWS CLI: flags first, then the environment.
// No credentials file at all means unsigned calls (a server without --credentials).
Result<std::optional<protocol::SigningIdentity>> SigningFrom(const AgentFlags& f) {
  const std::string file = !f.credentials.empty() ? f.credentials : Env("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty()) return std::optional<protocol::SigningIdentity>();
  auto keys = protocol::LoadCredentialsFile(file);
  if (!keys.ok()) return keys.status();
  const std::string profile = !f.profile.empty() ? f.profile : Env("AWS_PROFILE");
  auto key = protocol::SelectProfile(*keys, profile, "credentials file " + file);
  if (!key.ok()) return key.status();
  protocol::SigningIdentity id;
  id.credential = std::move(*key);
  id.region = !f.region.empty()                   ? f.region
              : !Env("AWS_REGION").empty()         ? Env("AWS_REGION")
              : !Env("AWS_DEFAULT_REGION").empty() ? Env("AWS_DEFAULT_REGION")
                                                   : std::string("us-east-1");
  return std::optional<protocol::SigningIdentity>(std::move(id));
}

Result<agent::AgentOptions> ToOptions(const AgentFlags& f) {
  agent::AgentOptions o;
  o.server = f.server;
  o.cluster = f.cluster;
  o.gpus = f.gpus;
  o.runtime = f.runtime;
  o.task_user = f.task_user;
  o.task_uids = f.task_uids;
  o.docker_socket = f.docker_socket;
  o.docker_gpu = f.docker_gpu;
  o.driver_root = f.driver_root;
  o.docker_gpu_binds = f.docker_gpu_binds;
  o.mps_pipe_dir = f.mps_pipe_dir;
  o.mps_control_program = f.mps_control;
  o.state_dir = f.state_dir;
  o.instance_type = f.instance_type;
  o.name = f.name;
  o.cpu = f.cpu;
  o.memory = f.memory;
  o.stop_grace = std::chrono::milliseconds(f.stop_grace_ms);
  o.watchdog_interval = std::chrono::milliseconds(f.watchdog_ms);
  o.mps_probe_interval = std::chrono::milliseconds(f.mps_probe_ms);
  o.metrics_listen = f.metrics_listen;
  o.log_file_bytes = static_cast<uint64_t>(f.log_file_mib) << 20;
  o.log_files = f.log_files;
  o.log_retention = std::chrono::hours(f.log_retention_hours);
  o.log_cap_bytes = static_cast<uint64_t>(f.log_cap_mib) << 20;
  // What the server would refuse at registration (protocol/field_limits.h), refused here at start instead.
  if (!o.name.empty()) GP_TRY(protocol::CheckField(o.name, protocol::kInstanceIdLimit, "--name"));
  if (!o.instance_type.empty())
    GP_TRY(protocol::CheckField(o.instance_type, protocol::kInstanceTypeLimit, "--instance-type"));
  for (const auto& a : f.attributes) {
    size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::InvalidParameter("--attribute must be NAME=VALUE (got '" + a + "')");
    o.attributes.emplace_back(a.substr(0, eq), a.substr(eq + 1));
  }
  if (!f.capacity_provider.empty()) {
    const bool valid = f.capacity_provider.size() <= 255 &&
                       std::all_of(f.capacity_provider.begin(), f.capacity_provider.end(), [](unsigned char c) {
                         return std::isalnum(c) || c == '-' || c == '_';
                       });
    if (!valid)
      return Status::InvalidParameter("--capacity-provider must be 1-255 letters, numbers, hyphens and underscores "
                                      "(got '" + f.capacity_provider.substr(0, 100) + "')");
    o.attributes.emplace_back(kCapacityProviderAttribute, f.capacity_provider);
  }
  return o;
}

}  // namespace

// RunHostCheck: `gpupack agent --check`. The checklist reads the same flags the agent would run with.
int RunHostCheck(const AgentFlags& f) {
  auto options = ToOptions(f);
  if (!options.ok()) {
    std::fprintf(stderr, "gpupack agent --check: %s\n", options.status().message().c_str());
    return 2;
  }
  agent::HostCheckOptions o;
  o.agent = std::move(*options);
  const auto items = agent::RunHostCheck(o);
  std::printf("gpupack %s agent --check: GPU host checklist (--gpus %s, --runtime %s)\n%s", kVersion, f.gpus.c_str(),
              f.runtime.c_str(), agent::FormatHostCheck(items).c_str());
  std::fflush(stdout);
  return agent::HostCheckPassed(items) ? 0 : 1;
}

int RunAgent(const AgentFlags& f) {
  auto level = spdlog::level::from_str(f.log_level);
  if (level == spdlog::level::off && f.log_level != "off")
    return Usage("--log-level must be one of trace, debug, info, warn, error, off");
  spdlog::set_level(level);
  if (f.check) {
    spdlog::set_level(spdlog::level::warn);  // the checklist is the output; the runtime's info lines are not
    return RunHostCheck(f);
  }
  auto options = ToOptions(f);
  if (!options.ok()) return Usage(options.status().message());
  auto signing = SigningFrom(f);
  if (!signing.ok()) return Usage(signing.status().message());
  options->signing = std::move(*signing);
  auto agent = agent::Agent::Create(*options);
  if (!agent.ok()) return Usage(agent.status().message());
  if (Status s = (*agent)->Start(); !s.ok()) {
    std::fprintf(stderr, "gpupack: agent: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("gpupack %s agent: %s in cluster %s via %s (%s)\n", kVersion, (*agent)->instance_arn().c_str(),
              f.cluster.c_str(), f.server.c_str(),
              options->signing ? ("signing as profile [" + options->signing->credential.profile + "], region " +
                                  options->signing->region)
                                     .c_str()
                               : "unsigned");
  if (!(*agent)->metrics_endpoint().empty())
    std::printf("gpupack agent: metrics %s/metrics\n", (*agent)->metrics_endpoint().c_str());
  std::fflush(stdout);
  WaitForSignal();
  (*agent)->Stop();
  return 0;
}

void AddUpFlags(CLI::App& app, UpFlags& f) {
  f.server.db = "";  // default: <dir>/gpupack.db
  AddServerFlags(app, f.server);
  app.add_option("--agents", f.agents, "number of local agents")->capture_default_str()->check(CLI::Range(0, 64));
  app.add_option("--gpus", f.gpus, "simulated GPUs per agent (fake:SPEC)")->capture_default_str();
  app.add_option("--dir", f.dir, "where the database, agent state and task logs live")->capture_default_str();
  app.add_option("--runtime", f.runtime,
                 "process (each container's command runs on this host; its image is not used) or docker (the "
                 "image runs in the Docker engine; with fake GPUs a container gets the GPU environment only)")
      ->capture_default_str()
      ->check(CLI::IsMember({"process", "docker"}));
  app.add_option("--docker-socket", f.docker_socket, "Docker Engine socket (--runtime docker)")->capture_default_str();
}

int RunUp(const UpFlags& f) {
  if (f.gpus.rfind("fake:", 0) != 0 && f.gpus != "nvml")
    return Usage("--gpus must be fake:SPEC (e.g. fake:2x22587) or nvml");
  std::error_code ec;
  std::filesystem::create_directories(f.dir, ec);
  if (ec) return Usage("--dir " + f.dir + ": " + ec.message());
  ServerFlags sf = f.server;
  if (sf.db.empty()) sf.db = f.dir + "/gpupack.db";
  int code = 0;
  auto server = ServerRuntime::Start(sf, &code);
  if (!server) return code;
  // With --credentials each agent signs with an agent key of its own (an agent key registers one container
  // instance): the file's N-th gpupack_role=agent key, else its first admin key (a reader key cannot register).
  // The banner points clients at its first admin key.
  std::vector<std::optional<protocol::SigningIdentity>> agent_signing(static_cast<size_t>(std::max(f.agents, 0)));
  std::string client_profile;
  if (!sf.credentials.empty()) {
    auto keys = protocol::LoadCredentialsFile(sf.credentials);  // ServerRuntime::Start has just read it
    if (!keys.ok()) return Usage(keys.status().message());
    const protocol::Credential* admin_key = nullptr;
    std::vector<const protocol::Credential*> agent_keys;
    for (const protocol::Credential& k : *keys) {
      if (k.role == protocol::KeyRole::kAgent) agent_keys.push_back(&k);
      if (k.role == protocol::KeyRole::kAdmin && !admin_key) admin_key = &k;
    }
    if (admin_key) client_profile = admin_key->profile;
    for (size_t i = 0; i < agent_signing.size(); ++i) {
      const protocol::Credential* key = i < agent_keys.size() ? agent_keys[i] : admin_key;
      if (!key)
        return Usage("--credentials " + sf.credentials + ": the file has no agent key for local agent " +
                     std::to_string(i) + " (an agent key registers one host: add one per agent, or an admin key)");
      agent_signing[i] = protocol::SigningIdentity{*key, sf.region, "ecs"};
    }
  }
  // The agents share their task workers: every thread of this one process makes each container start dearer (a
  // fork copies every thread's stack mapping), and 64 agents with workers of their own would hold thousands.
  auto executor = std::make_shared<agent::TaskExecutor>(16);
  std::vector<std::unique_ptr<agent::Agent>> agents;
  for (int i = 0; i < f.agents; ++i) {
    AgentFlags af;
    af.server = server->endpoint();
    af.gpus = f.gpus;
    af.runtime = f.runtime;
    af.docker_socket = f.docker_socket;
    af.name = "local-" + std::to_string(i);
    af.state_dir = f.dir + "/agent-" + std::to_string(i);
    af.mps_pipe_dir = std::filesystem::absolute(f.dir + "/agent-" + std::to_string(i) + "/mps").string();
    af.cpu = 4096;
    af.memory = 16384;
    af.log_level = sf.log_level;
    auto options = ToOptions(af);
    if (!options.ok()) return Usage(options.status().message());
    options->stop_tasks_on_exit = true;
    options->signing = agent_signing[static_cast<size_t>(i)];
    options->executor = executor;
    auto a = agent::Agent::Create(*options);
    if (!a.ok()) return Usage(a.status().message());
    if (Status s = (*a)->Start(); !s.ok()) {
      std::fprintf(stderr, "gpupack: agent %d: %s\n", i, s.message().c_str());
      return 1;
    }
    agents.push_back(std::move(*a));
  }
  // The banner comes once every agent holds its channel: a RunTask sent as soon as it shows is placed.
  std::vector<std::string> instance_arns;
  for (const auto& a : agents) instance_arns.push_back(a->instance_arn());
  if (!server->AgentsConnected(instance_arns, std::chrono::seconds(10)))
    spdlog::warn("up: not every agent connected within 10 s; tasks are placed once they do");
  std::printf("gpupack %s up: a local cluster\n", kVersion);
  std::printf("  ECS API   %s  (cluster default, %d agent(s) with %s, %s runtime)\n", server->endpoint().c_str(),
              f.agents, f.gpus.c_str(), f.runtime.c_str());
  std::printf("  console   %s/console/  (open it in a browser%s)\n", server->endpoint().c_str(),
              sf.credentials.empty() ? "" : "; log in with an access key id and its secret");
  std::printf("  data      %s\n", f.dir.c_str());
  if (f.runtime == "process")
    std::printf("  runtime   process: a container's command runs on this host and its image is not used "
                "(--runtime docker runs images)\n");
  std::printf("  auth      %s\n", server->auth_summary().c_str());
  // The AWS CLI and boto3 as Debian 12 ships them ignore AWS_ENDPOINT_URL_ECS (they would call AWS itself) and
  // read the region from AWS_DEFAULT_REGION only: the commands name --endpoint-url and both variables are set.
  const std::string endpoint = server->endpoint();
  std::printf("\nPoint an AWS SDK or the AWS CLI at it:\n");
  std::printf("  export AWS_ENDPOINT_URL_ECS=%s AWS_REGION=%s AWS_DEFAULT_REGION=%s\n", endpoint.c_str(),
              sf.region.c_str(), sf.region.c_str());
  if (sf.credentials.empty()) {
    std::printf("  export AWS_ACCESS_KEY_ID=gpupack AWS_SECRET_ACCESS_KEY=gpupack\n");
  } else if (!client_profile.empty()) {
    std::printf("  export AWS_SHARED_CREDENTIALS_FILE=%s AWS_PROFILE=%s\n",
                std::filesystem::absolute(sf.credentials).string().c_str(), client_profile.c_str());
  } else {
    std::printf("  (%s has no gpupack_role=admin key: add one to call RunTask)\n", sf.credentials.c_str());
  }
  std::printf("  aws ecs list-container-instances --endpoint-url %s --cluster default\n", endpoint.c_str());
  std::printf("  aws ecs describe-container-instances --endpoint-url %s --cluster default --container-instances %s\n",
              endpoint.c_str(), agents.empty() ? "<arn>" : agents[0]->instance_arn().c_str());
  std::printf("(older AWS CLIs and boto3 ignore AWS_ENDPOINT_URL_ECS: pass --endpoint-url, or endpoint_url= in "
              "Python;\n `gpupack aws-model` teaches them the GPU-sharing fields: README.md)\n");
  std::printf("Ctrl-C stops everything.\n");
  std::fflush(stdout);
  WaitForSignal();
  for (auto& a : agents) a->Stop();
  agents.clear();
  server.reset();
  return 0;
}

}  // namespace gpupack::cli
