// swarm_setup.cc: agent_swarm's options, server start, registration body and quantiles (bench/swarm_setup.h).
#include "bench/swarm_setup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace gpupack::bench {

using Json = nlohmann::json;

void SwarmDie(const std::string& message) {
  std::fprintf(stderr, "agent_swarm: %s\n", message.c_str());
  std::fflush(nullptr);
  _exit(1);
}

SwarmOptions ParseSwarmOptions(int argc, char** argv) {
  SwarmOptions o;
  o.dir = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) SwarmDie(a + " needs a value");
      return argv[++i];
    };
    if (a == "--gpupack") o.gpupack = next();
    else if (a == "--server") o.server = next();
    else if (a == "--server-pid") o.server_pid = std::atoi(next().c_str());
    else if (a == "--agents") o.agents = std::atoi(next().c_str());
    else if (a == "--agent-offset") o.agent_offset = std::atoi(next().c_str());
    else if (a == "--baseline-s") o.baseline_s = std::atoi(next().c_str());
    else if (a == "--idle-s") o.idle_s = std::atoi(next().c_str());
    else if (a == "--hold-s") o.hold_s = std::atoi(next().c_str());
    else if (a == "--rate") o.rate = std::atof(next().c_str());
    else if (a == "--task-life-s") o.task_life_s = std::atof(next().c_str());
    else if (a == "--churn") o.churn = std::atof(next().c_str());
    else if (a == "--churn-down-ms") o.churn_down_ms = std::atoi(next().c_str());
    else if (a == "--heartbeat-ms") o.heartbeat_ms = std::atoi(next().c_str());
    else if (a == "--serve-s") o.serve_s = std::atoi(next().c_str());
    else if (a == "--crash-per-min") o.crash_per_min = std::atof(next().c_str());
    else if (a == "--dir") o.dir = next();
    else if (a == "--keep") o.keep = true;
    else if (a == "--no-ack") o.no_ack = true;
    else if (a == "--follow") o.follow = true;
    else if (a == "--follow-threads") o.follow_threads = std::atoi(next().c_str());
    else if (a == "--io-threads") o.io_threads = std::atoi(next().c_str());
    else if (a == "-h" || a == "--help") {
      std::printf("usage: agent_swarm [--gpupack PATH | --server URL --server-pid PID] [--agents N]\n"
                  "                   [--agent-offset K] [--baseline-s S] [--idle-s S] [--hold-s S] [--rate R]\n"
                  "                   [--task-life-s S] [--churn R] [--churn-down-ms MS] [--heartbeat-ms MS]\n"
                  "                   [--serve-s S [--crash-per-min P]] [--dir DIR] [--keep] [--no-ack]\n"
                  "                   [--server URL,URL,... --follow [--follow-threads N]] [--io-threads N]\n"
                  "defaults: build-bench/gpupack, 200 agents, 10 s with no agent, 30 s idle, 60 s driven,\n"
                  "          10 RunTask/s, tasks live 5 s, no churn (--churn R: R agents a second drop their\n"
                  "          channel during the driven phase and reconnect --churn-down-ms later, 200 ms)\n"
                  "--heartbeat-ms MS: each agent's heartbeat interval (10..60000; default: the welcome's\n"
                  "          heartbeatIntervalMs; the server closes a channel silent for 3 of its own intervals)\n"
                  "--serve-s S: serve mode instead of the idle, driven and check phases: register and connect the\n"
                  "          agents, print a \"ready\" line, then hold them (heartbeats timed send -> ack; every assign\n"
                  "          acked and reported RUNNING, every stop reported STOPPED) until SIGTERM or SIGINT, or S\n"
                  "          seconds (1..3600); SIGUSR1 prints the counters so far (\"counters N: ...\") and starts\n"
                  "          the measured window over. Prints the window's figures\n"
                  "          as \"result.KEY VALUE\" lines.\n"
                  "--crash-per-min P (serve mode): while crashing, P %% of the swarm's RUNNING tasks a minute stop on\n"
                  "          their own (a STOPPED report with exit code 1, as if the process died; spread evenly over\n"
                  "          the minute). Crashing starts and stops with each SIGUSR2 (off at the start).\n"
                  "--agent-offset K: agent i registers as instance K + i (instanceId swarm-(K+i)), so that several\n"
                  "          swarms can share one cluster (a process's descriptors bound a swarm: 4 per agent)\n"
                  "--no-ack: the agents ack no assign or stop (as older agents did not)\n"
                  "--follow (with --server URL,URL,... of several replicas and --serve-s): an agent whose channel\n"
                  "          closes reconnects as the real agent does (agent::ReconnectPolicy: the servers of the\n"
                  "          list in turn, a standby's named leader at once, full jitter after a whole walk), says\n"
                  "          hello again and prints \"returned AGENT LOST_MS HELLO_MS WELCOME_MS EPOCH ATTEMPTS\"\n"
                  "          (ms since 1970) once welcomed; registration and the first channels go to the first URL;\n"
                  "          --server-pid may be left out (no server figures). --follow-threads N: the worker\n"
                  "          threads that make the attempts (default 16)\n"
                  "exit status 1 when the final check through the API finds a violation\n");
      std::exit(0);
    } else {
      SwarmDie("unknown argument " + a + " (see --help)");
    }
  }
  if (o.agents < 1 || o.agents > 5000) SwarmDie("--agents must be 1..5000");
  if (o.agent_offset < 0 || o.agent_offset > 60000) SwarmDie("--agent-offset must be 0..60000");
  if (o.crash_per_min < 0 || o.crash_per_min > 100) SwarmDie("--crash-per-min must be 0..100 (% a minute)");
  if (o.crash_per_min > 0 && o.serve_s == 0) SwarmDie("--crash-per-min needs --serve-s");
  if (o.baseline_s < 0 || o.baseline_s > 600 || o.idle_s < 0 || o.idle_s > 600 || o.hold_s < 0 || o.hold_s > 600)
    SwarmDie("--baseline-s, --idle-s and --hold-s must be 0..600");
  if (o.rate < 0 || o.rate > 1000) SwarmDie("--rate must be 0..1000 per second");
  if (o.task_life_s < 0 || o.task_life_s > 600) SwarmDie("--task-life-s must be 0..600");
  if (o.churn < 0 || o.churn > 1000) SwarmDie("--churn must be 0..1000 reconnects per second");
  if (o.churn_down_ms < 0 || o.churn_down_ms > 60000) SwarmDie("--churn-down-ms must be 0..60000");
  if (o.heartbeat_ms != 0 && (o.heartbeat_ms < 10 || o.heartbeat_ms > 60000)) SwarmDie("--heartbeat-ms must be 10..60000");
  if (o.serve_s < 0 || o.serve_s > 3600) SwarmDie("--serve-s must be 1..3600 (0: the phases)");
  if (!o.server.empty() && o.server_pid <= 0 && !o.follow)
    SwarmDie("--server needs --server-pid (the process to measure)");
  if (o.follow && (o.server.empty() || o.serve_s == 0)) SwarmDie("--follow needs --server URL,... and --serve-s");
  if (o.follow_threads < 1 || o.follow_threads > 256) SwarmDie("--follow-threads must be 1..256");
  if (o.io_threads < 0 || o.io_threads > 256) SwarmDie("--io-threads must be 0..256");
  return o;
}

pid_t StartSwarmServer(const SwarmOptions& o, const std::string& dir, std::string* endpoint,
                       std::vector<std::string>* argv_out) {
  std::vector<std::string> args = {o.gpupack, "server", "--listen", "127.0.0.1:0", "--db", dir + "/gpupack.db",
                                   "--log-level", "warn"};
  *argv_out = args;
  std::string out_path = dir + "/server.out";
  pid_t pid = fork();
  if (pid < 0) SwarmDie("fork failed");
  if (pid == 0) {
    sigset_t none;  // serve mode blocks its signals (bench/swarm_serve.h); the server must not inherit that
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> cargs;
    for (auto& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    execv(cargs[0], cargs.data());
    _exit(127);
  }
  for (int i = 0; i < 100; ++i) {
    std::ifstream in(out_path);
    for (std::string line; std::getline(in, line);) {
      size_t api = line.find("ECS API"), http = line.find("http://");
      if (api != std::string::npos && http != std::string::npos) {
        *endpoint = line.substr(http, line.find(' ', http) - http);
        return pid;
      }
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) SwarmDie("the server exited; see " + out_path);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, SIGTERM);
  SwarmDie("the server printed no endpoint within 10 s");
}

Json RegisterBody(const std::string& cluster, int index) {
  Json devices = Json::array();
  for (int g = 0; g < 8; ++g) {
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-5a1f0000-%04x-4000-8000-%012x", index, g);
    devices.push_back({{"id", uuid}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", 81559}}}});
  }
  return {{"cluster", cluster},
          {"instanceIdentityDocument", Json{{"instanceId", "swarm-" + std::to_string(index)}}.dump()},
          {"totalResources", Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", 65536}},
                                          {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", 262144}}})},
          {"platformDevices", devices},
          {"attributes", Json::array({{{"name", "gpupack.agent-channel"}, {"value", "v1"}},
                                      {{"name", "ecs.capability.gpu-sharing-mps"}},
                                      {{"name", "gpupack.gpu-model"}, {"value", "simulated H100"}}})},
          {"versionInfo", {{"agentVersion", "agent_swarm"}}}};
}

Quantiles Summarize(std::vector<double> v) {
  Quantiles q;
  q.n = v.size();
  if (v.empty()) return q;
  std::sort(v.begin(), v.end());
  auto at = [&](double p) { return v[std::min(v.size() - 1, static_cast<size_t>(std::ceil(p * v.size())) - 1)]; };
  q.p50 = at(0.5);
  q.p90 = at(0.9);
  q.p99 = at(0.99);
  q.max = v.back();
  return q;
}

}  // namespace gpupack::bench
