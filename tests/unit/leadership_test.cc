// LeaseKeeper (api/leadership.h) on a private PostgreSQL: who takes the lease, when, and under which epoch; and
// a standby's keep-alive connections to the leader. The replicas' roles and takeover of a killed leader are
// tested as processes in tests/integration/ha_*.test.mjs. Skips, saying why, when PostgreSQL's binaries are not
// installed.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/ha/forwarding.h"
#include "api/leadership.h"
#include "storage/change_feed.h"
#include "storage/postgres_store.h"
#include "tests/unit/private_postgres.h"

namespace gpupack::api {
namespace {

using std::chrono::milliseconds;

class LeaseKeeperTest : public testing::PrivatePostgresTest {
 protected:
  void SetUp() override {
    PrivatePostgresTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    for (auto* slot : {&a_db_, &b_db_}) {
      auto s = PostgresStore::Open(uri_);
      ASSERT_TRUE(s.ok()) << s.status().message();
      *slot = std::move(s).value();
    }
  }
  // Expire ends the lease now, as if its holder had stopped renewing it a while ago.
  void Expire() { ASSERT_TRUE(a_db_->Query("UPDATE gpupack_leader_lease SET expires_at = now()").ok()); }

  std::unique_ptr<PostgresStore> a_db_, b_db_;
};

TEST_F(LeaseKeeperTest, TheFirstTakesTheLeaseAndTheOtherLearnsWhoLeads) {
  LeaseKeeper a(*a_db_, "a", "http://a:1", milliseconds(60000));
  LeaseKeeper b(*b_db_, "b", "http://b:1", milliseconds(60000));
  auto va = a.Step(0, false);
  ASSERT_TRUE(va.ok()) << va.status().message();
  EXPECT_TRUE(va->held);
  const int64_t e1 = va->epoch;
  EXPECT_GT(e1, 0);
  auto vb = b.Step(0, false);
  ASSERT_TRUE(vb.ok());
  EXPECT_FALSE(vb->held);
  EXPECT_EQ(vb->leader, "http://a:1");
  EXPECT_TRUE(vb->leader_alive);
  EXPECT_EQ(vb->epoch, e1);
  // Renewing keeps the epoch; a bump (the leader reloads) raises it.
  auto renewed = a.Step(e1, false);
  ASSERT_TRUE(renewed.ok());
  EXPECT_TRUE(renewed->held);
  EXPECT_EQ(renewed->epoch, e1);
  auto bumped = a.Step(e1, true);
  ASSERT_TRUE(bumped.ok());
  EXPECT_TRUE(bumped->held);
  EXPECT_GT(bumped->epoch, e1);
}

TEST_F(LeaseKeeperTest, EpochsStartAtTheDatabaseClockSoARestoredDatabaseLeadsAboveAnyEpochSeen) {
  // A backup restored: the lease row holds an epoch far below those agents saw since. The next take leads at
  // the database clock's milliseconds at least, above every epoch taken before the backup was restored.
  ASSERT_TRUE(a_db_->Query("UPDATE gpupack_leader_lease SET epoch = 3, expires_at = now()").ok());
  LeaseKeeper a(*a_db_, "a", "http://a:1", milliseconds(60000));
  auto v = a.Step(0, false);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->held);
  auto now_ms = a_db_->Query("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint");
  ASSERT_TRUE(now_ms.ok());
  EXPECT_GT(v->epoch, 1'600'000'000'000);  // after September 2020, in milliseconds
  EXPECT_LE(v->epoch, std::stoll((*now_ms)[0][0]));
  // An epoch ahead of the clock (several takes within one millisecond) still rises by one.
  ASSERT_TRUE(a_db_->Query("UPDATE gpupack_leader_lease SET epoch = epoch + 1000000, expires_at = now()").ok());
  LeaseKeeper b(*b_db_, "b", "http://b:1", milliseconds(60000));
  auto vb = b.Step(0, false);
  ASSERT_TRUE(vb.ok());
  EXPECT_EQ(vb->epoch, v->epoch + 1000000 + 1);
}

TEST_F(LeaseKeeperTest, AnExpiredLeaseGoesToTheNextWithAHigherEpochAndTheOldHolderLearnsIt) {
  LeaseKeeper a(*a_db_, "a", "http://a:1", milliseconds(60000));
  LeaseKeeper b(*b_db_, "b", "http://b:1", milliseconds(60000));
  const int64_t e1 = a.Step(0, false)->epoch;
  Expire();
  auto vb = b.Step(0, false);
  ASSERT_TRUE(vb.ok());
  EXPECT_TRUE(vb->held);
  EXPECT_GT(vb->epoch, e1);
  // The old holder's renewal finds the lease gone (and cannot take it back: it has not expired).
  auto va = a.Step(e1, false);
  ASSERT_TRUE(va.ok());
  EXPECT_FALSE(va->held);
  EXPECT_EQ(va->leader, "http://b:1");
  EXPECT_EQ(va->epoch, vb->epoch);
}

TEST_F(LeaseKeeperTest, ARestartedServerOnTheSameUrlTakesItsLeaseBackAtOnce) {
  LeaseKeeper before(*a_db_, "a-old", "http://a:1", milliseconds(60000));
  const int64_t e1 = before.Step(0, false)->epoch;
  LeaseKeeper after(*b_db_, "a-new", "http://a:1", milliseconds(60000));
  auto v = after.Step(0, false);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->held);
  EXPECT_GT(v->epoch, e1);
  auto old = before.Step(e1, false);
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(old->held);  // the old process (if it still ran) is deposed: its epoch is gone
}

TEST_F(LeaseKeeperTest, AReleasedLeaseIsTakenAtTheNextStepWithoutWaitingForItsTtl) {
  LeaseKeeper a(*a_db_, "a", "http://a:1", milliseconds(600000));
  LeaseKeeper b(*b_db_, "b", "http://b:1", milliseconds(600000));
  const int64_t e1 = a.Step(0, false)->epoch;
  EXPECT_FALSE(b.Step(0, false)->held);
  // Releasing an epoch that is not the holder's changes nothing.
  ASSERT_TRUE(a.Release(e1 - 1).ok());
  EXPECT_FALSE(b.Step(0, false)->held);
  ASSERT_TRUE(a.Release(e1).ok());
  auto vb = b.Step(0, false);
  ASSERT_TRUE(vb.ok());
  EXPECT_TRUE(vb->held);
  EXPECT_GT(vb->epoch, e1);
}

// SessionGone: the lease holder's recorded backend has left pg_stat_activity (its connection is closed), read
// through `db`; waits up to 5 s for it.
bool SessionGone(PostgresStore& db) {
  for (int i = 0; i < 250; ++i) {
    auto rows = db.Query(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = (SELECT holder_pid FROM gpupack_leader_lease WHERE id = 1)");
    if (rows.ok() && (*rows)[0][0] == "0") return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return false;
}

// A holder killed with SIGKILL closes its database connection at once: a standby that saw that session alive
// takes the lease at its next step, long before the TTL (ten minutes here), under a higher epoch. A holder that is
// alive but silent keeps its lease: the standby's steps meanwhile take nothing.
TEST_F(LeaseKeeperTest, AHolderWhoseConnectionEndsIsReplacedAtTheNextStepNotAfterItsTtl) {
  LeaseKeeper b(*b_db_, "b", "http://b:1", milliseconds(600000));
  int64_t e1 = 0;
  {
    LeaseKeeper a(*a_db_, "a", "http://a:1", milliseconds(600000));
    auto va = a.Step(0, false);
    ASSERT_TRUE(va.ok()) << va.status().message();
    ASSERT_TRUE(va->held);
    e1 = va->epoch;
    for (int i = 0; i < 3; ++i) {  // the holder alive (its connection open, whether or not it renews)
      auto vb = b.Step(0, false);
      ASSERT_TRUE(vb.ok()) << vb.status().message();
      EXPECT_FALSE(vb->held);
      EXPECT_EQ(vb->leader, "http://a:1");
    }
  }
  a_db_.reset();  // the holder's process is gone: its connection closes
  ASSERT_TRUE(SessionGone(*b_db_));
  auto vb = b.Step(0, false);
  ASSERT_TRUE(vb.ok()) << vb.status().message();
  EXPECT_TRUE(vb->held);
  EXPECT_GT(vb->epoch, e1);
  auto row = b_db_->Query("SELECT holder, holder_pid = pg_backend_pid(), pid_holder FROM gpupack_leader_lease");
  ASSERT_TRUE(row.ok());
  EXPECT_EQ((*row)[0], (std::vector<std::string>{"b", "t", "b"}));
}

// Only a session seen alive and then gone counts: a standby that first looks after the holder's connection has
// ended (it cannot tell a crash from a database restart that ended its own session too), and a holder of an
// older gpupack that records no session (pid_holder not its name), wait for the TTL.
TEST_F(LeaseKeeperTest, ASessionNotSeenAliveOrNotRecordedByItsHolderTakesNothingBeforeTheTtl) {
  {
    LeaseKeeper a(*a_db_, "a", "http://a:1", milliseconds(600000));
    ASSERT_TRUE(a.Step(0, false)->held);
  }
  a_db_.reset();
  ASSERT_TRUE(SessionGone(*b_db_));
  LeaseKeeper late(*b_db_, "late", "http://late:1", milliseconds(600000));
  for (int i = 0; i < 2; ++i) {
    auto v = late.Step(0, false);
    ASSERT_TRUE(v.ok()) << v.status().message();
    EXPECT_FALSE(v->held);
    EXPECT_EQ(v->leader, "http://a:1");
  }

  auto c_db = PostgresStore::Open(uri_);
  ASSERT_TRUE(c_db.ok());
  ASSERT_TRUE(b_db_->Query("UPDATE gpupack_leader_lease SET expires_at = now()").ok());
  {
    LeaseKeeper old(**c_db, "old", "http://old:1", milliseconds(600000));
    ASSERT_TRUE(old.Step(0, false)->held);
    // An older gpupack's take writes neither column: what it leaves names another holder.
    ASSERT_TRUE((*c_db)->Query("UPDATE gpupack_leader_lease SET pid_holder = 'a'").ok());
    EXPECT_FALSE(late.Step(0, false)->held);
  }
  c_db->reset();
  ASSERT_TRUE(SessionGone(*b_db_));
  auto v = late.Step(0, false);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->held);
  EXPECT_EQ(v->leader, "http://old:1");
}

TEST_F(LeaseKeeperTest, ACommitFencedByALostLeaseWritesNothing) {
  LeaseKeeper a(*a_db_, "a", "http://a:1", milliseconds(60000));
  LeaseKeeper b(*b_db_, "b", "http://b:1", milliseconds(60000));
  const int64_t e1 = a.Step(0, false)->epoch;
  a_db_->SetFence(PostgresStore::Fence{"a", e1});
  WriteBatch batch;
  Cluster c;
  c.name = "before";
  batch.PutCluster(c);
  EXPECT_TRUE(a_db_->Commit(batch).ok());
  Expire();
  ASSERT_TRUE(b.Step(0, false)->held);
  WriteBatch late;
  c.name = "after";
  late.PutCluster(c);
  EXPECT_EQ(a_db_->Commit(late).code(), ErrorCode::kConflict);
  auto snap = b_db_->Load();
  ASSERT_TRUE(snap.ok());
  ASSERT_EQ(snap->clusters.size(), 1u);
  EXPECT_EQ(snap->clusters[0].name, "before");
}

// FreePort: a loopback port free a moment ago (a replica serves on the port it advertises).
uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// StartReplica: a replica on loopback with a one-minute lease, renewed every `renew_every`.
Result<std::unique_ptr<Replica>> StartReplica(PostgresStore& data, PostgresStore& lease, milliseconds renew_every,
                                              milliseconds max_read_staleness) {
  ReplicaOptions o;
  o.server.port = FreePort();
  o.advertise = "http://127.0.0.1:" + std::to_string(o.server.port);
  o.lease_ttl = milliseconds(60000);
  o.renew_every = renew_every;
  o.max_read_staleness = max_read_staleness;
  return Replica::Start(std::move(o), data, lease);
}

// Http sends one request on a connection of its own (Connection: close, unless `connection` says otherwise) and
// returns the whole answer, "" on failure; bounded by a 10 s wait for each read.
std::string Http(uint16_t port, const std::string& method, const std::string& target, const std::string& headers,
                 const std::string& body, const std::string& connection = "close") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  std::string in;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string out = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: " + connection +
                            "\r\n" + headers +
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    if (::send(fd, out.data(), out.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(out.size())) {
      char buf[8192];
      for (;;) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 10000) <= 0) break;
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
      }
    }
  }
  ::close(fd);
  return in;
}

// ChannelUpgrade: an agent's channel upgrade request, as an agent that lost its leader sends it; the answer.
std::string ChannelUpgrade(uint16_t port) {
  return Http(port, "GET", "/agent/v1/channel?containerInstance=x",
              "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
              "", "Upgrade");
}

TEST_F(LeaseKeeperTest, AStandbyForwardsSuccessiveCallsOverOneKeptAliveConnection) {
  // Replica a leads (it starts first), b is its standby; each replica has its data and lease connections.
  std::unique_ptr<PostgresStore> a_lease, b_lease;
  for (auto* slot : {&a_lease, &b_lease}) {
    auto s = PostgresStore::Open(uri_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    *slot = std::move(s).value();
  }
  auto start = [&](PostgresStore& data, PostgresStore& lease) {
    // max_read_staleness 0: ListClusters is forwarded, not answered from the standby's state
    return StartReplica(data, lease, milliseconds(1000), milliseconds(0));
  };
  auto a = start(*a_db_, *a_lease);
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto b = start(*b_db_, *b_lease);
  ASSERT_TRUE(b.ok()) << b.status().message();
  for (int i = 0; i < 100 && !((*a)->readiness().ready && (*b)->readiness().ready); ++i)
    std::this_thread::sleep_for(milliseconds(50));
  ASSERT_EQ((*a)->readiness().role, "leader");
  ASSERT_EQ((*b)->readiness().role, "standby");

  const std::string ecs = "X-Amz-Target: AmazonEC2ContainerServiceV20141113.ListClusters\r\n"
                          "Content-Type: application/x-amz-json-1.1\r\n";
  for (int i = 0; i < 20; ++i) {
    const std::string answer = Http((*b)->port(), "POST", "/", ecs, "{}");
    ASSERT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
    EXPECT_NE(answer.find("clusterArns"), std::string::npos) << answer;
  }
  // The 20 forwarded calls went over one connection the standby keeps: the leader holds it open (besides this
  // scrape's own), where one connection per call would each have been closed.
  const std::string metrics = Http((*a)->port(), "GET", "/metrics", "", "");
  const size_t at = metrics.find("\ngpupack_http_connections_open ");
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_EQ(std::stoi(metrics.substr(at + 31)), 2) << metrics.substr(at, 40);
  const size_t requests = metrics.find("\ngpupack_http_requests_total ");
  ASSERT_NE(requests, std::string::npos);
  EXPECT_GE(std::stoi(metrics.substr(requests + 29)), 21);

  // The standby refuses the agent channel with the code NotLeader, naming the leader in the body's "leader" and
  // in the x-gpupack-leader header (agents follow those, never the message's words).
  const std::string upgrade = ChannelUpgrade((*b)->port());
  ASSERT_EQ(upgrade.rfind("HTTP/1.1 500", 0), 0u) << upgrade;
  const std::string leader = "http://127.0.0.1:" + std::to_string((*a)->port());
  EXPECT_NE(upgrade.find("\r\nx-gpupack-leader: " + leader + "\r\n"), std::string::npos) << upgrade;
  const size_t body_at = upgrade.find("\r\n\r\n");
  ASSERT_NE(body_at, std::string::npos);
  const nlohmann::json refusal = nlohmann::json::parse(upgrade.substr(body_at + 4), nullptr, false);
  ASSERT_TRUE(refusal.is_object()) << upgrade;
  EXPECT_EQ(refusal["__type"], "ServerException");
  EXPECT_EQ(refusal["code"], "NotLeader");
  EXPECT_EQ(refusal["leader"], leader);
}


// An agent that lost the leader knocks on a standby: the standby steps its lease then instead of at its next
// renewal, so a leader whose database session ended is replaced while the agents are still walking the list.
// The renewal here is 10 s: without the knock the standby would not look for that long.
TEST_F(LeaseKeeperTest, AnAgentKnockingOnAStandbyMakesItTakeADeadLeadersLeaseAtOnce) {
  std::unique_ptr<PostgresStore> a_lease, b_lease, probe;  // probe: the test's own connection
  for (auto* slot : {&a_lease, &b_lease, &probe}) {
    auto s = PostgresStore::Open(uri_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    *slot = std::move(s).value();
  }
  auto start = [&](PostgresStore& data, PostgresStore& lease) {
    return StartReplica(data, lease, milliseconds(10000), ReplicaOptions{}.max_read_staleness);
  };
  auto a = start(*a_db_, *a_lease);
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto b = start(*b_db_, *b_lease);
  ASSERT_TRUE(b.ok()) << b.status().message();
  for (int i = 0; i < 200 && !((*a)->readiness().ready && (*b)->readiness().follow &&
                               (*b)->readiness().follow->ready_to_lead);
       ++i)
    std::this_thread::sleep_for(milliseconds(50));
  ASSERT_EQ((*a)->readiness().role, "leader");
  ASSERT_EQ((*b)->readiness().role, "standby");
  const int64_t epoch = (*a)->readiness().epoch;
  // Each lease thread steps once as it starts; after that, b's next step is 10 s away.
  std::this_thread::sleep_for(milliseconds(500));

  // The leader's lease session ends, as a killed process's does (its server is left running, so only the lease
  // says who leads).
  auto killed = probe->Query("SELECT pg_terminate_backend(holder_pid) FROM gpupack_leader_lease WHERE id = 1");
  ASSERT_TRUE(killed.ok()) << killed.status().message();
  ASSERT_EQ(killed->size(), 1u);
  EXPECT_EQ((*killed)[0][0], "t");
  ASSERT_TRUE(SessionGone(*probe));
  EXPECT_EQ((*b)->readiness().role, "standby");  // nothing happens by itself before the next renewal

  const auto knocked = std::chrono::steady_clock::now();
  const std::string upgrade = ChannelUpgrade((*b)->port());
  EXPECT_EQ(upgrade.rfind("HTTP/1.1 500", 0), 0u) << upgrade;  // refused: it is not the leader yet
  for (int i = 0; i < 100 && (*b)->readiness().role != "leader"; ++i) std::this_thread::sleep_for(milliseconds(50));
  const Replica::Readiness r = (*b)->readiness();
  EXPECT_EQ(r.role, "leader");
  EXPECT_TRUE(r.ready);
  EXPECT_GT(r.epoch, epoch);
  EXPECT_LT(std::chrono::steady_clock::now() - knocked, milliseconds(9000));  // well before its own next step
}

// A follower being stopped is not held up by its wait for the leader's next NOTIFY (a takeover stops it).
TEST_F(LeaseKeeperTest, AChangeListenersWaitEndsWhenInterrupted) {
  ChangeListener listener(uri_);
  EXPECT_FALSE(listener.Wait(milliseconds(10)));  // connects and listens; nothing was notified
  std::thread interrupt([&] {
    std::this_thread::sleep_for(milliseconds(100));
    listener.Interrupt();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(listener.Wait(milliseconds(30000)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(10000));
  interrupt.join();
  // Notifications still wake it.
  ASSERT_TRUE(a_db_->Query(std::string("NOTIFY ") + kChangeChannel).ok());
  EXPECT_TRUE(listener.Wait(milliseconds(30000)));
}


// FakeLeader: a loopback listener that reads one request per connection and then answers `reply` (nothing at
// all when it is empty): what a leader that hangs, or one that answers an interim 100 Continue first, looks like.
class FakeLeader {
 public:
  explicit FakeLeader(std::string reply) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 8);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    url_ = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    thread_ = std::thread([this] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string in;
      char buf[4096];
      while (in.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
      }
      request_ = in;
      got_ = true;
      if (!reply_.empty()) ::send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      pollfd p{c, POLLIN, 0};
      ::poll(&p, 1, 20000);  // holds the connection open until the client closes it (or 20 s)
      ::close(c);
    });
  }
  ~FakeLeader() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  const std::string& url() const { return url_; }
  // request: what the leader read (once got() is true).
  bool got() const { return got_; }
  const std::string& request() const { return request_; }

 private:
  std::string reply_, url_, request_;
  std::atomic<bool> got_{false};
  int fd_ = -1;
  std::thread thread_;
};

HttpRequest RunTaskRequest() {
  HttpRequest req;
  req.method = "POST";
  req.target = "/";
  req.headers = {{"x-amz-target", "AmazonEC2ContainerServiceV20141113.RunTask"}, {"expect", "100-continue"}};
  req.body = R"({"cluster":"c"})";
  return req;
}

TEST(ForwardTest, AnInterimContinueIsSkippedAndExpectIsNotForwarded) {
  FakeLeader leader("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
  LeaderConnections pool;
  auto answer = Forward(RunTaskRequest(), leader.url(), "http://standby:1", milliseconds(20000), pool);
  ASSERT_TRUE(answer.ok()) << answer.status().message();
  ASSERT_TRUE(leader.got());
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->body, "{}");
  EXPECT_EQ(leader.request().find("expect:"), std::string::npos) << leader.request();
  EXPECT_NE(leader.request().find("x-amz-target: AmazonEC2ContainerServiceV20141113.RunTask"), std::string::npos);
}

TEST(ForwardTest, AbortCutsACallWaitingOnALeaderThatDoesNotAnswer) {
  FakeLeader leader("");
  LeaderConnections pool;
  Result<HttpResponse> answer = Status::Server("not yet");
  std::thread call([&] { answer = Forward(RunTaskRequest(), leader.url(), "http://standby:1", milliseconds(60000), pool); });
  while (!leader.got()) std::this_thread::sleep_for(milliseconds(10));  // the leader has the call
  pool.Abort();
  call.join();
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().message().find("did not answer within"), std::string::npos) << answer.status().message();
  // After Abort, nothing more is forwarded.
  auto later = Forward(RunTaskRequest(), leader.url(), "http://standby:1", milliseconds(60000), pool);
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.status().message().find("changing role"), std::string::npos) << later.status().message();
}

}  // namespace
}  // namespace gpupack::api
