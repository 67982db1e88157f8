// Authentication wired end to end (issue 6): the server with --credentials in-process on loopback, requests
// signed or tampered on the wire, the agent channel's upgrade, and a real agent that signs its calls and runs a
// task. The verifier's own edge cases (AWS's test suite, every tampering, the skew window's edges) are in
// sigv4_test.cc; here each refusal kind is checked once as a client sees it: HTTP status, x-amzn-ErrorType and
// ECS's JSON body.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/channel_client.h"
#include "api/channel/agent_channel.h"
#include "engine/control_plane.h"
#include "api/ecs/ecs_handler.h"
#include "api/http/http_server.h"
#include "api/auth/request_auth.h"
#include "protocol/sigv4_verifier.h"
#include "storage/group_committer.h"
#include "storage/sqlite_store.h"
#include "tests/unit/in_process_server.h"
#include "tests/unit/temp_dir.h"

namespace gpupack {
namespace {

namespace fs = std::filesystem;
using agent::Json;
using api::Credential;
using api::HeaderList;
using api::KeyRole;
using namespace std::chrono_literals;
using std::chrono::system_clock;

const Credential kAdmin{"AKIDADMIN0000000001", "admin/Secret+0123456789abcdef", "default", KeyRole::kAdmin};
const Credential kAgentKey{"AKIDAGENT0000000002", "agent-secret-0123456789", "agent", KeyRole::kAgent};
const Credential kOtherAgentKey{"AKIDAGENT0000000003", "other-agent-secret-0123", "other-agent", KeyRole::kAgent};
// A key whose profile names its host (gpupack_host), as gpupack keys issue-agent --host host-d writes it.
const Credential kBoundAgentKey{"AKIDAGENT0000000004", "bound-agent-secret-0123", "agent-host-d", KeyRole::kAgent,
                                "host-d"};
constexpr char kRegion[] = "us-east-1";
constexpr char kTargetPrefix[] = "AmazonEC2ContainerServiceV20141113.";

// A fixed instant for the requests this test signs itself; the server's clock reads it while `fixed_clock` is set.
system_clock::time_point T0() {
  return system_clock::time_point{std::chrono::sys_days{std::chrono::year{2026} / std::chrono::March / 2} + 10h};
}

// ---- A minimal HTTP/1.1 client on a raw socket, so a test controls every byte it sends -------------------------

struct RawResponse {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
  std::string Header(const std::string& name) const {  // case-insensitive, first match
    std::string lower_head = head;
    for (char& c : lower_head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string key = "\r\n" + name + ":";
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    size_t at = lower_head.find(key);
    if (at == std::string::npos) return "";
    size_t start = at + key.size();
    size_t end = head.find("\r\n", start);
    std::string v = head.substr(start, end - start);
    while (!v.empty() && v.front() == ' ') v.erase(0, 1);
    return v;
  }
};

// Exchange sends `bytes` to 127.0.0.1:port and reads until the server closes (bounded by a 10 s receive timeout).
RawResponse Exchange(uint16_t port, const std::string& bytes) {
  RawResponse r;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return r;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return r;
  }
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string in;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  size_t split = in.find("\r\n\r\n");
  if (in.rfind("HTTP/1.1 ", 0) != 0 || split == std::string::npos) return r;
  r.status = std::stoi(in.substr(9, 3));
  r.head = in.substr(0, split);
  r.body = in.substr(split + 4);
  return r;
}

// Wire renders a request; Content-Length and Connection: close are added (unsigned, as an SDK's would be).
std::string Wire(const std::string& method, const std::string& target, const HeaderList& headers,
                 const std::string& body) {
  std::string out = method + " " + target + " HTTP/1.1\r\n";
  for (const auto& [name, value] : headers) out += name + ": " + value + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  return out;
}

// An ECS call as the AWS SDK builds it (before signing).
struct Call {
  std::string operation = "ListClusters";
  std::string body = "{}";
  HeaderList Headers(uint16_t port) const {
    return {{"Host", "127.0.0.1:" + std::to_string(port)},
            {"Content-Type", "application/x-amz-json-1.1"},
            {"X-Amz-Target", kTargetPrefix + operation}};
  }
};

// Signed adds SignRequest's headers to `headers` (signed as `cred` for `region` at `when`).
HeaderList Signed(HeaderList headers, const Credential& cred, system_clock::time_point when, const std::string& body,
                  const std::string& region = kRegion, const std::string& method = "POST",
                  const std::string& target = "/") {
  const size_t q = target.find('?');
  const std::string path = target.substr(0, q);
  const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
  for (const auto& [name, value] : api::SignRequest(cred, region, "ecs", method, path, query, headers, body, when)) {
    headers.emplace_back(name, value);
  }
  return headers;
}

// ---- The server with --credentials, in-process ----------------------------------------------------------------

class AuthServer {
 public:
  explicit AuthServer(const std::string& db)
      : auth_(std::make_unique<api::RequestAuthenticator>(api::SigV4Verifier({kAdmin, kAgentKey, kOtherAgentKey, kBoundAgentKey}, kRegion),
                                                          [this] {
                                                            const int64_t fixed = fixed_seconds.load();
                                                            return fixed == 0 ? system_clock::now()
                                                                              : system_clock::time_point{
                                                                                    std::chrono::seconds{fixed}};
                                                          })),
        names_(WithNames(*auth_)),
        server_(db, {0, {200ms, 3}, auth_.get()}) {
    // As `gpupack server --listen 127.0.0.1:0` does: the bound port's loopback names, set before any request.
    names_->AddListen("127.0.0.1", server_.port());
  }

  uint16_t port() const { return server_.port(); }
  std::string url() const { return server_.url(); }
  const api::AgentChannel& channel() const { return server_.channel(); }

  // Endpoint is the server as an agent sees it, signing with `cred` (none: unsigned).
  agent::ServerEndpoint Endpoint(std::optional<Credential> cred, const std::string& region = kRegion) const {
    agent::ServerEndpoint e = *agent::ServerEndpoint::Parse(url());
    if (cred) e.signing = api::SigningIdentity{*cred, region, "ecs"};
    return e;
  }

  // Call is a signed admin call that must succeed.
  Json Call(const std::string& op, const Json& body) {
    auto r = agent::CallEcs(Endpoint(kAdmin), op, body);
    EXPECT_TRUE(r.ok()) << op << ": " << r.status().message();
    return r.ok() ? *r : Json();
  }

  std::atomic<int64_t> fixed_seconds{0};  // 0: the real clock
  // names: the Hosts a signed request may carry (the listen address's, and what a test adds as --server-name).
  api::ServerNames& names() { return *names_; }

 private:
  static std::shared_ptr<api::ServerNames> WithNames(api::RequestAuthenticator& auth) {
    auto names = std::make_shared<api::ServerNames>();
    auth.SetServerNames(names);
    return names;
  }

  std::unique_ptr<api::RequestAuthenticator> auth_;  // before server_: its channel and handler point at it
  std::shared_ptr<api::ServerNames> names_;
  testing_support::InProcessServer server_;
};

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::set_level(spdlog::level::err);
    server_ = std::make_unique<AuthServer>((dir_ / "state.db").string());
  }
  void TearDown() override {
    agent_.reset();
    server_.reset();
  }

  // FixClock makes the server's clock read T0 (for requests this test signs itself).
  void FixClock() {
    server_->fixed_seconds = std::chrono::duration_cast<std::chrono::seconds>(T0().time_since_epoch()).count();
  }

  // RegisterInstance registers a container instance, signed by `key`, and returns its ARN.
  std::string RegisterInstance(const Credential& key = kAdmin) {
    server_->Call("CreateCluster", {{"clusterName", "default"}});
    auto r = agent::CallEcs(server_->Endpoint(key), "RegisterContainerInstance", RegistrationBody());
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? (*r)["containerInstance"]["containerInstanceArn"].get<std::string>() : "";
  }
  // RegisterHost registers a new instance for `host` (its instanceId, the agent's --name) with one GPU, signed by
  // `key`, in the cluster "default" (which must exist).
  Result<Json> RegisterHost(const Credential& key, const std::string& host) {
    Json body = RegistrationBody();
    body["instanceIdentityDocument"] = Json{{"instanceId", host}}.dump();
    body["platformDevices"] = Json::array({{{"id", "GPU-" + host}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", 81920}}}}});
    return agent::CallEcs(server_->Endpoint(key), "RegisterContainerInstance", body);
  }
  static Json RegistrationBody() {
    return {{"cluster", "default"},
            {"instanceIdentityDocument", Json{{"instanceId", "node-raw"}}.dump()},
            {"totalResources", Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", 4096}},
                                            {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", 8192}}})}};
  }

  testing_support::TempDir tmp_{"gpupack-auth"};  // tmp_: this test's directory; outlives the server and agent
  fs::path dir_ = tmp_.path();
  std::unique_ptr<AuthServer> server_;
  std::unique_ptr<agent::Agent> agent_;
};

// ---- The ECS API ------------------------------------------------------------------------------------------------

TEST_F(AuthTest, ASignedCallIsServed) {
  FixClock();
  const Call call;
  const HeaderList headers = Signed(call.Headers(server_->port()), kAdmin, T0(), call.body);
  RawResponse r = Exchange(server_->port(), Wire("POST", "/", headers, call.body));
  EXPECT_EQ(r.status, 200) << r.head << "\n" << r.body;
  EXPECT_TRUE(Json::parse(r.body, nullptr, false).contains("clusterArns")) << r.body;
}

// One row per refusal kind: how the request is built, and what the client must see.
struct Refusal {
  std::string name;
  std::function<std::string(uint16_t port)> request;
  int status;
  std::string type;
  std::string message_part;
};

TEST_F(AuthTest, EachRefusalComesBackInEcsShapeWithItsStatus) {
  FixClock();
  const Call list;
  Call run;
  run.operation = "RunTask";
  run.body = R"({"taskDefinition":"x"})";
  const std::vector<Refusal> rows = {
      // No Authorization at all: AWS's answer to an unsigned call.
      {"unsigned", [&](uint16_t p) { return Wire("POST", "/", list.Headers(p), list.body); }, 403,
       "MissingAuthenticationTokenException", "Missing Authentication Token"},
      // A key the server does not know.
      {"unknown access key",
       [&](uint16_t p) {
         return Wire("POST", "/", Signed(list.Headers(p), {"AKIDNOBODY", "whatever", "x"}, T0(), list.body), list.body);
       },
       400, "UnrecognizedClientException", "security token included in the request is invalid"},
      // The right key id with the wrong secret.
      {"wrong secret",
       [&](uint16_t p) {
         Credential wrong = kAdmin;
         wrong.secret_access_key = "not-the-secret";
         return Wire("POST", "/", Signed(list.Headers(p), wrong, T0(), list.body), list.body);
       },
       400, "InvalidSignatureException", "signature we calculated does not match"},
      // Signed, then the body changed on the way: X-Amz-Content-Sha256 no longer matches it.
      {"tampered body",
       [&](uint16_t p) {
         return Wire("POST", "/", Signed(list.Headers(p), kAdmin, T0(), list.body), R"({"maxResults":99})");
       },
       400, "InvalidSignatureException", "'x-amz-content-sha256' header does not match"},
      // Without X-Amz-Content-Sha256 the body's hash is still part of the canonical request.
      {"tampered body, no content hash header",
       [&](uint16_t p) {
         HeaderList h = list.Headers(p);
         h.emplace_back("X-Amz-Date", api::FormatAmzDate(T0()));
         h.emplace_back("Authorization", api::AuthorizationHeader(kAdmin, kRegion, "ecs", "POST", "/", "", h,
                                                                  list.body, api::FormatAmzDate(T0())));
         return Wire("POST", "/", h, R"({"maxResults":99})");
       },
       400, "InvalidSignatureException", "signature we calculated does not match"},
      // Signed 6 minutes before the server's clock: outside the 5-minute window.
      {"clock behind",
       [&](uint16_t p) {
         return Wire("POST", "/", Signed(list.Headers(p), kAdmin, T0() - 6min, list.body), list.body);
       },
       400, "InvalidSignatureException", "Signature expired: 20260302T095400Z is now earlier than 20260302T095500Z"},
      {"clock ahead",
       [&](uint16_t p) {
         return Wire("POST", "/", Signed(list.Headers(p), kAdmin, T0() + 6min, list.body), list.body);
       },
       400, "InvalidSignatureException", "Signature not yet current"},
      // The SDK scopes its signature to its configured region; this server is us-east-1.
      {"other region",
       [&](uint16_t p) {
         return Wire("POST", "/", Signed(list.Headers(p), kAdmin, T0(), list.body, "eu-west-1"), list.body);
       },
       400, "InvalidSignatureException", "not 'eu-west-1'. This server's region is 'us-east-1'"},
      // A valid signature by an agent key, for an operation agents may not call.
      {"agent key runs a task",
       [&](uint16_t p) { return Wire("POST", "/", Signed(run.Headers(p), kAgentKey, T0(), run.body), run.body); }, 400,
       "AccessDeniedException", "AKIDAGENT0000000002 (gpupack_role agent) is not authorized to perform: ecs:RunTask"},
      // Unsigned requests learn nothing about paths or methods.
      {"unsigned unknown path", [&](uint16_t) { return Wire("GET", "/secret", {{"Host", "x"}}, ""); }, 403,
       "MissingAuthenticationTokenException", "Missing Authentication Token"},
  };
  for (const Refusal& row : rows) {
    SCOPED_TRACE(row.name);
    RawResponse r = Exchange(server_->port(), row.request(server_->port()));
    EXPECT_EQ(r.status, row.status) << r.head << "\n" << r.body;
    EXPECT_EQ(r.Header("x-amzn-ErrorType"), row.type);
    EXPECT_FALSE(r.Header("x-amzn-RequestId").empty());
    Json j = Json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.body;
    EXPECT_EQ(j.value("__type", ""), row.type);
    EXPECT_NE(j.value("message", "").find(row.message_part), std::string::npos) << j.value("message", "");
  }
}

TEST_F(AuthTest, HealthzAndMetricsStayOpenAndCountRefusals) {
  RawResponse bad = Exchange(server_->port(), Wire("POST", "/", Call{}.Headers(server_->port()), "{}"));
  EXPECT_EQ(bad.status, 403);
  RawResponse health = Exchange(server_->port(), Wire("GET", "/healthz", {{"Host", "x"}}, ""));
  EXPECT_EQ(health.status, 200) << health.body;
  RawResponse metrics = Exchange(server_->port(), Wire("GET", "/metrics", {{"Host", "x"}}, ""));
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("gpupack_auth_refusals_total{type=\"MissingAuthenticationTokenException\"} 1"),
            std::string::npos)
      << metrics.body;
}

TEST_F(AuthTest, AnAgentKeyMayDoWhatAnAgentDoesAndNothingElse) {
  const agent::ServerEndpoint as_agent = server_->Endpoint(kAgentKey);
  EXPECT_TRUE(agent::CallEcs(as_agent, "CreateCluster", {{"clusterName", "gpu"}}).ok());
  auto listed = agent::CallEcs(as_agent, "ListClusters", Json::object());
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.status().code(), ErrorCode::kAccessDenied);
  EXPECT_NE(listed.status().message().find("AccessDeniedException"), std::string::npos);
  // The admin key may call anything.
  EXPECT_EQ(server_->Call("ListClusters", Json::object())["clusterArns"].size(), 1u);
}

TEST_F(AuthTest, TheAgentClientSaysWhichKeyAndWhatToCheck) {
  Credential wrong = kAgentKey;
  wrong.secret_access_key = "stale";
  auto r = agent::CallEcs(server_->Endpoint(wrong), "CreateCluster", {{"clusterName", "gpu"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidSignature);
  EXPECT_NE(r.status().message().find("signed as access key AKIDAGENT0000000002, profile [agent], region us-east-1"),
            std::string::npos)
      << r.status().message();
  // The canonical request the server echoes is not repeated in the agent's one-line message.
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();

  auto unsigned_call = agent::CallEcs(server_->Endpoint(std::nullopt), "CreateCluster", {{"clusterName", "gpu"}});
  ASSERT_FALSE(unsigned_call.ok());
  EXPECT_EQ(unsigned_call.status().code(), ErrorCode::kMissingAuthenticationToken);
  EXPECT_NE(unsigned_call.status().message().find("--credentials"), std::string::npos);
}

// ---- Whose request it is --------------------------------------------------------------------------------------

// SignedFor: the ListClusters call signed by the admin key as a client of the server at `host` signs it.
std::string SignedFor(const std::string& host) {
  const Call list;
  HeaderList headers = list.Headers(0);
  headers[0] = {"Host", host};
  return Wire("POST", "/", Signed(headers, kAdmin, T0(), list.body), list.body);
}

// A signed request names its server in its signed Host. One signed for another server (what a stranger an
// agent was misled to holds, or a call captured at another deployment that shares the key) and replayed here is
// refused, however good its signature; one signed for this server's own address (127.0.0.1:PORT, and localhost or
// ::1 on that port: it listens on loopback) or for a name added with --server-name is served. The agent channel's
// upgrade is judged the same way (403).
TEST_F(AuthTest, ARequestSignedForAnotherHostIsRefusedAndOneForThisServersNamesIsServed) {
  const std::string arn = RegisterInstance(kAgentKey);  // signed now, by the agent's client: before FixClock
  FixClock();
  ASSERT_TRUE(server_->names().Add("gpupack.example.com").ok());  // --server-name gpupack.example.com (port 80)
  const std::string port = std::to_string(server_->port());
  const std::string other_port = std::to_string(server_->port() == 65535 ? 1 : server_->port() + 1);
  struct Row {
    std::string host;
    bool served;
  };
  const std::vector<Row> rows = {
      {"127.0.0.1:" + port, true},       {"localhost:" + port, true},        {"LocalHost:" + port, true},
      {"[::1]:" + port, true},           {"gpupack.example.com", true},      {"gpupack.example.com:80", true},
      {"10.0.0.66:" + port, false},      {"127.0.0.1:" + other_port, false}, {"localhost", false},
      {"gpupack.example.com:8080", false}, {"stranger.example.net:8080", false},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.host);
    RawResponse r = Exchange(server_->port(), SignedFor(row.host));
    if (row.served) {
      EXPECT_EQ(r.status, 200) << r.head << "\n" << r.body;
      continue;
    }
    EXPECT_EQ(r.status, 400) << r.head << "\n" << r.body;
    EXPECT_EQ(r.Header("x-amzn-ErrorType"), "InvalidSignatureException");
    Json j = Json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.body;
    EXPECT_EQ(j.value("__type", ""), "InvalidSignatureException");
    EXPECT_NE(j.value("message", "").find("The request was signed for host '" + row.host +
                                          "', which is not this server's"),
              std::string::npos)
        << j.value("message", "");
  }

  // The channel's upgrade signed for a stranger (as an agent misled to it would sign it), replayed here: 403.
  const std::string target = std::string(api::kAgentChannelPath) + "?containerInstance=" + agent::PercentEncode(arn);
  HeaderList upgrade = {{"Host", "stranger.example.net:8080"},
                        {"Upgrade", "websocket"},
                        {"Connection", "Upgrade"},
                        {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
                        {"Sec-WebSocket-Version", "13"}};
  upgrade = Signed(upgrade, kAgentKey, T0(), "", kRegion, "GET", target);
  std::string raw = "GET " + target + " HTTP/1.1\r\n";
  for (const auto& [name, value] : upgrade) raw += name + ": " + value + "\r\n";
  RawResponse refused = Exchange(server_->port(), raw + "\r\n");
  EXPECT_EQ(refused.status, 403) << refused.head;
  EXPECT_EQ(Json::parse(refused.body, nullptr, false).value("__type", ""), "InvalidSignatureException") << refused.body;
  EXPECT_EQ(server_->channel().connected(), 0u);
}

// ServerNames reads HOST[:PORT] as a Host header or --server-name gives it: the host in lower case, port 80 when
// none; anything else (a URL, a path, a user, an unbracketed IPv6 address, a bad port) is refused.
TEST(ServerNamesTest, NormalizeReadsHostAndPortAndRefusesTheRest) {
  const std::vector<std::pair<std::string, std::string>> good = {
      {"gp1.internal:8080", "gp1.internal:8080"}, {"GP1.Internal", "gp1.internal:80"},
      {"10.0.0.5:80", "10.0.0.5:80"},             {"[::1]:8080", "[::1]:8080"},
      {"[FE80::1]", "[fe80::1]:80"},              {"localhost:65535", "localhost:65535"},
  };
  for (const auto& [in, out] : good) {
    auto n = api::ServerNames::Normalize(in);
    ASSERT_TRUE(n.ok()) << in << ": " << n.status().message();
    EXPECT_EQ(*n, out) << in;
  }
  const std::vector<std::string> bad_names = {"",        ":8080",     "host:",        "host:0", "host:65536",
                                              "host:8o", "http://h:1", "host/path",   "user@host", "::1",
                                              "[::1",    "[::1]x",     "a b",          std::string(300, 'a')};
  for (const std::string& bad : bad_names) {
    EXPECT_FALSE(api::ServerNames::Normalize(bad).ok()) << bad;
  }
  api::ServerNames names;
  names.AddListen("0.0.0.0", 8080);  // a wildcard listen: loopback, the interfaces' addresses, the host name
  EXPECT_TRUE(names.Contains("127.0.0.1:8080"));
  EXPECT_TRUE(names.Contains("localhost:8080"));
  EXPECT_FALSE(names.Contains("127.0.0.1:8081"));
  names.AddListen("10.1.2.3", 9000);  // a concrete address: itself only
  EXPECT_TRUE(names.Contains("10.1.2.3:9000"));
  EXPECT_FALSE(names.Contains("localhost:9000"));
}

// ---- The agent channel's upgrade ------------------------------------------------------------------------------

TEST_F(AuthTest, ASignedChannelUpgradeIsAccepted) {
  const std::string arn = RegisterInstance(kAgentKey);
  const std::string target = std::string(api::kAgentChannelPath) + "?containerInstance=" + agent::PercentEncode(arn);
  for (const Credential& key : {kAgentKey, kAdmin}) {
    SCOPED_TRACE(key.profile);
    auto c = agent::ChannelClient::Connect(server_->Endpoint(key), target, {});
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_TRUE((*c)->open());
  }
  EXPECT_EQ(server_->channel().auth_refusals(), 0u);
}

TEST_F(AuthTest, AnUnsignedOrBadlySignedUpgradeIsRefusedWith403BeforeUpgrading) {
  const std::string arn = RegisterInstance();
  const std::string target = std::string(api::kAgentChannelPath) + "?containerInstance=" + agent::PercentEncode(arn);

  auto unsigned_channel = agent::ChannelClient::Connect(server_->Endpoint(std::nullopt), target, {});
  ASSERT_FALSE(unsigned_channel.ok());
  EXPECT_EQ(unsigned_channel.status().code(), ErrorCode::kMissingAuthenticationToken);
  EXPECT_NE(unsigned_channel.status().message().find("refused the agent channel: MissingAuthenticationTokenException"),
            std::string::npos)
      << unsigned_channel.status().message();

  Credential wrong = kAgentKey;
  wrong.secret_access_key = "stale";
  auto bad = agent::ChannelClient::Connect(server_->Endpoint(wrong), target, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidSignature);

  auto other_region = agent::ChannelClient::Connect(server_->Endpoint(kAgentKey, "eu-west-1"), target, {});
  ASSERT_FALSE(other_region.ok());
  EXPECT_EQ(other_region.status().code(), ErrorCode::kInvalidSignature);
  EXPECT_NE(other_region.status().message().find("This server's region is 'us-east-1'"), std::string::npos);

  // On the wire: 403 with ECS's error shape, and no 101 Switching Protocols.
  const HeaderList upgrade = {{"Host", "127.0.0.1:" + std::to_string(server_->port())},
                              {"Upgrade", "websocket"},
                              {"Connection", "Upgrade"},
                              {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
                              {"Sec-WebSocket-Version", "13"}};
  std::string raw = "GET " + target + " HTTP/1.1\r\n";
  for (const auto& [name, value] : upgrade) raw += name + ": " + value + "\r\n";
  RawResponse r = Exchange(server_->port(), raw + "\r\n");
  EXPECT_EQ(r.status, 403) << r.head;
  EXPECT_EQ(Json::parse(r.body, nullptr, false).value("__type", ""), "MissingAuthenticationTokenException") << r.body;
  EXPECT_EQ(server_->channel().auth_refusals(), 4u);
  EXPECT_EQ(server_->channel().connected(), 0u);
}

// ---- A real agent that signs ------------------------------------------------------------------------------------

agent::AgentOptions AgentOptions(const AuthServer& server, const fs::path& dir, std::optional<Credential> key) {
  agent::AgentOptions o;
  o.server = server.url();
  o.gpus = "fake:1x22587";
  o.name = "node-signed";
  o.state_dir = (dir / "agent").string();
  o.mps_pipe_dir = (dir / "mps").string();
  o.cpu = 4096;
  o.memory = 8192;
  o.stop_grace = 300ms;
  o.monitor_interval = 20ms;
  o.mps_probe_interval = 50ms;
  o.stop_tasks_on_exit = true;
  if (key) o.signing = api::SigningIdentity{*key, kRegion, "ecs"};
  return o;
}

TEST_F(AuthTest, ASigningAgentRegistersConnectsAndRunsATask) {
  auto a = agent::Agent::Create(AgentOptions(*server_, dir_, kAgentKey));
  ASSERT_TRUE(a.ok()) << a.status().message();
  agent_ = std::move(*a);
  ASSERT_TRUE(agent_->Start().ok());  // RegisterContainerInstance (and CreateCluster for "default"), signed

  // The channel comes up (signed upgrade): the instance reads agentConnected.
  Json ci;
  for (int i = 0; i < 500; ++i) {
    ci = server_->Call("DescribeContainerInstances", {{"containerInstances", {agent_->instance_arn()}}});
    if (!ci["containerInstances"].empty() && ci["containerInstances"][0]["agentConnected"] == true) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(ci["containerInstances"][0]["agentConnected"], true) << ci.dump();

  // An admin runs a task; the agent starts it and reports it over the signed channel.
  Json c = {{"name", "main"},
            {"image", "busybox"},
            {"memory", 64},
            {"entryPoint", {"/bin/sh", "-c"}},
            {"command", {"exit 7"}},
            {"resourceRequirements",
             Json::array({{{"type", "GPU"}, {"sharingStrategy", {{"nvidiaMps", {{"memory", 1024}}}}}}})}};
  server_->Call("RegisterTaskDefinition", {{"family", "signed"}, {"containerDefinitions", Json::array({c})}});
  Json run = server_->Call("RunTask", {{"taskDefinition", "signed"}});
  ASSERT_EQ(run["tasks"].size(), 1u) << run.dump();
  const std::string arn = run["tasks"][0]["taskArn"];
  Json t;
  for (int i = 0; i < 500; ++i) {
    Json d = server_->Call("DescribeTasks", {{"tasks", {arn}}});
    t = d["tasks"][0];
    if (t["lastStatus"] == "STOPPED") break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(t["lastStatus"], "STOPPED") << t.dump();
  EXPECT_EQ(t["containers"][0]["exitCode"], 7) << t.dump();
  EXPECT_EQ(server_->channel().auth_refusals(), 0u);
}

// An agent key acts only for the instances it registered: another agent key can neither hold their channel (and
// so receive their assignments), re-register or deregister them, nor report about their tasks; an admin can.
TEST_F(AuthTest, AnAgentKeyActsOnlyForTheInstancesItRegistered) {
  auto a = agent::Agent::Create(AgentOptions(*server_, dir_, kAgentKey));
  ASSERT_TRUE(a.ok()) << a.status().message();
  agent_ = std::move(*a);
  ASSERT_TRUE(agent_->Start().ok());
  const std::string victim = agent_->instance_arn();
  Json c = {{"name", "main"}, {"image", "busybox"}, {"memory", 64}, {"entryPoint", {"/bin/sh", "-c"}},
            {"command", {"exec sleep 30"}}};
  server_->Call("RegisterTaskDefinition", {{"family", "sleeper"}, {"containerDefinitions", Json::array({c})}});
  Json run;
  for (int i = 0; i < 500; ++i) {  // placed once the agent's channel is up
    run = server_->Call("RunTask", {{"taskDefinition", "sleeper"}});
    if (run["tasks"].size() == 1u) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(run["tasks"].size(), 1u) << run.dump();
  const std::string task = run["tasks"][0]["taskArn"];

  const std::string own = RegisterInstance(kOtherAgentKey);  // the other key's own instance
  const agent::ServerEndpoint intruder = server_->Endpoint(kOtherAgentKey);
  auto expect_denied = [&](const Result<Json>& r, const std::string& what) {
    ASSERT_FALSE(r.ok()) << what << " was allowed";
    EXPECT_EQ(r.status().code(), ErrorCode::kAccessDenied) << what << ": " << r.status().message();
    EXPECT_NE(r.status().message().find("acts only for the container instances it registered"), std::string::npos)
        << r.status().message();
  };
  const std::string target =
      std::string(api::kAgentChannelPath) + "?containerInstance=" + agent::PercentEncode(victim);
  auto channel = agent::ChannelClient::Connect(intruder, target, {});
  ASSERT_FALSE(channel.ok()) << "another agent key held the victim's channel";
  EXPECT_EQ(server_->channel().auth_refusals(), 1u);  // refused as AccessDenied (403), not as an unknown instance
  EXPECT_EQ(server_->channel().connected(), 1u) << "the victim's own connection must stay";

  Json again = RegistrationBody();
  again["containerInstanceArn"] = victim;
  expect_denied(agent::CallEcs(intruder, "RegisterContainerInstance", again), "re-registering another's instance");
  expect_denied(agent::CallEcs(intruder, "DeregisterContainerInstance",
                               {{"containerInstance", victim}, {"force", true}}),
                "deregistering another's instance");
  expect_denied(agent::CallEcs(intruder, "SubmitTaskStateChange",
                               {{"task", task}, {"status", "STOPPED"}, {"reason", "forged"}}),
                "reporting another's task stopped");
  expect_denied(agent::CallEcs(intruder, "SubmitContainerStateChange",
                               {{"task", task}, {"containerName", "main"}, {"status", "STOPPED"}}),
                "reporting another's container stopped");
  const Json t = server_->Call("DescribeTasks", {{"tasks", {task}}})["tasks"][0];
  EXPECT_NE(t["lastStatus"], "STOPPED") << t.dump();
  EXPECT_EQ(t["desiredStatus"], "RUNNING");
  const Json ci = server_->Call("DescribeContainerInstances", {{"containerInstances", {victim}}});
  EXPECT_EQ(ci["containerInstances"][0]["status"], "ACTIVE");

  // Its own instance it may re-register and deregister; the admin key may act for any.
  Json mine = RegistrationBody();
  mine["containerInstanceArn"] = own;
  EXPECT_TRUE(agent::CallEcs(intruder, "RegisterContainerInstance", mine).ok());
  EXPECT_TRUE(agent::CallEcs(intruder, "DeregisterContainerInstance", {{"containerInstance", own}}).ok());
  server_->Call("StopTask", {{"task", task}});
}

// An agent key registers one container instance: a second host with the same key (a look-alike that would draw
// other people's tasks) is refused naming the instance the key is bound to; the same host again (an agent that
// lost its --state-dir) gets its own instance back; once the key's instance is deregistered the key may register
// again.
TEST_F(AuthTest, AnAgentKeyRegistersOneContainerInstanceTheFirstHostThatUsesIt) {
  server_->Call("CreateCluster", {{"clusterName", "default"}});
  auto reg = [&](const Credential& key, const std::string& host) { return RegisterHost(key, host); };
  auto first = reg(kAgentKey, "host-a");
  ASSERT_TRUE(first.ok()) << first.status().message();
  const std::string arn = (*first)["containerInstance"]["containerInstanceArn"];

  auto second = reg(kAgentKey, "host-b");
  ASSERT_FALSE(second.ok()) << "a second host registered with the first host's agent key";
  EXPECT_EQ(second.status().code(), ErrorCode::kAccessDenied);
  EXPECT_NE(second.status().message().find("this agent key is bound to container instance " + arn + " (host 'host-a')"),
            std::string::npos)
      << second.status().message();
  EXPECT_NE(second.status().message().find("gpupack keys issue-agent --host NAME"), std::string::npos);

  auto again = reg(kAgentKey, "host-a");  // no containerInstanceArn: the agent lost its instance record
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ((*again)["containerInstance"]["containerInstanceArn"], arn);
  EXPECT_EQ(server_->Call("ListContainerInstances", Json::object())["containerInstanceArns"].size(), 1u);

  // Another key is another host's: the keys are independent.
  EXPECT_TRUE(reg(kOtherAgentKey, "host-c").ok());
  EXPECT_EQ(server_->Call("ListContainerInstances", Json::object())["containerInstanceArns"].size(), 2u);

  server_->Call("DeregisterContainerInstance", {{"containerInstance", arn}, {"force", true}});
  auto moved = reg(kAgentKey, "host-b");
  ASSERT_TRUE(moved.ok()) << moved.status().message();
  EXPECT_NE((*moved)["containerInstance"]["containerInstanceArn"], arn);
}

// A key whose profile names its host (gpupack_host) registers that host only, from its first use on: a key copied
// off a host before its agent ever ran cannot bring up a look-alike under another name. Its own host registers,
// and registers again (with or without its containerInstanceArn) as the same instance.
TEST_F(AuthTest, AnAgentKeyBoundToAHostRegistersThatHostOnlyEvenOnFirstUse) {
  server_->Call("CreateCluster", {{"clusterName", "default"}});
  auto elsewhere = RegisterHost(kBoundAgentKey, "host-e");  // the key's first use
  ASSERT_FALSE(elsewhere.ok()) << "a key bound to host-d registered host-e";
  EXPECT_EQ(elsewhere.status().code(), ErrorCode::kAccessDenied);
  EXPECT_NE(elsewhere.status().message().find("AKIDAGENT0000000004 (gpupack_role agent) is not authorized to perform: "
                                              "ecs:RegisterContainerInstance for host 'host-e': this agent key is "
                                              "bound to host 'host-d'"),
            std::string::npos)
      << elsewhere.status().message();
  EXPECT_TRUE(server_->Call("ListContainerInstances", Json::object())["containerInstanceArns"].empty());

  auto own = RegisterHost(kBoundAgentKey, "host-d");
  ASSERT_TRUE(own.ok()) << own.status().message();
  const std::string arn = (*own)["containerInstance"]["containerInstanceArn"];
  auto again = RegisterHost(kBoundAgentKey, "host-d");  // an agent that lost its --state-dir
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ((*again)["containerInstance"]["containerInstanceArn"], arn);

  // Naming its own instance does not let the key rename it to another host.
  Json renamed = RegistrationBody();
  renamed["containerInstanceArn"] = arn;
  renamed["instanceIdentityDocument"] = Json{{"instanceId", "host-e"}}.dump();
  auto moved = agent::CallEcs(server_->Endpoint(kBoundAgentKey), "RegisterContainerInstance", renamed);
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().code(), ErrorCode::kAccessDenied);
  EXPECT_EQ(server_->Call("DescribeContainerInstances", {{"containerInstances", {arn}}})["containerInstances"][0]
                ["ec2InstanceId"],
            "host-d");

  // Another host's unbound key still follows the first-use rule, and an admin key registers any host.
  EXPECT_TRUE(RegisterHost(kAgentKey, "host-e").ok());
  EXPECT_TRUE(RegisterHost(kAdmin, "host-f").ok());
}

TEST_F(AuthTest, AnAgentWithAWrongSecretDoesNotStartAndSaysWhy) {
  Credential wrong = kAgentKey;
  wrong.secret_access_key = "stale";
  auto a = agent::Agent::Create(AgentOptions(*server_, dir_, wrong));
  ASSERT_TRUE(a.ok()) << a.status().message();
  agent_ = std::move(*a);
  Status s = agent_->Start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("InvalidSignatureException"), std::string::npos) << s.message();
}

// ---- Roles and profiles (the credentials file) ------------------------------------------------------------------

TEST(KeyRoles, AgentKeysMayOnlyDoWhatAnAgentDoes) {
  for (const char* op : {"RegisterContainerInstance", "DeregisterContainerInstance", "CreateCluster",
                         "SubmitTaskStateChange", "SubmitContainerStateChange", "AgentChannel"}) {
    EXPECT_TRUE(api::RoleAllows(KeyRole::kAgent, op)) << op;
    EXPECT_TRUE(api::RoleAllows(KeyRole::kAdmin, op)) << op;
  }
  for (const char* op : {"RunTask", "StopTask", "ListClusters", "DescribeTasks", "DeleteCluster", "PutAttributes",
                         "UpdateContainerInstancesState", "RegisterTaskDefinition", ""}) {
    EXPECT_FALSE(api::RoleAllows(KeyRole::kAgent, op)) << op;
    EXPECT_TRUE(api::RoleAllows(KeyRole::kAdmin, op)) << op;
  }
}

TEST(KeyRoles, TheCredentialsFileSaysWhichRoleAKeyHas) {
  auto keys = api::ParseCredentials(
      "[default]\naws_access_key_id = A1\naws_secret_access_key = s1\n"
      "[node]\naws_access_key_id = A2\naws_secret_access_key = s2\ngpupack_role = agent\n"
      "[ops]\ngpupack_role=admin\naws_access_key_id = A3\naws_secret_access_key = s3\n",
      "test");
  ASSERT_TRUE(keys.ok()) << keys.status().message();
  ASSERT_EQ(keys->size(), 3u);
  EXPECT_EQ((*keys)[0].role, KeyRole::kAdmin);
  EXPECT_EQ((*keys)[1].role, KeyRole::kAgent);
  EXPECT_EQ((*keys)[2].role, KeyRole::kAdmin);

  auto bad = api::ParseCredentials("[x]\naws_access_key_id = A\naws_secret_access_key = s\ngpupack_role = root\n", "f");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "f line 4: gpupack_role must be admin, agent or reader, not 'root'");
  auto twice = api::ParseCredentials(
      "[x]\naws_access_key_id = A\naws_secret_access_key = s\ngpupack_role = agent\ngpupack_role = agent\n", "f");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("line 5: gpupack_role given twice"), std::string::npos);
}

TEST(KeyRoles, TheCredentialsFileBindsAnAgentKeyToItsHost) {
  auto keys = api::ParseCredentials(
      "[agent-gpu-node-17]\naws_access_key_id = A1\naws_secret_access_key = s1\ngpupack_role = agent\n"
      "gpupack_host = gpu-node-17\n"
      "[node]\naws_access_key_id = A2\naws_secret_access_key = s2\ngpupack_role = agent\n",
      "test");
  ASSERT_TRUE(keys.ok()) << keys.status().message();
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].host, "gpu-node-17");
  EXPECT_EQ((*keys)[1].host, "");  // not bound: the first host that registers with it

  auto bad = api::ParseCredentials(
      "[x]\naws_access_key_id = A\naws_secret_access_key = s\ngpupack_role = agent\ngpupack_host = two words\n", "f");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "f line 5: gpupack_host must be the host's agent --name: 1 to 64 letters, digits, '-', '_', '.', ':' or '/'");
  EXPECT_FALSE(api::ParseCredentials("[x]\naws_access_key_id = A\naws_secret_access_key = s\ngpupack_role = agent\n"
                                     "gpupack_host = " + std::string(65, 'h') + "\n", "f")
                   .ok());
  auto twice = api::ParseCredentials(
      "[x]\naws_access_key_id = A\naws_secret_access_key = s\ngpupack_role = agent\ngpupack_host = a\ngpupack_host = b\n",
      "f");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("line 6: gpupack_host given twice"), std::string::npos);

  // Only an agent key registers a host: on an admin key (the default role) or a reader key it is refused.
  auto admin = api::ParseCredentials("[ops]\ngpupack_host = gpu-node-17\naws_access_key_id = A\naws_secret_access_key = s\n", "f");
  ASSERT_FALSE(admin.ok());
  EXPECT_EQ(admin.status().message(),
            "f line 2: gpupack_host binds an agent key to its host, but profile [ops] has gpupack_role admin (add "
            "gpupack_role = agent, or remove gpupack_host)");
  auto reader = api::ParseCredentials(
      "[r]\naws_access_key_id = A\naws_secret_access_key = s\ngpupack_role = reader\ngpupack_host = h\n", "f");
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.status().message().find("has gpupack_role reader"), std::string::npos);
}

TEST(KeyRoles, SelectProfileFollowsTheAwsCli) {
  const std::vector<Credential> both = {{"A1", "s1", "default"}, {"A2", "s2", "node", KeyRole::kAgent}};
  EXPECT_EQ(api::SelectProfile(both, "", "f")->access_key_id, "A1");      // [default]
  EXPECT_EQ(api::SelectProfile(both, "node", "f")->access_key_id, "A2");  // named
  auto missing = api::SelectProfile(both, "ops", "f");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "f has no profile [ops] (it has [default], [node]): choose one with --profile NAME or AWS_PROFILE");
  const std::vector<Credential> one = {{"A2", "s2", "node", KeyRole::kAgent}};
  EXPECT_EQ(api::SelectProfile(one, "", "f")->access_key_id, "A2");  // the only one
  const std::vector<Credential> two = {{"A2", "s2", "node"}, {"A3", "s3", "ops"}};
  auto ambiguous = api::SelectProfile(two, "", "f");
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_NE(ambiguous.status().message().find("no profile [default] and more than one profile"), std::string::npos);
}

}  // namespace
}  // namespace gpupack
