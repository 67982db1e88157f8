#include "api/follower.h"

#include <algorithm>
#include <filesystem>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "storage/change_feed.h"

namespace gpupack::api {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kRowsPerRound = 1000;  // rows read and applied at once (one published view)
constexpr auto kCoalesce = std::chrono::milliseconds(10);

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

}  // namespace

Follower::Follower(FollowerOptions options, PostgresStore& data)
    : options_(std::move(options)), data_(data), listener_(data.uri()) {
  thread_ = std::thread([this] { Run(); });
}

Follower::~Follower() {
  Stop();
  std::lock_guard lock(mu_);
  server_.reset();
}

void Follower::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  listener_.Interrupt();  // a takeover must not wait out the poll
  if (thread_.joinable()) thread_.join();
}

Follower::Progress Follower::progress() const {
  std::lock_guard lock(mu_);
  Progress p;
  p.loaded = server_ != nullptr;
  p.applied = applied_;
  p.latest = latest_;
  p.behind_ms = p.loaded ? MsSince(fresh_as_of_) : -1;
  p.paused = paused_;
  p.loads = loads_;
  p.ready_to_lead = p.loaded && !paused_ && p.behind_ms <= options_.max_lag.count();
  return p;
}

bool Follower::IsLocalRead(const HttpRequest& req) {
  if (req.method != "POST" || req.target != "/") return false;
  const std::string* target = req.Header("x-amz-target");
  static constexpr std::string_view kPrefix = "AmazonEC2ContainerServiceV20141113.";
  if (target == nullptr || target->rfind(kPrefix, 0) != 0) return false;
  const std::string_view op = std::string_view(*target).substr(kPrefix.size());
  return op.rfind("Describe", 0) == 0 || op.rfind("List", 0) == 0;
}

void Follower::Serve(const std::shared_ptr<Server>& server, HttpRequest& req, Responder& respond) {
  server->Handle(std::move(req), [respond = std::move(respond)](HttpResponse r) {
    r.headers.emplace_back(kServedByHeader, "standby");
    respond(std::move(r));
  });
}

bool Follower::TryServe(HttpRequest& req, Responder& respond, uint64_t want) {
  std::shared_ptr<Server> server;
  {
    std::lock_guard lock(mu_);
    if (!server_) return false;
    // Without a sequence, a staleness bound of 0 means: always the leader.
    const bool fresh = want > 0 ? applied_ >= want
                                : options_.max_read_staleness.count() > 0 &&
                                      MsSince(fresh_as_of_) <= options_.max_read_staleness.count();
    if (!fresh) return false;
    server = server_;
  }
  Serve(server, req, respond);
  return true;
}

bool Follower::WaitAndServe(HttpRequest& req, Responder& respond, uint64_t want, std::chrono::milliseconds wait) {
  std::shared_ptr<Server> server;
  {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, wait, [&] { return stopping_ || (server_ && applied_ >= want); })) return false;
    if (stopping_) return false;
    server = server_;
  }
  Serve(server, req, respond);
  return true;
}

bool Follower::Load() {
  const auto start = Clock::now();
  ServerOptions opts = options_.server;
  opts.follow = true;
  auto server = Server::Start(std::move(opts), data_);
  if (!server.ok()) {
    spdlog::warn("standby: cannot load the state to follow (retrying): {}", server.status().message());
    return false;
  }
  const uint64_t at = (*server)->control_plane().applier().loaded_change_seq();
  data_.NoteChangeSeq(at);
  std::lock_guard lock(mu_);
  server_ = std::shared_ptr<Server>(std::move(*server));
  applied_ = at;
  latest_ = std::max(latest_, at);
  fresh_as_of_ = start;
  ++loads_;
  spdlog::info("standby: loaded the state at commit {} in {} ms; following the leader's commits", at, MsSince(start));
  cv_.notify_all();
  return true;
}

void Follower::Run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (!server_) {
      lock.unlock();
      const bool loaded = Load();
      lock.lock();
      if (!loaded) cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_; });
      continue;
    }
    const uint64_t after = applied_;
    std::shared_ptr<Server> server = server_;
    lock.unlock();
    const auto round = Clock::now();
    const bool paused = !options_.pause_file.empty() && std::filesystem::exists(options_.pause_file);
    auto page = ReadChanges(data_, after, paused ? 0 : kRowsPerRound);
    bool reload = false;
    size_t rows = 0;
    if (!page.ok()) {
      spdlog::warn("standby: cannot read the change feed: {}", page.status().message());
    } else if (page->reload && !paused) {
      spdlog::warn("standby: the change feed after commit {} is gone (pruned or restored): loading afresh", after);
      reload = true;
    } else if (!page->changes.empty()) {
      std::vector<WriteBatch> batches;
      batches.reserve(page->changes.size());
      for (auto& [seq, batch] : page->changes) batches.push_back(std::move(batch));
      if (Status s = server->Follow(batches); !s.ok()) {
        spdlog::warn("standby: cannot apply commit {}..{} in place ({}): loading afresh", after + 1,
                     page->changes.back().first, s.message());
        reload = true;
      } else {
        rows = page->changes.size();
        data_.NoteChangeSeq(page->changes.back().first);
      }
    }
    lock.lock();
    paused_ = paused;
    if (reload) {
      server_.reset();
      continue;
    }
    if (page.ok()) {
      latest_ = std::max(latest_, page->latest);
      if (rows > 0) {
        applied_ = page->changes.back().first;
        cv_.notify_all();
      }
      if (!paused && applied_ >= page->latest) fresh_as_of_ = round;  // everything committed before the round
    }
    if (rows == kRowsPerRound) continue;  // more are waiting
    lock.unlock();
    // A notification is followed by a short pause, so that one round reads the commits of a burst together
    // instead of one round per commit (a standby's CPU, and its database reads, grow with rounds, not rows).
    if (listener_.Wait(options_.poll)) std::this_thread::sleep_for(kCoalesce);
    lock.lock();
  }
}

std::shared_ptr<Server> Follower::TakeOver(uint64_t* applied) {
  *applied = 0;
  Stop();
  std::shared_ptr<Server> server;
  uint64_t after = 0;
  {
    std::lock_guard lock(mu_);
    server = server_;
    after = applied_;
  }
  if (!server) return nullptr;
  for (;;) {
    auto page = ReadChanges(data_, after, 10 * kRowsPerRound);
    if (!page.ok() || page->reload) {
      spdlog::warn("leadership: the standby's state cannot be brought up to date ({}): loading the state",
                   page.ok() ? "the change feed is gone" : page.status().message());
      return nullptr;
    }
    if (page->changes.empty()) break;
    std::vector<WriteBatch> batches;
    for (auto& [seq, batch] : page->changes) batches.push_back(std::move(batch));
    if (Status s = server->Follow(batches); !s.ok()) {
      spdlog::warn("leadership: the standby's state cannot apply the last commits ({}): loading the state",
                   s.message());
      return nullptr;
    }
    *applied += page->changes.size();
    after = page->changes.back().first;
  }
  data_.NoteChangeSeq(after);
  std::lock_guard lock(mu_);
  applied_ = after;
  server_.reset();
  return server;
}

}  // namespace gpupack::api
