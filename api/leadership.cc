#include "api/leadership.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api/channel/agent_channel.h"
#include "api/console/console_handler.h"
#include "api/ha/forwarding.h"
#include "api/http/http_wire.h"

namespace gpupack::api {
namespace {

using Clock = std::chrono::steady_clock;
using http_internal::ErrorResponse;

// kKnockGap: the shortest time between two lease steps that knocks asked for (Replica::StepSoon).
constexpr auto kKnockGap = std::chrono::milliseconds(50);
using http_internal::NewRequestId;

// RandomHex: 64 random bits in hex, which tell two processes on one advertise URL apart in the lease's holder.
std::string RandomHex() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

// ---- Replica::StandbyFront ----------------------------------------------------------------------------------

// StandbyFront: the standby's HTTP server. /healthz and /readyz are answered here; every other request goes to
// the forwarding threads, which send it to the leader and answer with what the leader answered. Thread-safe;
// the destructor stops the server and then the threads (queued requests are answered 503).
class Replica::StandbyFront {
 public:
  using LeaderFn = std::function<std::string()>;       // the leader's URL now, "" when unknown
  using ReadyFn = std::function<HttpResponse()>;

  using FollowerFn = std::function<std::shared_ptr<Follower>()>;  // the hot state, null while none
  using KnockFn = std::function<void()>;  // the leader may be gone: step the lease soon (Replica::StepSoon)

  static Result<std::unique_ptr<StandbyFront>> Start(const std::string& host, uint16_t port, std::string me,
                                                     LeaderFn leader, ReadyFn ready, FollowerFn follower,
                                                     KnockFn knock, std::chrono::milliseconds timeout,
                                                     std::chrono::milliseconds read_wait) {
    std::unique_ptr<StandbyFront> f(new StandbyFront(std::move(me), std::move(leader), std::move(ready), timeout));
    f->follower_ = std::move(follower);
    f->knock_ = std::move(knock);
    f->read_wait_ = read_wait;
    HttpServerOptions http;
    http.host = host;
    http.port = port;
    http.threads = 2;
    WebSocketHandler refuse;
    StandbyFront* self = f.get();
    refuse.accept = [self](const HttpRequest&) {
      // NotLeader, naming the leader in the body's "leader" and the x-gpupack-leader header when it is known.
      // An agent comes to a standby when it lost the leader: the lease is stepped soon, so the next agents are
      // sent to whoever leads by then.
      self->knock_();
      const std::string leader = self->leader_();
      const std::string where = leader.empty() ? std::string(", unknown now: retry") : " at " + leader;
      return ChannelRefusal(
          Status::Server("this gpupack server is a standby; the agent channel is served by the leader" + where),
          protocol::RefusalCode::kNotLeader, leader);
    };
    refuse.busy_fields = {{"code", protocol::Name(protocol::RefusalCode::kBusy)}};
    refuse.on_open = [](const std::shared_ptr<WebSocketConnection>& c, const HttpRequest&) { c->Close(); };
    refuse.on_message = [](const std::shared_ptr<WebSocketConnection>&, std::string) {};
    refuse.on_close = [](const std::shared_ptr<WebSocketConnection>&) {};
    http.websockets[kAgentChannelPath] = std::move(refuse);
    auto server = HttpServer::Create(http, [self](HttpRequest&& req, Responder respond) {
      self->Handle(std::move(req), std::move(respond));
    });
    if (!server.ok()) return server.status();
    f->http_ = std::move(*server);
    for (int i = 0; i < kForwarders; ++i) f->threads_.emplace_back([self] { self->Run(); });
    f->http_->Start();
    return f;
  }

  ~StandbyFront() {
    if (http_) http_->Stop();
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    connections_.Abort();  // a call waiting on a leader that stopped answering must not hold up the takeover
    for (auto& t : threads_) t.join();
  }

  uint16_t port() const { return http_->port(); }

 private:
  // kForwarders: the calls a standby has in flight to the leader at once, each on a thread of its own that waits
  // for the leader's answer. The leader's group commit batches what arrives meanwhile, so this bounds what a
  // standby can forward per second (about kForwarders / commit latency): 8 gave about 600 RunTask calls/s.
  static constexpr int kForwarders = 64;
  static constexpr size_t kMaxQueued = 4096;
  // kMaxHeldBytes: the request bodies a standby holds for forwarding at once, queued or in flight; past it a
  // call is answered 503 at once, so a flood of large bodies while the leader is slow costs a bounded memory.
  static constexpr size_t kMaxHeldBytes = size_t{64} << 20;

  StandbyFront(std::string me, LeaderFn leader, ReadyFn ready, std::chrono::milliseconds timeout)
      : me_(std::move(me)), leader_(std::move(leader)), ready_(std::move(ready)), timeout_(timeout) {}

  static HttpResponse Unavailable(const std::string& message) {
    HttpResponse r = ErrorResponse(503, "ServerException", message);
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }

  void Handle(HttpRequest&& req, Responder respond) {
    const std::string path = req.target.substr(0, req.target.find('?'));
    if (req.method == "GET" && path == "/healthz") {
      HttpResponse r;
      r.headers = {{"Content-Type", "application/json"}, {"x-amzn-RequestId", NewRequestId()}};
      r.body = R"({"status":"ok"})";
      respond(std::move(r));
      return;
    }
    if (req.method == "GET" && path == "/readyz") {
      HttpResponse r = ready_();
      r.headers.emplace_back("Content-Type", "application/json");
      r.headers.emplace_back("x-amzn-RequestId", NewRequestId());
      respond(std::move(r));
      return;
    }
    if (req.method == "GET" && path == "/metrics") {
      // The standby's own state, not the leader's figures (each replica is scraped on its own).
      HttpResponse r = ready_();
      const nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
      const int64_t epoch = j.is_object() && j.contains("epoch") ? j["epoch"].get<int64_t>() : 0;
      r.body = "# HELP gpupack_replica_leader Whether this server is the leader of its replicas (1) or a standby (0).\n"
               "# TYPE gpupack_replica_leader gauge\ngpupack_replica_leader 0\n"
               "# HELP gpupack_replica_ready Whether GET /readyz answers 200.\n"
               "# TYPE gpupack_replica_ready gauge\ngpupack_replica_ready " + std::string(r.status == 200 ? "1" : "0") +
               "\n# HELP gpupack_replica_epoch The leader lease's epoch this server knows.\n"
               "# TYPE gpupack_replica_epoch gauge\ngpupack_replica_epoch " + std::to_string(epoch) + "\n";
      r.status = 200;
      r.headers = {{"Content-Type", "text/plain; version=0.0.4"}, {"x-amzn-RequestId", NewRequestId()}};
      respond(std::move(r));
      return;
    }
    if (auto local = ConsoleStaticAnswer(req, NewRequestId())) {
      respond(std::move(*local));  // the console's page needs no leader (and no credentials)
      return;
    }
    // A Describe/List call is answered from the standby's own state when it is fresh enough for it (docs/ha.md,
    // "Reads from standbys"); one naming a commit this state lacks waits for it on a forwarder thread.
    uint64_t want = 0;
    if (Follower::IsLocalRead(req)) {
      if (const std::string* seq = req.Header(kCommitSeqHeader)) want = std::strtoull(seq->c_str(), nullptr, 10);
      if (auto follower = follower_()) {
        if (follower->TryServe(req, respond, want)) return;
      } else {
        want = 0;
      }
    }
    if (req.Header(kForwardedHeader) != nullptr) {
      respond(Unavailable("this gpupack server is a standby too (it was forwarded the request by " +
                          *req.Header(kForwardedHeader) + "); the replicas are changing leader: retry"));
      return;
    }
    const std::string leader = leader_();
    if (leader.empty()) {
      respond(Unavailable("this gpupack server is a standby and no leader is known now: retry"));
      return;
    }
    std::lock_guard lock(mu_);
    if (queue_.size() >= kMaxQueued || held_bytes_ + req.body.size() > kMaxHeldBytes) {
      respond(Unavailable("this gpupack server is a standby with too many requests waiting for the leader: retry"));
      return;
    }
    held_bytes_ += req.body.size();
    const size_t bytes = req.body.size();
    queue_.push_back({std::move(req), std::move(respond), leader, want, bytes});
    cv_.notify_one();
  }

  void Run() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        if (stopping_) {
          for (auto& j : queue_) j.respond(Unavailable("this gpupack server is changing role: retry"));
          queue_.clear();
          return;
        }
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      if (job.want > 0) {
        auto follower = follower_();
        if (follower && follower->WaitAndServe(job.req, job.respond, job.want, read_wait_)) {
          std::lock_guard lock(mu_);
          held_bytes_ -= job.bytes;
          continue;
        }
      }
      auto answer = Forward(job.req, job.leader, me_, timeout_, connections_);
      {
        std::lock_guard lock(mu_);
        held_bytes_ -= job.bytes;
      }
      if (answer.ok()) {
        job.respond(std::move(*answer));
      } else {
        knock_();  // the leader did not answer: it may be gone
        spdlog::warn("standby: forwarding {} failed: {}", job.req.target.substr(0, 100), answer.status().message());
        job.respond(Unavailable(answer.status().message() + "; retry"));
      }
    }
  }

  struct Job {
    HttpRequest req;
    Responder respond;
    std::string leader;
    uint64_t want = 0;  // a read waiting for this commit sequence in the standby's state, then forwarded
    size_t bytes = 0;   // the body's size, counted in held_bytes_
  };

  const std::string me_;
  const LeaderFn leader_;
  const ReadyFn ready_;
  const std::chrono::milliseconds timeout_;
  FollowerFn follower_;
  KnockFn knock_;
  std::chrono::milliseconds read_wait_{1000};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;  // guarded by mu_
  size_t held_bytes_ = 0;  // guarded by mu_: the bodies of the calls queued or in flight
  bool stopping_ = false;  // guarded by mu_
  LeaderConnections connections_;  // the forwarders' keep-alive connections to the leader
  std::vector<std::thread> threads_;
  std::unique_ptr<HttpServer> http_;  // stopped before the threads end
};

// ---- Replica --------------------------------------------------------------------------------------------------

Replica::Replica(ReplicaOptions options, PostgresStore& data, PostgresStore& lease)
    : options_(std::move(options)),
      data_(data),
      holder_(options_.advertise + " #" + std::to_string(::getpid()) + "-" + RandomHex()),
      keeper_(lease, holder_, options_.advertise, options_.lease_ttl) {}

Result<std::unique_ptr<Replica>> Replica::Start(ReplicaOptions options, PostgresStore& data, PostgresStore& lease) {
  if (options.advertise.empty()) return Status::InvalidParameter("a replica needs its advertise URL");
  if (options.renew_every * 2 > options.lease_ttl)
    return Status::InvalidParameter("the lease must last at least two renewals");
  std::unique_ptr<Replica> r(new Replica(std::move(options), data, lease));
  {
    // The port first, as a standby: a port 0 is chosen here and kept for every later role.
    std::lock_guard role(r->role_mu_);
    r->port_ = r->options_.server.port;
    if (Status s = r->ServeAsStandby(); !s.ok()) return s;
  }
  if (Status s = r->CheckAdvertisedAddress(); !s.ok()) return s;
  r->LeaseStep();
  r->Reconcile();
  r->lease_thread_ = std::thread([p = r.get()] { p->LeaseLoop(); });
  r->role_thread_ = std::thread([p = r.get()] { p->RoleLoop(); });
  return r;
}

Status Replica::CheckAdvertisedAddress() {
  // Another server at the URL this one advertises would take this one's calls and agents, and each would take
  // the other's lease as its own at a restart: ask the URL who answers there.
  HttpRequest probe;
  probe.method = "GET";
  probe.target = "/readyz";
  LeaderConnections once;
  auto answer = Forward(probe, options_.advertise, options_.advertise, std::chrono::milliseconds(2000), once);
  if (!answer.ok()) {
    spdlog::warn("leadership: this server cannot reach its own advertised URL {} ({}); the other replicas must",
                 options_.advertise, answer.status().message());
    return Status::Ok();
  }
  const nlohmann::json j = nlohmann::json::parse(answer->body, nullptr, false);
  if (!j.is_object() || !j.contains("role")) return Status::Ok();  // not a gpupack server's /readyz
  const auto replica = j.find("replica");
  if (replica != j.end() && replica->is_string() && *replica == holder_) return Status::Ok();
  return Status::InvalidParameter(
      "another gpupack server already answers at the advertised URL " + options_.advertise + " (" +
      (replica != j.end() && replica->is_string() ? "replica " + replica->get<std::string>() : "an older version") +
      "); give every replica an --advertise URL of its own");
}

Replica::~Replica() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (lease_thread_.joinable()) lease_thread_.join();
  if (role_thread_.joinable()) role_thread_.join();
  std::lock_guard role(role_mu_);
  const bool led = leader_ != nullptr;
  leader_.reset();  // stops serving and commits what was submitted: nothing is committed after this
  int64_t epoch = 0;
  {
    std::lock_guard lock(mu_);
    epoch = lease_.held ? lease_.epoch : 0;
  }
  if (led && epoch > 0) {
    if (Status s = keeper_.Release(epoch); !s.ok())
      spdlog::warn("leadership: could not release the lease (a standby takes over when it expires): {}", s.message());
    else
      spdlog::info("leadership: released the lease (epoch {})", epoch);
  }
  standby_.reset();
  DropFollower().reset();
}

std::shared_ptr<Follower> Replica::DropFollower() {
  std::lock_guard lock(mu_);
  return std::exchange(follower_, nullptr);
}

void Replica::LeaseLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    step_soon_ = false;
    lock.unlock();
    LeaseStep();
    lock.lock();
    const auto stepped = Clock::now();
    cv_.wait_for(lock, options_.renew_every, [&] { return stopping_ || step_soon_; });
    // A knock steps at once, yet never more often than every kKnockGap: a herd of agents knocking costs the
    // database a few statements a second, not one per agent.
    if (!stopping_ && step_soon_) cv_.wait_until(lock, stepped + kKnockGap, [&] { return stopping_; });
  }
}

void Replica::StepSoon() {
  {
    std::lock_guard lock(mu_);
    if (step_soon_ || serving_epoch_ != 0) return;
    step_soon_ = true;
  }
  cv_.notify_all();
}

void Replica::LeaseStep() {
  int64_t held = 0;
  bool bump = false;
  bool may_take = true;
  std::shared_ptr<Follower> follower;
  {
    std::lock_guard lock(mu_);
    held = lease_.held ? lease_.epoch : 0;
    bump = bump_;
    follower = follower_;
    // A standby whose state is too far behind (or still loading) does not try to lead: another one, caught up,
    // takes over without loading the world. The first step of a replica may (nobody follows yet at a cold start).
    may_take = lease_steps_ == 0 || serving_epoch_ != 0;
  }
  if (!may_take) may_take = follower ? follower->progress().ready_to_lead : true;
  const auto start = Clock::now();
  auto v = keeper_.Step(held, bump, may_take);
  {
    std::lock_guard lock(mu_);
    if (!v.ok()) {
      if (reachable_) spdlog::warn("leadership: the database is unreachable: {}", v.status().message());
      reachable_ = false;
      // Past the last renewal's lease the database has surely let it go: no longer held, even if nobody else
      // could take it yet.
      if (lease_.held && Clock::now() >= held_until_) lease_.held = false;
    } else {
      if (!reachable_) spdlog::info("leadership: the database answers");
      reachable_ = true;
      if (v->held != lease_.held || v->epoch != lease_.epoch || v->leader != lease_.leader)
        spdlog::info("leadership: {} (epoch {})", v->held ? "this server holds the lease" : "the leader is " +
                     (v->leader.empty() ? std::string("nobody") : v->leader), v->epoch);
      lease_ = *v;
      ++lease_steps_;
      if (v->held) {
        held_until_ = start + options_.lease_ttl;
        if (bump) bump_ = false;
      }
    }
  }
  cv_.notify_all();
}

void Replica::RoleLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    const uint64_t seen = lease_steps_;
    cv_.wait_for(lock, options_.renew_every, [&] { return stopping_ || lease_steps_ != seen; });
    if (stopping_) return;
    lock.unlock();
    Reconcile();
    lock.lock();
  }
}

void Replica::Reconcile() {
  LeaseKeeper::View v;
  bool reachable = false;
  {
    std::lock_guard lock(mu_);
    v = lease_;
    reachable = reachable_;
  }
  std::lock_guard role(role_mu_);
  if (v.held) {
    int64_t serving = 0;
    {
      std::lock_guard lock(mu_);
      serving = serving_epoch_;
    }
    if (serving != v.epoch) {
      if (Status s = ServeAsLeader(v.epoch); !s.ok())
        spdlog::error("leadership: cannot serve as the leader of epoch {}: {}", v.epoch, s.message());
    } else if (leader_ && !leader_->control_plane().healthy()) {
      // A commit failed (the database went away): reload under a new epoch once the database answers.
      std::lock_guard lock(mu_);
      bump_ = true;
    }
  } else if (reachable) {
    if (leader_) {
      spdlog::warn("leadership: this server lost the lease; the leader is {}", v.leader.empty() ? "unknown" : v.leader);
      (void)ServeAsStandby();
    }
    std::lock_guard lock(mu_);
    forward_to_ = v.leader_alive ? v.leader : "";
  }
}

ServerOptions Replica::LeaderOptions(int64_t epoch) {
  ServerOptions opts = options_.server;
  opts.port = port_;
  opts.channel.epoch = epoch;  // the welcome and every push carry this term: agents ignore older ones
  opts.readiness = [this] { return ReadyResponse(); };
  // Every answer names the commit sequence it reflects: a client sends it back to read its writes anywhere.
  opts.on_response = [this](HttpResponse& r) {
    r.headers.emplace_back(kCommitSeqHeader, std::to_string(data_.last_change_seq()));
  };
  return opts;
}

Status Replica::ServeAsLeader(int64_t epoch) {
  const auto start = Clock::now();
  standby_.reset();
  // The old server first, under its own epoch's fence: what it still commits on its way out was decided on its
  // state, and another leader may have served in between, so it must not pass the new epoch's check.
  leader_.reset();
  data_.SetFence(PostgresStore::Fence{holder_, epoch});
  {
    std::lock_guard lock(mu_);
    serving_epoch_ = 0;
  }
  // A hot standby: its state has every commit but the last few, which nobody can add to any more (this replica
  // holds the lease under a new epoch): apply them and lead, without loading the world.
  if (std::shared_ptr<Follower> follower = DropFollower()) {
    uint64_t applied = 0;
    std::shared_ptr<Server> server = follower->TakeOver(&applied);
    follower.reset();
    Status listen = Status::Server("no hot state");
    for (int attempt = 0; server && attempt < 40; ++attempt) {
      if (listen = server->Promote(epoch, port_); listen.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (server && listen.ok()) {
      leader_ = std::move(server);
      AddReplicaMetrics(leader_->metrics());
      const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      std::lock_guard lock(mu_);
      serving_epoch_ = epoch;
      takeover_changes_ = static_cast<int64_t>(applied);
      takeover_loaded_ = false;
      takeover_ms_ = ms;
      spdlog::info("leadership: serving as the leader (epoch {}) on port {}: took over the standby's state, "
                   "applied {} changes on takeover in {} ms (no reload)", epoch, port_, applied, ms);
      return Status::Ok();
    }
    if (server) spdlog::warn("leadership: the standby's state cannot serve ({}): loading it", listen.message());
  }
  Status last;
  for (int attempt = 0; attempt < 40; ++attempt) {  // the port was just released; binding it may need a moment
    StartFailure failure = StartFailure::kNone;
    auto server = Server::Start(LeaderOptions(epoch), data_, &failure);
    if (server.ok()) {
      leader_ = std::move(*server);
      AddReplicaMetrics(leader_->metrics());
      const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      std::lock_guard lock(mu_);
      serving_epoch_ = epoch;
      takeover_changes_ = -1;
      takeover_loaded_ = true;
      takeover_ms_ = ms;
      spdlog::info("leadership: serving as the leader (epoch {}) on port {}: loaded the state in {} ms", epoch, port_,
                   ms);
      return Status::Ok();
    }
    last = server.status();
    if (failure == StartFailure::kLoadState) break;  // not a port problem
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  (void)ServeAsStandby();
  return last;
}

Status Replica::ServeAsStandby() {
  leader_.reset();
  {
    std::lock_guard lock(mu_);
    serving_epoch_ = 0;
    if (!follower_) {
      // The hot state: loaded in the background (reads are forwarded meanwhile), then kept up to date.
      FollowerOptions f;
      f.server = LeaderOptions(0);
      f.max_read_staleness = options_.max_read_staleness;
      f.max_lag = options_.max_follow_lag;
      f.pause_file = options_.follow_pause_file;
      follower_ = std::make_shared<Follower>(std::move(f), data_);
    }
  }
  if (standby_) return Status::Ok();
  Status last;
  for (int attempt = 0; attempt < 40; ++attempt) {
    auto front = StandbyFront::Start(
        options_.server.host, port_, options_.advertise,
        [this] {
          std::lock_guard lock(mu_);
          return forward_to_;
        },
        [this] { return ReadyResponse(); },
        [this] {
          std::lock_guard lock(mu_);
          return follower_;
        },
        [this] { StepSoon(); }, options_.forward_timeout, options_.read_wait);
    if (front.ok()) {
      standby_ = std::move(*front);
      port_ = standby_->port();
      return Status::Ok();
    }
    last = front.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return last;
}

// AddReplicaMetrics: the leader's /metrics also says its role, readiness and epoch (a standby's says the same
// of itself: StandbyFront).
void Replica::AddReplicaMetrics(MetricsRegistry& metrics) {
  auto gauge = [&](const char* name, const char* help, std::function<double(const Readiness&)> value) {
    metrics.AddCollected(name, help, MetricType::kGauge, [this, value](std::vector<MetricSample>& out) {
      out.emplace_back(MetricLabels{}, value(readiness()));
    });
  };
  gauge("gpupack_replica_leader", "Whether this server is the leader of its replicas (1) or a standby (0).",
        [](const Readiness& r) { return r.role == "leader" ? 1.0 : 0.0; });
  gauge("gpupack_replica_ready", "Whether GET /readyz answers 200.",
        [](const Readiness& r) { return r.ready ? 1.0 : 0.0; });
  gauge("gpupack_replica_epoch", "The leader lease's epoch this server knows.",
        [](const Readiness& r) { return static_cast<double>(r.epoch); });
}

Replica::Readiness Replica::readiness() const {
  std::lock_guard lock(mu_);
  Readiness r;
  r.epoch = lease_.epoch;
  r.commit_seq = data_.last_change_seq();
  r.takeover_changes = takeover_changes_;
  r.takeover_loaded = takeover_loaded_;
  r.takeover_ms = takeover_ms_;
  if (follower_ && serving_epoch_ == 0) r.follow = follower_->progress();
  if (serving_epoch_ != 0) {
    r.role = "leader";
    r.leader = options_.advertise;
    r.ready = lease_.held && serving_epoch_ == lease_.epoch && reachable_ && Clock::now() < held_until_ && !bump_;
  } else if (lease_.held) {
    r.role = "starting";
    r.leader = options_.advertise;
  } else {
    r.role = "standby";
    r.leader = forward_to_;
    r.ready = reachable_ && !forward_to_.empty();
  }
  return r;
}

HttpResponse Replica::ReadyResponse() const {
  const Readiness r = readiness();
  HttpResponse out;
  out.status = r.ready ? 200 : 503;
  nlohmann::json j = {{"role", r.role}, {"epoch", r.epoch}, {"replica", holder_}};
  j["leader"] = r.leader.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.leader);
  j["commitSeq"] = r.commit_seq;
  if (r.follow) {
    // A standby's hot state (docs/ha.md): how far behind it is, and whether it may take the lease.
    j["follow"] = {{"loaded", r.follow->loaded},         {"appliedSeq", r.follow->applied},
                   {"latestSeq", r.follow->latest},      {"behindMs", r.follow->behind_ms},
                   {"paused", r.follow->paused},         {"loads", r.follow->loads}};
    j["readyToLead"] = r.follow->ready_to_lead;
  }
  if (r.takeover_loaded || r.takeover_changes >= 0)
    j["takeover"] = {{"loadedState", r.takeover_loaded},
                     {"appliedChanges", r.takeover_changes < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.takeover_changes)},
                     {"ms", r.takeover_ms}};
  out.body = j.dump();
  return out;
}

}  // namespace gpupack::api
