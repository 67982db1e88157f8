#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <regex>

#include <CLI/CLI.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api/leadership.h"
#include "api/auth/request_auth.h"
#include "api/server.h"
#include "cli/commands.h"
#include "cli/server_runtime.h"
#include "protocol/sigv4_verifier.h"
#include "scheduler/fragmentation.h"
#include "scheduler/validation.h"
#include "storage/postgres_store.h"
#include "storage/sqlite_store.h"

namespace gpupack::cli {

void AddServerFlags(CLI::App& app, ServerFlags& f) {
  app.add_option("--listen", f.listen, "HOST:PORT to serve the ECS API on (port 0 = any free port)")
      ->capture_default_str();
  app.add_option("--db", f.db,
                 "SQLite database file (created if missing), or a PostgreSQL database as a libpq URI "
                 "postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?...] (several servers may share one; docs/ha.md)")
      ->capture_default_str();
  app.add_option("--region", f.region, "AWS region named in ARNs")->capture_default_str();
  app.add_option("--account-id", f.account_id, "12-digit account id named in ARNs")->capture_default_str();
  app.add_option("--credentials", f.credentials,
                 "AWS shared-credentials file (mode 0600) of the keys allowed in; every request except GET "
                 "/healthz and /metrics must then carry a valid SigV4 signature for service ecs and --region");
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error or off")->capture_default_str();
  app.add_option("--threads", f.threads, "HTTP io threads")->capture_default_str();
  app.add_flag("--insecure-no-auth", f.insecure_no_auth,
               "serve a non-loopback address without authentication (anyone who reaches it can run tasks)");
  app.add_option("--default-strategy", f.default_strategy,
                 "placement strategy of a task that shares a GPU and names none, as TYPE[:FIELD] (binpack:gpuMemory, "
                 "binpack:memory, spread:instanceId, random, ...); other tasks without one are placed at random, "
                 "as ECS places them")
      ->capture_default_str();
  app.add_flag("--place-on-disconnected", f.place_on_disconnected,
               "place tasks on container instances whose agent is not connected (benchmarks and simulations "
               "whose client plays the agent with SubmitTaskStateChange; such tasks never start otherwise)");
  app.add_option("--max-provisioning-tasks", f.max_provisioning_tasks,
                 "tasks of one cluster that may wait for a capacity provider's capacity (PROVISIONING) at once; a "
                 "RunTask that could pass it is refused with LimitExceededException (ECS's quota is 500)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000}));
  app.add_option("--provisioning-timeout", f.provisioning_timeout_s,
                 "seconds a task may wait in PROVISIONING before it stops (TaskFailedToStart)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{7 * 24 * 3600}));
  app.add_option("--backfill-reservation-after", f.backfill_reservation_after_s,
                 "seconds a capacity provider's head of line waits before the instance where it fits soonest is "
                 "held for it (smaller tasks backfill past it until then; docs/api.md, The order of the line)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{7 * 24 * 3600}));
  app.add_option("--advertise", f.advertise,
                 "with a PostgreSQL --db: the URL (http://HOST:PORT) at which the other servers reach this one to "
                 "forward calls to it while it leads (default: http://LISTEN; required when LISTEN is a wildcard "
                 "address or port 0)");
  app.add_option("--server-name", f.server_names,
                 "with --credentials: HOST[:PORT] (port 80 when none), repeatable: another name a signed request's "
                 "Host may carry, besides --listen's address and --advertise's (a proxy or load balancer in front of "
                 "this server, the other replicas a standby forwards from); requests signed for any other host are "
                 "refused");
  app.add_flag("--metrics-per-task", f.metrics_per_task,
               "serve the per-task series on /metrics (gpupack_task_gpu_memory_allocated_bytes, "
               "gpupack_task_gpu_compute_limit_ratio: two per GPU container of a task, labelled with its task ARN "
               "and container name); off, /metrics names no task and no container (it needs no signature)");
  app.add_option("--lease-ttl-ms", f.lease_ttl_ms,
                 "with a PostgreSQL --db: how long the leader's lease lasts without a renewal (renewed about every "
                 "second); a standby takes over this long after the leader is gone")
      ->capture_default_str();
  app.add_option("--max-read-staleness-ms", f.max_read_staleness_ms,
                 "with a PostgreSQL --db: a standby answers Describe/List calls itself while its copy of the state is "
                 "at most this old (0: it forwards them to the leader); a call that sends back the "
                 "x-gpupack-commit-seq header of an answer is answered once the standby holds that commit")
      ->capture_default_str();
  // A test hook (tests/integration/ha_hot.test.mjs): while the file exists the standby applies no commit.
  app.add_option("--ha-follow-pause-file", f.follow_pause_file)->group("");
  app.add_option("--max-agent-channels", f.max_agent_channels,
                 "agent channel connections open at once (1..100000); one more upgrade is answered 503 and the "
                 "agent retries. The process needs this many file descriptors besides its 4096 HTTP connections")
      ->capture_default_str();
  app.add_option("--agent-send-queue-mib", f.agent_send_queue_mib,
                 "MiB one agent channel connection may hold queued for sending (1..1024); an agent that does not "
                 "read past it is disconnected and reconciles when it reconnects")
      ->capture_default_str();
  app.add_option("--agent-hello-mib", f.agent_hello_mib,
                 "MiB of one agent's hello sent in parts (1..1024): an agent whose hello is larger is refused with "
                 "an error; 64 MiB holds some 50 times the hello of 360 tasks of 10 containers")
      ->capture_default_str();
  app.add_option("--max-connections-per-address", f.max_connections_per_address,
                 "HTTP connections open at once from one client address (1..100000); one more is answered 503. "
                 "Raise it when many clients reach the server through one proxy or NAT address")
      ->capture_default_str();
  app.add_option("--http-read-timeout", f.http_read_timeout_s,
                 "seconds within which a whole HTTP request, headers and body, must arrive (1..600); a slower one "
                 "is closed unanswered")
      ->capture_default_str();
  app.add_option("--fragmentation-workload", f.fragmentation_workload,
                 "JSON file {\"shapes\": [{\"weight\", \"cpu\", \"memory\", \"gpuMemory\" or \"gpus\", \"memberOf\"}]}: "
                 "the target workload of placementStrategy binpack(fragmentation) in every cluster (default: "
                 "learned from each cluster's recent RunTask demands); see docs/api.md");
}

namespace {

// LoadFragmentationWorkload reads --fragmentation-workload: {"shapes": [{"weight": 3, "cpu": 2048, "memory": 8192,
// "gpuMemory": 4096}, {"weight": 1, "cpu": 16384, "memory": 65536, "gpus": 4, "memberOf": "attribute:x == y"}]}.
// cpu in CPU units, memory and gpuMemory in MiB (gpuMemory: a shared task on one GPU; gpus: dedicated GPUs).
Result<std::shared_ptr<const TargetWorkload>> LoadFragmentationWorkload(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidParameter("--fragmentation-workload: cannot read " + path);
  auto bad = [&](const std::string& what) {
    return Status::InvalidParameter("--fragmentation-workload " + path + ": " + what);
  };
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("shapes") || !j["shapes"].is_array() || j["shapes"].empty())
    return bad("expected {\"shapes\": [...]} with at least one shape");
  std::vector<WorkloadShape> shapes;
  for (size_t i = 0; i < j["shapes"].size(); ++i) {
    const nlohmann::json& e = j["shapes"][i];
    const std::string at = "shapes[" + std::to_string(i) + "]";
    if (!e.is_object()) return bad(at + " must be an object");
    auto number = [&](const char* key, int64_t& out) -> bool {
      if (!e.contains(key)) return true;
      if (!e[key].is_number_integer() || e[key].get<int64_t>() < 0) return false;
      out = e[key].get<int64_t>();
      return true;
    };
    WorkloadShape s;
    int64_t gpu_memory = 0, gpus = 0;
    if (!number("cpu", s.cpu) || !number("memory", s.memory) || !number("gpuMemory", gpu_memory) ||
        !number("gpus", gpus))
      return bad(at + ": cpu, memory, gpuMemory and gpus must be integers >= 0");
    if (gpu_memory > 0 && gpus > 0) return bad(at + ": a shape has gpuMemory (shared) or gpus (dedicated), not both");
    if (gpu_memory > 0) {
      s.gpu_kind = GpuKind::kShared;
      s.gpu_memory = gpu_memory;
    } else if (gpus > 0) {
      s.gpu_kind = GpuKind::kDedicated;
      s.gpu_count = static_cast<int>(gpus);
    }
    s.weight = 1;
    if (e.contains("weight")) {
      if (!e["weight"].is_number() || e["weight"].get<double>() <= 0) return bad(at + ": weight must be > 0");
      s.weight = e["weight"].get<double>();
    }
    if (e.contains("memberOf")) {
      if (!e["memberOf"].is_string()) return bad(at + ": memberOf must be a string");
      if (auto q = query::Parse(e["memberOf"].get<std::string>()); !q.ok()) return bad(at + ": " + q.status().message());
      s.member_of.push_back(e["memberOf"].get<std::string>());
    }
    shapes.push_back(std::move(s));
  }
  return BuildTargetWorkload(shapes, 1.0);
}

}  // namespace

namespace {

// ChannelBoundsError checks the agent channel's and the HTTP transport's bound flags; empty when all are in
// range. Each range refuses 0 and negative values, and values no host could honour (more connections than file
// descriptors, a queue or hello of more than 1 GiB per agent).
std::string ChannelBoundsError(const ServerFlags& f) {
  struct Bound {
    const char* flag;
    int64_t value;
    int64_t hi;  // the range is 1..hi
    const char* what;
  };
  const Bound bounds[] = {
      {"--max-agent-channels", f.max_agent_channels, 100'000, "agent channel connections open at once"},
      {"--agent-send-queue-mib", f.agent_send_queue_mib, 1024, "MiB queued per agent connection"},
      {"--agent-hello-mib", f.agent_hello_mib, 1024, "MiB of one agent's hello"},
      {"--max-connections-per-address", f.max_connections_per_address, 100'000,
       "HTTP connections open at once from one client address"},
      {"--http-read-timeout", f.http_read_timeout_s, 600, "seconds to read a whole HTTP request"},
  };
  for (const Bound& b : bounds) {
    if (b.value < 1 || b.value > b.hi)
      return std::string(b.flag) + " must be 1.." + std::to_string(b.hi) + " (" + b.what + "), got " +
             std::to_string(b.value);
  }
  return "";
}

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

Result<PlacementStrategy> ParseDefaultStrategy(const std::string& text) {
  const size_t colon = text.find(':');
  PlacementStrategy s{text.substr(0, colon), colon == std::string::npos ? "" : text.substr(colon + 1)};
  if (Status st = ValidatePlacement({}, {s}); !st.ok()) return st;
  return s;
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "gpupack: %s\n", message.c_str());
  return 2;
}

void WaitForSignal() {
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!g_stop) {
    timespec nap{0, 100'000'000};
    nanosleep(&nap, nullptr);
  }
}

struct ServerRuntime::Impl {
  std::unique_ptr<api::RequestAuthenticator> authenticator;  // null without --credentials; outlives the rest
  std::unique_ptr<api::RequestAuthenticator> logs_authenticator;  // the same keys, SigV4 service "logs"
  std::shared_ptr<api::ServerNames> names;  // with --credentials: the Hosts a signed request may name
  size_t key_count = 0;
  std::unique_ptr<Store> store;         // SqliteStore, or PostgresStore for a postgres:// --db
  std::unique_ptr<PostgresStore> lease_store;  // with PostgreSQL: the lease's own connection
  std::unique_ptr<api::Server> server;  // destroyed before the store (SQLite: the one server)
  std::unique_ptr<api::Replica> replica;  // with PostgreSQL: leader or standby; destroyed before the stores
  std::string endpoint;
};

ServerRuntime::ServerRuntime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ServerRuntime::~ServerRuntime() {
  impl_->server.reset();
  impl_->replica.reset();
}

std::string ServerRuntime::endpoint() const { return impl_->endpoint; }

std::string ServerRuntime::auth_summary() const {
  if (!impl_->authenticator) return "none: unsigned requests are served (loopback or --insecure-no-auth)";
  const std::vector<std::string> names = impl_->names->names();
  std::string shown;
  for (size_t i = 0; i < names.size() && i < 4; ++i) shown += (i ? ", " : "") + names[i];
  if (names.size() > 4) shown += ", ... (" + std::to_string(names.size()) + " in all)";
  return "SigV4, service ecs, region " + impl_->authenticator->verifier().region() + ", " +
         std::to_string(impl_->key_count) + " key(s), host " + shown;
}

bool ServerRuntime::AgentsConnected(const std::vector<std::string>& instance_arns,
                                    std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!impl_->server) return false;  // several servers on PostgreSQL: `gpupack up` never runs them
  for (;;) {
    auto view = impl_->server->control_plane().applier().View();
    bool all = true;
    for (const auto& arn : instance_arns) {
      const ContainerInstance* inst = view->FindInstance(arn);
      all = all && inst && inst->agent_connected;
    }
    if (all) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    timespec nap{0, 20'000'000};
    nanosleep(&nap, nullptr);
  }
}

std::unique_ptr<ServerRuntime> ServerRuntime::Start(const ServerFlags& f, int* exit_code) {
  auto usage = [&](const std::string& m) {
    *exit_code = Usage(m);
    return nullptr;
  };
  auto fail = [&](const std::string& m) {
    std::fprintf(stderr, "gpupack: %s\n", m.c_str());
    *exit_code = 1;
    return nullptr;
  };
  auto level = spdlog::level::from_str(f.log_level);
  if (level == spdlog::level::off && f.log_level != "off")
    return usage("--log-level must be one of trace, debug, info, warn, error, off");
  spdlog::set_level(level);

  size_t colon = f.listen.rfind(':');
  if (colon == std::string::npos) return usage("--listen must be HOST:PORT, e.g. 127.0.0.1:8080");
  std::string host = f.listen.substr(0, colon), port_text = f.listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = -1;
  try {
    port = std::stoi(port_text);
  } catch (...) {
  }
  if (port < 0 || port > 65535 || port_text.empty()) return usage("--listen port must be 0..65535");
  if (!std::regex_match(f.account_id, std::regex("[0-9]{12}"))) return usage("--account-id must be 12 digits");
  if (!std::regex_match(f.region, std::regex("[a-z]{2}(-[a-z]+)+-[0-9]+")))
    return usage("--region must look like us-east-1");
  if (std::string bad = ChannelBoundsError(f); !bad.empty()) return usage(bad);
  auto impl = std::make_unique<Impl>();
  // The names a signed request's Host may carry (api/auth/server_names.h): --server-name's, --advertise's, and
  // --listen's once the server is bound (its port may be 0 until then).
  auto names = std::make_shared<api::ServerNames>();
  for (const std::string& name : f.server_names) {
    if (Status s = names->Add(name); !s.ok()) return usage("--server-name " + s.message());
  }
  if (!f.advertise.empty()) {
    std::string authority = f.advertise.rfind("http://", 0) == 0 ? f.advertise.substr(7) : "";
    if (!authority.empty() && authority.back() == '/') authority.pop_back();
    if (!authority.empty()) (void)names->Add(authority);  // a malformed one is refused below (with PostgreSQL)
  }
  if (!f.credentials.empty()) {
    if (f.insecure_no_auth)
      return usage("--credentials and --insecure-no-auth contradict each other: drop --insecure-no-auth");
    auto keys = api::LoadCredentialsFile(f.credentials);
    if (!keys.ok()) return usage(keys.status().message());
    impl->key_count = keys->size();
    impl->logs_authenticator = std::make_unique<api::RequestAuthenticator>(api::SigV4Verifier(*keys, f.region, "logs"));
    impl->authenticator =
        std::make_unique<api::RequestAuthenticator>(api::SigV4Verifier(std::move(*keys), f.region, "ecs"));
    impl->names = names;
    impl->authenticator->SetServerNames(names);
    impl->logs_authenticator->SetServerNames(names);
  } else if (!IsLoopback(host) && !f.insecure_no_auth) {
    return usage("refusing to listen on " + host +
                 " without authentication: anyone who reaches it could run tasks on your GPUs. Pass "
                 "--credentials FILE (requests must then be SigV4-signed), listen on 127.0.0.1, or pass "
                 "--insecure-no-auth if the network is yours alone");
  }

  // A database this start creates is removed again if the server cannot start (a busy port, say): a failed
  // start leaves nothing behind. A PostgreSQL database is the operator's: it is never removed.
  const bool postgres = PostgresStore::IsUri(f.db);
  std::error_code exists_ec;
  const bool db_existed = postgres || std::filesystem::exists(f.db, exists_ec);
  auto remove_new_db = [&] {
    if (db_existed) return;
    std::error_code ignored;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(f.db + suffix, ignored);
    std::filesystem::remove(SqliteStore::LockPath(f.db), ignored);
  };
  const std::string db_name = postgres ? PostgresStore::Redacted(f.db) : f.db;
  std::string advertise = f.advertise;
  if (postgres) {
    if (advertise.empty()) {
      if (port == 0 || host == "0.0.0.0" || host == "::")
        return usage("with a PostgreSQL --db and --listen " + f.listen +
                     ", pass --advertise http://HOST:PORT: the URL the other servers reach this one at");
      advertise = "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                  std::to_string(port);
    }
    if (advertise.rfind("http://", 0) != 0) return usage("--advertise must be http://HOST:PORT");
    if (f.lease_ttl_ms < 1000 || f.lease_ttl_ms > 600'000) return usage("--lease-ttl-ms must be 1000..600000");
    auto store = PostgresStore::Open(f.db);
    if (!store.ok()) return fail(store.status().message());
    auto lease_store = PostgresStore::Open(f.db);
    if (!lease_store.ok()) return fail(lease_store.status().message());
    impl->store = std::move(*store);
    impl->lease_store = std::move(*lease_store);
  } else {
    auto store = SqliteStore::Open(f.db);
    if (!store.ok()) {
      // A database another server holds is that server's, even if it was created after db_existed was read.
      if (store.status().code() != ErrorCode::kConflict) remove_new_db();
      return fail("cannot open database " + f.db + ": " + store.status().message());
    }
    impl->store = std::move(*store);
  }
  api::ServerOptions options;
  options.host = host;
  options.port = static_cast<uint16_t>(port);
  options.threads = f.threads;
  options.control_plane.arn.region = f.region;
  options.control_plane.arn.account = f.account_id;
  options.control_plane.placement.place_on_disconnected = f.place_on_disconnected;
  options.control_plane.placement.max_provisioning_per_cluster = static_cast<size_t>(f.max_provisioning_tasks);
  options.control_plane.placement.provisioning_timeout_ms = f.provisioning_timeout_s * 1000;
  options.control_plane.placement.reservation_after_ms = f.backfill_reservation_after_s * 1000;
  options.metrics_per_task = f.metrics_per_task;
  options.max_websockets = static_cast<size_t>(f.max_agent_channels);
  options.max_send_queue_bytes = static_cast<size_t>(f.agent_send_queue_mib) << 20;
  options.channel.max_hello_bytes = static_cast<size_t>(f.agent_hello_mib) << 20;
  options.max_connections_per_address = static_cast<size_t>(f.max_connections_per_address);
  options.http_read_timeout = std::chrono::seconds(f.http_read_timeout_s);
  auto strategy = ParseDefaultStrategy(f.default_strategy);
  if (!strategy.ok()) return usage("--default-strategy: " + strategy.status().message());
  options.control_plane.placement.shared_gpu_default = {*strategy};
  if (!f.fragmentation_workload.empty()) {
    auto w = LoadFragmentationWorkload(f.fragmentation_workload);
    if (!w.ok()) return usage(w.status().message());
    options.control_plane.fragmentation_workload = std::move(*w);
  }
  options.authenticator = impl->authenticator.get();
  options.logs_authenticator = impl->logs_authenticator.get();
  std::signal(SIGPIPE, SIG_IGN);
  if (postgres) {
    api::ReplicaOptions replica;
    replica.server = std::move(options);
    replica.advertise = advertise;
    replica.lease_ttl = std::chrono::milliseconds(f.lease_ttl_ms);
    if (f.max_read_staleness_ms < 0 || f.max_read_staleness_ms > 60'000)
      return usage("--max-read-staleness-ms must be 0..60000");
    replica.max_read_staleness = std::chrono::milliseconds(f.max_read_staleness_ms);
    replica.max_follow_lag = std::max(std::chrono::milliseconds(3000), replica.lease_ttl);
    replica.follow_pause_file = f.follow_pause_file;
    replica.renew_every = std::min(std::chrono::milliseconds(1000), replica.lease_ttl / 3);
    replica.forward_timeout = std::max(std::chrono::milliseconds(1000), replica.lease_ttl / 2);
    auto started = api::Replica::Start(std::move(replica), static_cast<PostgresStore&>(*impl->store),
                                       *impl->lease_store);
    if (!started.ok()) {
      // InvalidParameter: the replica's own setup is wrong (another server answers at its --advertise URL).
      const bool setup = started.status().code() == ErrorCode::kInvalidParameter;
      return fail((setup ? "" : "cannot listen on " + f.listen + ": ") + started.status().message());
    }
    impl->replica = std::move(*started);
    names->AddListen(host, impl->replica->port());
    impl->endpoint = "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                     std::to_string(impl->replica->port());
    return std::unique_ptr<ServerRuntime>(new ServerRuntime(std::move(impl)));
  }
  api::StartFailure failure = api::StartFailure::kNone;
  auto server = api::Server::Start(std::move(options), *impl->store, &failure);
  if (!server.ok()) {
    const std::string m = server.status().message();
    impl->store.reset();  // closed before its files go
    remove_new_db();
    if (failure == api::StartFailure::kLoadState) return fail(m + " (database " + db_name + ")");
    return fail(m);  // kListen: the HTTP server's message names the address
  }
  impl->server = std::move(*server);
  names->AddListen(host, impl->server->port());
  impl->endpoint = "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                   std::to_string(impl->server->port());
  return std::unique_ptr<ServerRuntime>(new ServerRuntime(std::move(impl)));
}

int RunServer(const ServerFlags& f) {
  int code = 0;
  auto server = ServerRuntime::Start(f, &code);
  if (!server) return code;
  std::printf("gpupack %s server\n", kVersion);
  std::printf("  ECS API   %s  (region %s, account %s)\n", server->endpoint().c_str(), f.region.c_str(),
              f.account_id.c_str());
  std::printf("  database  %s\n", PostgresStore::IsUri(f.db) ? PostgresStore::Redacted(f.db).c_str() : f.db.c_str());
  if (PostgresStore::IsUri(f.db))
    std::printf("  replica   %s  (leader or standby: %s/readyz)\n",
                f.advertise.empty() ? server->endpoint().c_str() : f.advertise.c_str(), server->endpoint().c_str());
  std::printf("  auth      %s\n", server->auth_summary().c_str());
  std::printf("  console   %s/console/\n", server->endpoint().c_str());
  std::printf("  health    %s/healthz   metrics %s/metrics\n", server->endpoint().c_str(), server->endpoint().c_str());
  std::printf("  agents    at most %lld channel connections, %lld MiB send queue each, hello up to %lld MiB\n",
              static_cast<long long>(f.max_agent_channels), static_cast<long long>(f.agent_send_queue_mib),
              static_cast<long long>(f.agent_hello_mib));
  std::fflush(stdout);
  WaitForSignal();
  spdlog::info("shutting down");
  server.reset();
  return 0;
}

}  // namespace gpupack::cli
