#include <csignal>
#include <ctime>
#include <cstdio>
#include <memory>
#include <regex>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "api/control_plane.h"
#include "api/ecs_handler.h"
#include "api/http_server.h"
#include "cli/commands.h"
#include "storage/group_committer.h"
#include "storage/sqlite_store.h"

namespace gpupack::cli {

void AddServerFlags(CLI::App& app, ServerFlags& f) {
  app.add_option("--listen", f.listen, "HOST:PORT to serve the ECS API on (port 0 = any free port)")
      ->capture_default_str();
  app.add_option("--db", f.db, "SQLite database file (created if missing)")->capture_default_str();
  app.add_option("--region", f.region, "AWS region named in ARNs")->capture_default_str();
  app.add_option("--account-id", f.account_id, "12-digit account id named in ARNs")->capture_default_str();
  app.add_option("--credentials", f.credentials, "AWS shared-credentials file; requests must be SigV4-signed");
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error or off")->capture_default_str();
  app.add_option("--threads", f.threads, "HTTP io threads")->capture_default_str();
  app.add_flag("--insecure-no-auth", f.insecure_no_auth,
               "serve a non-loopback address without authentication (anyone who reaches it can run tasks)");
}

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Usage(const std::string& message) {
  std::fprintf(stderr, "gpupack: %s\n", message.c_str());
  return 2;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

int RunServer(const ServerFlags& f, bool banner_for_up) {
  auto level = spdlog::level::from_str(f.log_level);
  if (level == spdlog::level::off && f.log_level != "off")
    return Usage("--log-level must be one of trace, debug, info, warn, error, off");
  spdlog::set_level(level);

  std::string host = f.listen, port_text;
  size_t colon = f.listen.rfind(':');
  if (colon == std::string::npos) return Usage("--listen must be HOST:PORT, e.g. 127.0.0.1:8080");
  host = f.listen.substr(0, colon);
  port_text = f.listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = -1;
  try {
    port = std::stoi(port_text);
  } catch (...) {
  }
  if (port < 0 || port > 65535 || port_text.empty()) return Usage("--listen port must be 0..65535");
  if (!std::regex_match(f.account_id, std::regex("[0-9]{12}"))) return Usage("--account-id must be 12 digits");
  if (!std::regex_match(f.region, std::regex("[a-z]{2}(-[a-z]+)+-[0-9]+")))
    return Usage("--region must look like us-east-1");
  if (!f.credentials.empty())
    return Usage("--credentials: SigV4 authentication is not built yet; serve on loopback without it for now");
  if (!IsLoopback(host) && !f.insecure_no_auth)
    return Usage("refusing to listen on " + host +
                 " without authentication: anyone who reaches it could run tasks on your GPUs. Listen on "
                 "127.0.0.1, or pass --insecure-no-auth if the network is yours alone");

  auto store = SqliteStore::Open(f.db);
  if (!store.ok()) {
    std::fprintf(stderr, "gpupack: cannot open database %s: %s\n", f.db.c_str(), store.status().message().c_str());
    return 1;
  }
  GroupCommitter committer(**store);
  api::ControlPlaneOptions cp_options;
  cp_options.arn.region = f.region;
  cp_options.arn.account = f.account_id;
  api::ControlPlane control_plane(cp_options, **store, committer);
  if (Status s = control_plane.Load(); !s.ok()) {
    std::fprintf(stderr, "gpupack: cannot load state from %s: %s\n", f.db.c_str(), s.message().c_str());
    return 1;
  }
  api::EcsHandler handler(control_plane);
  api::HttpServerOptions http;
  http.host = host;
  http.port = static_cast<uint16_t>(port);
  http.threads = std::max(1, f.threads);
  auto server = api::HttpServer::Create(http, handler.AsHandler());
  if (!server.ok()) {
    std::fprintf(stderr, "gpupack: cannot listen on %s: %s\n", f.listen.c_str(), server.status().message().c_str());
    return 1;
  }
  api::HttpServer* srv = server->get();
  handler.SetExtraMetrics([srv, &committer] {
    auto s = srv->stats();
    auto c = committer.stats();
    return "# TYPE gpupack_http_connections_open gauge\ngpupack_http_connections_open " +
           std::to_string(s.connections_open) + "\n# TYPE gpupack_http_requests_total counter\ngpupack_http_requests_total " +
           std::to_string(s.requests) + "\n# TYPE gpupack_store_commits_total counter\ngpupack_store_commits_total " +
           std::to_string(c.commits) + "\n# TYPE gpupack_store_batches_total counter\ngpupack_store_batches_total " +
           std::to_string(c.batches) + "\n";
  });
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  srv->Start();
  std::string endpoint = "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                         std::to_string(srv->port());
  std::printf("gpupack %s %s\n", kVersion, banner_for_up ? "up: a local cluster" : "server");
  std::printf("  ECS API   %s  (region %s, account %s)\n", endpoint.c_str(), f.region.c_str(), f.account_id.c_str());
  std::printf("  database  %s\n", f.db.c_str());
  std::printf("  health    %s/healthz   metrics %s/metrics\n", endpoint.c_str(), endpoint.c_str());
  if (banner_for_up) {
    std::printf("\nPoint an AWS SDK or the AWS CLI at it:\n");
    std::printf("  export AWS_ENDPOINT_URL_ECS=%s AWS_REGION=%s\n", endpoint.c_str(), f.region.c_str());
    std::printf("  export AWS_ACCESS_KEY_ID=gpupack AWS_SECRET_ACCESS_KEY=gpupack\n");
    std::printf("Ctrl-C stops it.\n");
  }
  std::fflush(stdout);
  while (!g_stop) {
    timespec nap{0, 100'000'000};
    nanosleep(&nap, nullptr);
  }
  spdlog::info("shutting down");
  srv->Stop();
  committer.Flush();
  return 0;
}

}  // namespace gpupack::cli
