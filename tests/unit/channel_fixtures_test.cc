// The agent channel across releases (docs/operations.md "Rolling upgrade"; docs/development.md "Releases"): the
// messages each release sent, recorded as JSON files in tests/fixtures/channel/<release tag>/ (v0.1.0, ...), must
// be understood by this build, both ways:
//   - old agent -> new server: every agent-*.json parses with the server's decoder (ParseAgentMessage), and
//     registration.json (the agent's RegisterContainerInstance body) registers an instance on a real control
//     plane, which answers the fields the agent reads;
//   - old server -> new agent: every server-*.json parses with the agent's decoder (ParseServerMessage);
//   - new -> old: what this build serializes for the same message still carries every field the recording had,
//     with the same value (a peer of that release reads its fields and ignores the rest).
// Every release's directory is checked, so a later release keeps the earlier recordings passing (never edit
// them; record a release that changes the channel with GPUPACK_RECORD_CHANNEL_FIXTURES=DIR, see the end of this
// file).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "protocol/messages.h"
#include "tests/unit/ecs_test_server.h"
#include "tests/unit/temp_dir.h"

namespace gpupack::api {
namespace {

namespace fs = std::filesystem;
using protocol::Json;

const fs::path kFixtures = GPUPACK_CHANNEL_FIXTURES;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Versions: the recorded releases' directories (v0.1.0, ...).
std::vector<fs::path> Versions() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kFixtures))
    if (e.is_directory() && e.path().filename().string().rfind('v', 0) == 0) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<fs::path> Files(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && e.path().extension() == ".json") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Covers: "" when every field of `old` is in `now` with the same value (objects compared field by field, arrays
// element by element), else the path of the first that is not.
std::string Covers(const Json& old, const Json& now, const std::string& path = "") {
  if (old.is_object()) {
    if (!now.is_object()) return path + " is no longer an object";
    for (const auto& [k, v] : old.items()) {
      if (!now.contains(k)) return path + "." + k + " is gone";
      if (std::string miss = Covers(v, now[k], path + "." + k); !miss.empty()) return miss;
    }
    return "";
  }
  if (old.is_array()) {
    if (!now.is_array() || now.size() != old.size()) return path + " is not the same array";
    for (size_t i = 0; i < old.size(); ++i)
      if (std::string miss = Covers(old[i], now[i], path + "[" + std::to_string(i) + "]"); !miss.empty()) return miss;
    return "";
  }
  return old == now ? "" : path + " was " + old.dump() + ", now " + now.dump();
}

TEST(ChannelFixturesTest, EveryRecordedReleaseHasMessagesOfBothSidesAndARegistration) {
  const auto versions = Versions();
  ASSERT_FALSE(versions.empty()) << "no recordings in " << kFixtures;
  for (const fs::path& v : versions) {
    // The message types each side sent in that release: all of them are recorded.
    EXPECT_EQ(Files(v, "agent-").size(), 7u) << v;  // hello, helloPart, state, heartbeat (2), ack, logEvents
    EXPECT_EQ(Files(v, "server-").size(), 6u) << v;  // welcome, assign, stop, ack, error, logs
    EXPECT_TRUE(fs::exists(v / "registration.json")) << v;
  }
}

// CheckRecordings: every recorded `prefix`*.json of every release parses with `parse`, and this build's
// serialization of what was parsed still carries every recorded field.
template <typename Parse>
void CheckRecordings(const std::string& prefix, Parse parse) {
  for (const fs::path& v : Versions()) {
    for (const fs::path& f : Files(v, prefix)) {
      SCOPED_TRACE(f.string());
      const std::string text = ReadFile(f);
      auto parsed = parse(text);
      ASSERT_TRUE(parsed.ok()) << parsed.status().message();
      const Json again = Json::parse(protocol::Serialize(*parsed));
      EXPECT_EQ(Covers(Json::parse(text), again), "");
    }
  }
}

TEST(ChannelFixturesTest, AnOldAgentsMessagesParseOnThisServerAndThisBuildStillSendsTheirFields) {
  CheckRecordings("agent-", [](const std::string& text) { return protocol::ParseAgentMessage(text); });
}

TEST(ChannelFixturesTest, AnOldServersMessagesParseOnThisAgentAndThisBuildStillSendsTheirFields) {
  CheckRecordings("server-", [](const std::string& text) { return protocol::ParseServerMessage(text); });
}

TEST(ChannelFixturesTest, AnOldAgentsRegistrationRegistersOnThisServer) {
  for (const fs::path& v : Versions()) {
    SCOPED_TRACE(v.string());
    testing_support::TempDir dir;
    EcsServer server(dir.File("gpupack.db"));
    const Json body = Json::parse(ReadFile(v / "registration.json"));
    server.Ok("CreateCluster", {{"clusterName", body["cluster"]}});
    const Json r = server.Ok("RegisterContainerInstance", body);
    // What the agent reads from the answer: the instance's ARN, and its GPUs as registered.
    const Json& ci = r["containerInstance"];
    ASSERT_TRUE(ci["containerInstanceArn"].is_string()) << r.dump();
    EXPECT_EQ(ci["agentConnected"], false);  // until its channel opens
    ASSERT_EQ(ci["gpuDevices"].size(), body["platformDevices"].size()) << r.dump();
    EXPECT_EQ(ci["gpuDevices"][0]["gpuId"], body["platformDevices"][0]["id"]);
    EXPECT_EQ(ci["gpuDevices"][0]["totalMemoryInMiB"], body["platformDevices"][0]["gpuInfo"]["memoryInMiB"]);
    bool channel_attribute = false;
    for (const Json& a : ci["attributes"])
      channel_attribute = channel_attribute || (a["name"] == protocol::kChannelAttribute && a["value"] == "v1");
    EXPECT_TRUE(channel_attribute) << "the server no longer records the agent's channel version: " << r.dump();
  }
}

// ---- Recording: GPUPACK_RECORD_CHANNEL_FIXTURES=DIR build/tests/control_plane_test
// --gtest_filter='ChannelFixturesTest.TheCurrentMessages*' writes this build's messages to DIR (then copy
// them to tests/fixtures/channel/<tag>/ for a release that changes the channel). Every field is set.

protocol::TaskReport Report(const std::string& arn, protocol::TaskStatus status) {
  protocol::TaskReport r;
  r.task_arn = arn;
  r.status = status;
  r.containers = {{"main", status, status == protocol::TaskStatus::kStopped ? std::optional<int>(137) : std::nullopt,
                   status == protocol::TaskStatus::kStopped ? "killed after the grace" : ""}};
  if (status == protocol::TaskStatus::kStopped) {
    r.stop_code = protocol::StopCode::kEssentialContainerExited;
    r.reason = "Essential container in task exited";
  }
  return r;
}

std::vector<std::pair<std::string, std::string>> CurrentMessages() {
  namespace p = protocol;
  const std::string task = "arn:aws:ecs:us-east-1:000000000000:task/default/0f1e2d3c4b5a69788796a5b4c3d2e1f0";
  std::vector<std::pair<std::string, std::string>> out;
  out.push_back({"agent-hello.json", p::Serialize(p::AgentMessage(p::Hello{{Report(task, p::TaskStatus::kRunning)}, false}))});
  out.push_back({"agent-hello-part.json",
                 p::Serialize(p::AgentMessage(p::HelloPart{{Report(task, p::TaskStatus::kRunning)}, false, true}))});
  out.push_back({"agent-state.json", p::Serialize(p::AgentMessage(p::StateReport{12, Report(task, p::TaskStatus::kStopped)}))});
  p::Heartbeat hb;
  hb.id = 13;
  hb.impaired = false;
  out.push_back({"agent-heartbeat.json", p::Serialize(p::AgentMessage(hb))});
  hb.id = 14;
  hb.held_gpus = {"GPU-3f8e2a10-0000-4000-8000-000000000001"};
  hb.gpu_memory = p::GpuMemoryReading{640, {{task, {{"GPU-3f8e2a10-0000-4000-8000-000000000000", 3221225472}}}}};
  out.push_back({"agent-heartbeat-gpu-memory.json", p::Serialize(p::AgentMessage(hb))});
  out.push_back({"agent-ack.json", p::Serialize(p::AgentMessage(p::Ack{7}))});
  p::LogsAnswer logs;
  logs.id = 9;
  logs.found = true;
  logs.events = {{1700000000000, "epoch 1: loss 0.42"}, {1700000000500, "epoch 2: loss 0.31"}};
  logs.next_forward = 2;
  logs.next_backward = 0;
  logs.at_end = true;
  out.push_back({"agent-log-events.json", p::Serialize(p::AgentMessage(logs))});

  p::Assignment a;
  a.task_arn = task;
  a.cluster = "default";
  a.task_definition_arn = "arn:aws:ecs:us-east-1:000000000000:task-definition/infer:3";
  p::AssignedContainer c;
  c.name = "main";
  c.image = "busybox";
  c.gpu_ids = {"GPU-3f8e2a10-0000-4000-8000-000000000000"};
  c.mps = p::MpsLimits{4096, 50};
  c.entry_point = {"/bin/sh", "-c"};
  c.command = {"sleep 600"};
  c.environment = {{"MODEL", "llama"}};
  c.override_environment = {{"BATCH", "8"}};
  c.cpu = 256;
  c.memory = 1024;
  c.memory_reservation = 512;
  a.containers = {c};
  out.push_back({"server-welcome.json", p::Serialize(p::ServerMessage(p::Welcome{{a}, {{task + "x", "gone"}}, 5000, 3}))});
  out.push_back({"server-assign.json", p::Serialize(p::ServerMessage(p::Assign{21, a, 3}))});
  out.push_back({"server-stop.json", p::Serialize(p::ServerMessage(p::Stop{22, {task, "Task stopped by user"}, 3}))});
  out.push_back({"server-ack.json", p::Serialize(p::ServerMessage(p::Ack{12}))});
  out.push_back({"server-error.json",
                 p::Serialize(p::ServerMessage(p::Error{12, "task is not on this instance", p::RefusalCode::kRejected}))});
  p::LogsRequest req;
  req.id = 9;
  req.task_arn = task;
  req.container_name = "main";
  req.forward = true;
  req.position = 0;
  req.start_ms = 1700000000000;
  req.end_ms = 1700000100000;
  req.terms = {"loss"};
  req.limit = 100;
  req.max_bytes = 65536;
  out.push_back({"server-logs.json", p::Serialize(p::ServerMessage(req))});
  return out;
}

TEST(ChannelFixturesTest, TheCurrentMessagesParseAndAreRecordedWhenAsked) {
  const char* dir = std::getenv("GPUPACK_RECORD_CHANNEL_FIXTURES");
  const auto messages = CurrentMessages();
  for (const auto& [name, text] : messages) {  // whatever is recorded must parse here first
    SCOPED_TRACE(name);
    const bool agent = name.rfind("agent-", 0) == 0;
    EXPECT_TRUE(agent ? protocol::ParseAgentMessage(text).ok() : protocol::ParseServerMessage(text).ok()) << text;
  }
  if (dir == nullptr || *dir == '\0') return;  // not recording
  fs::create_directories(dir);
  for (const auto& [name, text] : messages) std::ofstream(fs::path(dir) / name) << Json::parse(text).dump(2) << "\n";
}

}  // namespace
}  // namespace gpupack::api
