// console_test: the web console's parts without a browser: sessions (tokens, idle expiry, logout, the cookie
// parser), the login check and session authentication of RequestAuthenticator, the reader role, and the count
// of refused placements. The console in a real browser: tests/console/console.test.mjs.
#include <chrono>
#include <set>

#include <gtest/gtest.h>

#include "api/console/console_handler.h"
#include "api/auth/console_sessions.h"
#include "api/auth/request_auth.h"

namespace gpupack::api {
namespace {

using namespace std::chrono_literals;

const Credential kAdmin{"AKIDADMIN0000000001", "admin/Secret+0123456789abcdef", "default", KeyRole::kAdmin};
const Credential kAgent{"AKIDAGENT0000000002", "agent-secret-0123456789", "node", KeyRole::kAgent};
const Credential kReader{"AKIDREADER000000003", "reader-secret-0123456789", "watcher", KeyRole::kReader};

struct FakeClock {
  std::chrono::steady_clock::time_point now{std::chrono::hours(1000)};
  ConsoleSessions::Clock fn() {
    return [this] { return now; };
  }
};

HttpRequest ConsoleCall(const std::string& cookie) {
  HttpRequest r;
  r.method = "POST";
  r.target = "/";
  r.headers = {{"host", "127.0.0.1"}, {"x-gpupack-console", "1"}};
  if (!cookie.empty()) r.headers.emplace_back("cookie", cookie);
  return r;
}

TEST(ConsoleSessions, TokensAre256RandomBitsInHex) {
  ConsoleSessions sessions({});
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string t = *sessions.Create({"A" + std::to_string(i), "p", KeyRole::kAdmin});  // a key holds 16 at most
    ASSERT_EQ(t.size(), 64u);
    EXPECT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_TRUE(seen.insert(t).second);
  }
  EXPECT_EQ(sessions.size(), 100u);
}

TEST(ConsoleSessions, IdleSessionsExpireAndUseKeepsThemAlive) {
  FakeClock clock;
  ConsoleSessions sessions({.idle = 60s, .max_sessions = 10}, clock.fn());
  const std::string t = *sessions.Create({"A", "p", KeyRole::kReader});
  clock.now += 59s;
  ASSERT_TRUE(sessions.Find(t).has_value());  // restarts the idle time
  clock.now += 59s;
  ASSERT_TRUE(sessions.Find(t).has_value());
  EXPECT_EQ(sessions.Find(t)->access_key_id, "A");
  clock.now += 60s;
  EXPECT_FALSE(sessions.Find(t).has_value());
  EXPECT_FALSE(sessions.Find(t).has_value());
}

TEST(ConsoleSessions, LogoutAndUnknownTokens) {
  ConsoleSessions sessions({});
  const std::string t = *sessions.Create({"A", "p", KeyRole::kAdmin});
  EXPECT_FALSE(sessions.Find(std::string(64, '0')).has_value());
  EXPECT_FALSE(sessions.Find("short").has_value());
  sessions.Erase(t);
  EXPECT_FALSE(sessions.Find(t).has_value());
  sessions.Erase("never-issued");
}

TEST(ConsoleSessions, TheLeastRecentlyUsedGoesBeyondTheBound) {
  FakeClock clock;
  ConsoleSessions sessions({.idle = 3600s, .max_sessions = 2}, clock.fn());
  const std::string a = *sessions.Create({"A", "p", KeyRole::kAdmin});
  clock.now += 1s;
  const std::string b = *sessions.Create({"B", "p", KeyRole::kAdmin});
  clock.now += 1s;
  ASSERT_TRUE(sessions.Find(a));  // a is now the most recent
  clock.now += 1s;
  const std::string c = *sessions.Create({"C", "p", KeyRole::kAdmin});
  EXPECT_TRUE(sessions.Find(a));
  EXPECT_FALSE(sessions.Find(b));
  EXPECT_TRUE(sessions.Find(c));
}

// Issue 29: ten thousand logins with one key evicted the administrator's session. A key holds at most 16
// sessions; past them it ends its own least recently used one, never another key's.
TEST(ConsoleSessions, AKeyPastItsSixteenSessionsEndsOnlyItsOwnLeastRecentlyUsed) {
  FakeClock clock;
  ConsoleSessions sessions({.idle = 3600s, .max_sessions = 10000}, clock.fn());
  const std::string admin = *sessions.Create({"ADMIN", "p", KeyRole::kAdmin});
  clock.now += 1s;
  const std::string first = *sessions.Create({"A", "p", KeyRole::kReader});
  clock.now += 1s;
  const std::string second = *sessions.Create({"A", "p", KeyRole::kReader});
  clock.now += 1s;
  ASSERT_TRUE(sessions.Find(first));  // first is now A's most recently used
  std::string last;
  for (int i = 0; i < 10000; ++i) {
    clock.now += 1ms;
    last = *sessions.Create({"A", "p", KeyRole::kReader});
  }
  EXPECT_TRUE(sessions.Find(admin)) << "another key's logins ended the administrator's session";
  EXPECT_EQ(sessions.size(), 1u + 16u);
  EXPECT_FALSE(sessions.Find(second));
  EXPECT_FALSE(sessions.Find(first));
  EXPECT_TRUE(sessions.Find(last));
}

TEST(ConsoleSessions, TheCookieParserFindsOurCookieOnly) {
  EXPECT_EQ(SessionTokenOf("gpupack_session=abc"), "abc");
  EXPECT_EQ(SessionTokenOf("a=1; gpupack_session=abc; b=2"), "abc");
  EXPECT_EQ(SessionTokenOf("a=1;gpupack_session=\"abc\""), "abc");
  EXPECT_EQ(SessionTokenOf("xgpupack_session=abc; gpupack_sessionx=def"), std::nullopt);
  EXPECT_EQ(SessionTokenOf("gpupack_session="), std::nullopt);
  EXPECT_EQ(SessionTokenOf(""), std::nullopt);
  EXPECT_EQ(SessionTokenOf(";;;="), std::nullopt);
}

TEST(ConsoleRoles, OnlyAdminKeysWriteInTheConsole) {
  EXPECT_EQ(ConsoleRole(KeyRole::kAdmin), KeyRole::kAdmin);
  EXPECT_EQ(ConsoleRole(KeyRole::kAgent), KeyRole::kReader);
  EXPECT_EQ(ConsoleRole(KeyRole::kReader), KeyRole::kReader);
}

TEST(ConsoleRoles, ReadersReadAndNothingElse) {
  for (const char* op : {"DescribeClusters", "ListClusters", "DescribeTasks", "ListTasks", "DescribeContainerInstances",
                         "ListContainerInstances", "DescribeTaskDefinition", "ListTaskDefinitions", "ListAttributes",
                         "ExplainPlacement", "ConsoleRead", "Logs_20140328.GetLogEvents", "FilterLogEvents",
                         "logs:DescribeLogStreams"}) {
    EXPECT_TRUE(RoleAllows(KeyRole::kReader, op)) << op;
  }
  for (const char* op : {"RunTask", "StartTask", "StopTask", "CreateCluster", "DeleteCluster", "PutAttributes",
                         "RegisterContainerInstance", "SubmitTaskStateChange", "RegisterTaskDefinition",
                         "UpdateContainerInstancesState", "AgentChannel", "Other.RunTask", "Logs_20140328.PutLogEvents",
                         "logs:CreateLogGroup", "", "Get"}) {
    EXPECT_FALSE(RoleAllows(KeyRole::kReader, op)) << op;
  }
  EXPECT_FALSE(RoleAllows(KeyRole::kAgent, "ConsoleRead"));
  EXPECT_TRUE(RoleAllows(KeyRole::kAdmin, "ConsoleRead"));
}

TEST(ConsoleLogin, TheRightSecretStartsASessionWithTheConsoleRole) {
  RequestAuthenticator auth(SigV4Verifier({kAdmin, kAgent, kReader}, "us-east-1"));
  EXPECT_EQ(auth.Login(kAdmin.access_key_id, "wrong").status().code(), ErrorCode::kUnrecognizedClient);
  EXPECT_EQ(auth.Login("AKIDUNKNOWN", kAdmin.secret_access_key).status().code(), ErrorCode::kUnrecognizedClient);
  EXPECT_EQ(auth.Login(kAdmin.access_key_id, kAdmin.secret_access_key + "x").status().code(),
            ErrorCode::kUnrecognizedClient);
  // The same message whichever part was wrong.
  EXPECT_EQ(auth.Login(kAdmin.access_key_id, "wrong").status().message(),
            auth.Login("AKIDUNKNOWN", "wrong").status().message());
  // Issue 29: an agent key (on every GPU host) opened the console and read what an administrator reads.
  const auto agent = auth.Login(kAgent.access_key_id, kAgent.secret_access_key);
  EXPECT_EQ(agent.status().code(), ErrorCode::kAccessDenied);
  EXPECT_NE(agent.status().message().find("may not open a console session"), std::string::npos);
  for (const Credential& key : {kAdmin, kReader}) {
    auto token = auth.Login(key.access_key_id, key.secret_access_key);
    ASSERT_TRUE(token.ok()) << token.status().message();
    SigV4Result who = auth.Authenticate(ConsoleCall("gpupack_session=" + *token));
    ASSERT_TRUE(who.status.ok()) << who.status.message();
    EXPECT_EQ(who.access_key_id, key.access_key_id);
    EXPECT_EQ(who.role, key.role == KeyRole::kAdmin ? KeyRole::kAdmin : KeyRole::kReader);
    auth.Logout(*token);
    EXPECT_EQ(auth.Authenticate(ConsoleCall("gpupack_session=" + *token)).status.code(), ErrorCode::kAccessDenied);
  }
}

TEST(ConsoleLogin, ASessionNeedsTheConsoleHeaderAndNeverOpensTheAgentChannel) {
  RequestAuthenticator auth(SigV4Verifier({kAdmin}, "us-east-1"));
  auto token = auth.Login(kAdmin.access_key_id, kAdmin.secret_access_key);
  ASSERT_TRUE(token.ok());
  HttpRequest with = ConsoleCall("gpupack_session=" + *token);
  EXPECT_TRUE(auth.Check(with, "RunTask").ok());
  EXPECT_EQ(auth.Check(with, kAgentChannelAction).code(), ErrorCode::kMissingAuthenticationToken);
  HttpRequest without = with;
  std::erase_if(without.headers, [](const auto& h) { return h.first == "x-gpupack-console"; });
  EXPECT_EQ(auth.Authenticate(without).status.code(), ErrorCode::kMissingAuthenticationToken);
  EXPECT_EQ(auth.Authenticate(ConsoleCall("")).status.code(), ErrorCode::kAccessDenied);
}

}  // namespace
}  // namespace gpupack::api
