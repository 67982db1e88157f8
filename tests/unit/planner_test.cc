// Tests for the capacity planner (planner/): input errors that name file, line and field; the openb mapping;
// the one-dimensional bounds on a hand-checked fixture and on the real openb default list (the figures the
// openb README publishes); the fgd protocol's monotonicity and determinism; replay, size; report keys.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/ecs/codec.h"
#include "planner/bounds.h"
#include "planner/inputs.h"
#include "planner/protocols.h"
#include "planner/report.h"
#include "planner/simulation.h"
#include "scheduler/strategies.h"
#include "scheduler/validation.h"

namespace gpupack::plan {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// ---- Fixture builders -------------------------------------------------------------------------------------

Fleet ParseFleet(const std::string& text, const std::string& name = "fleet.json") {
  auto in = ParseInput(text, name);
  EXPECT_TRUE(in.ok()) << in.status().message();
  return std::get<Fleet>(std::move(in).value());
}

Workload ParseWorkload(const std::string& text, const std::string& name = "workload.json") {
  auto in = ParseInput(text, name);
  EXPECT_TRUE(in.ok()) << in.status().message();
  return std::get<Workload>(std::move(in).value());
}

// Expects ParseInput to refuse `text` with InvalidParameter and a message that contains every piece.
void ExpectInputError(const std::string& text, const std::string& name, const std::vector<std::string>& pieces) {
  auto in = ParseInput(text, name);
  ASSERT_FALSE(in.ok()) << "accepted:\n" << text;
  EXPECT_EQ(in.status().code(), ErrorCode::kInvalidParameter);
  for (const auto& p : pieces) EXPECT_NE(in.status().message().find(p), std::string::npos)
      << "message: " << in.status().message() << "\nmissing: " << p;
}

constexpr const char* kPodHeader =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";
constexpr const char* kNodeHeader = "sn,cpu_milli,memory_mib,gpu,model\n";

// Pods builds an openb pod list: Pods().Add("p0", 1, 460).Str().
class Pods {
 public:
  Pods& Add(const std::string& name, int num_gpu, int gpu_milli, int64_t created = 0, int64_t deleted = 100,
            const std::string& spec = "", int cpu_milli = 1000, int memory = 1024) {
    text_ += name + "," + std::to_string(cpu_milli) + "," + std::to_string(memory) + "," + std::to_string(num_gpu) +
             "," + std::to_string(gpu_milli) + "," + spec + ",LS,Running," + std::to_string(created) + "," +
             std::to_string(deleted) + "," + std::to_string(created) + "\n";
    return *this;
  }
  std::string Str() const { return kPodHeader + text_; }

 private:
  std::string text_;
};

// Nodes builds an openb node list: Nodes().Add(3, 8, "G2").Str() = three nodes of 8 G2 GPUs.
class Nodes {
 public:
  Nodes& Add(int count, int gpus, const std::string& model, int cpu_milli = 96000, int memory = 393216) {
    for (int i = 0; i < count; ++i)
      text_ += "node-" + std::to_string(n_++) + "," + std::to_string(cpu_milli) + "," + std::to_string(memory) + "," +
               std::to_string(gpus) + "," + model + "\n";
    return *this;
  }
  std::string Str() const { return kNodeHeader + text_; }

 private:
  std::string text_;
  int n_ = 0;
};

std::string OpenbFile(const std::string& name) { return BundledOpenbDir() + "/" + name; }

// ---- CSV errors -------------------------------------------------------------------------------------------

TEST(PlannerInputTest, CsvErrorsNameFileLineAndField) {
  // Line 1 is the header, so the second pod is on line 3.
  std::string pods = Pods().Add("p0", 1, 500).Str() + "p1,1000,1024,1,1200,,LS,Running,0,100,0\n";
  ExpectInputError(pods, "pods.csv", {"pods.csv:3:", "field 'gpu_milli'", "0..1000", "'1200'"});

  ExpectInputError(Pods().Add("p0", 1, 500).Str() + "p1,abc,1024,1,500,,LS,Running,0,100,0\n", "pods.csv",
                   {"pods.csv:3:", "field 'cpu_milli'", "'abc'"});
  ExpectInputError(std::string(kPodHeader) + "p0,1000,1024,1,500\n", "pods.csv",
                   {"pods.csv:2:", "expected 11 comma-separated fields", "got 5"});
  ExpectInputError(std::string(kPodHeader) + "p0,1000,1024,2,0,,LS,Running,0,100,0\n", "pods.csv",
                   {"pods.csv:2:", "field 'gpu_milli'"});
  ExpectInputError(Pods().Add("p0", 1, 500, /*created=*/50, /*deleted=*/10).Str(), "pods.csv",
                   {"pods.csv:2:", "field 'deletion_time'", "before creation_time (50)"});
  ExpectInputError(Pods().Add("p0", 1, 500, 0, 100, "V100||T4").Str(), "pods.csv", {"pods.csv:2:", "field 'gpu_spec'"});
  ExpectInputError(std::string(kNodeHeader) + "n0,96000,393216,8,G2\nn1,96000,393216,eight,G2\n", "nodes.csv",
                   {"nodes.csv:3:", "field 'gpu'", "'eight'"});
  ExpectInputError(std::string(kNodeHeader) + "n0,96000,393216,8,\n", "nodes.csv", {"nodes.csv:2:", "field 'model'"});
  ExpectInputError("a,b,c\n1,2,3\n", "what.csv", {"what.csv:1:", "neither an openb node list", "nor an openb pod list"});
  ExpectInputError("", "empty.csv", {"empty.csv:1:", "empty"});
}

TEST(PlannerInputTest, LoadInputNamesAMissingFile) {
  auto in = LoadInput("/nonexistent/pods.csv");
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), ErrorCode::kInvalidParameter);
  EXPECT_NE(in.status().message().find("/nonexistent/pods.csv"), std::string::npos);
}

// ---- JSON errors ------------------------------------------------------------------------------------------

TEST(PlannerInputTest, JsonErrorsNameFileLineAndField) {
  // gpus of the second instance type is a string; its key is on line 5.
  ExpectInputError(R"({"instanceTypes": [
  {"name": "a", "cpu": 4096, "memory": 16384},
  {"name": "b",
   "cpu": 4096, "memory": 16384,
   "gpus": "8", "gpuMemory": 22587}
]})",
                   "fleet.json", {"fleet.json:5:", "field 'instanceTypes[1].gpus'", "expected an integer 0..64", "\"8\""});
  // A syntax error (the missing comma) is reported on its line, with the field it sits in.
  ExpectInputError("{\"instanceTypes\": [\n  {\"name\": \"a\"\n   \"cpu\": 1}\n]}", "fleet.json",
                   {"fleet.json:3:", "invalid JSON", "field 'instanceTypes[0].name'"});
  ExpectInputError(R"({"instanceTypes": [{"name": "a", "cpu": 1, "memory": 1, "gpus": 2}]})", "fleet.json",
                   {"fleet.json:1:", "field 'instanceTypes[0]'", "gpuMemory"});
  ExpectInputError(R"({"instanceTypes": [{"name": "a", "cpu": 1, "memory": 1}, {"name": "a", "cpu": 1, "memory": 1}]})",
                   "fleet.json", {"field 'instanceTypes[1].name'", "listed twice"});
  // Workloads: nvidiaMps memory must be an integer; the server's codec refuses a fraction at the field (line 4).
  ExpectInputError(R"({"tasks": [
  {"family": "llm", "containerDefinitions": [
    {"name": "main", "image": "img", "memory": 1024, "resourceRequirements": [
      {"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 1.5}}}]}]}
]})",
                   "w.json",
                   {"w.json:4:",
                    "field 'tasks[0].containerDefinitions[0].resourceRequirements[0].sharingStrategy.nvidiaMps.memory'",
                    "expected an integer"});
  // ... and an integer below 1 is the scheduler's validation's to refuse, at the task's line.
  ExpectInputError(R"({"tasks": [
  {"family": "llm", "containerDefinitions": [
    {"name": "main", "image": "img", "memory": 1024, "resourceRequirements": [
      {"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 0}}}]}]}
]})",
                   "w.json", {"w.json:2:", "field 'tasks[0]'", "'sharingStrategy.nvidiaMps.memory'", ">= 256"});
  // The scheduler's own task-definition validation speaks through the planner, at the task's line.
  ExpectInputError(R"({"tasks": [
  {"family": "ok", "containerDefinitions": [{"name": "main", "image": "img", "memory": 1024}]},
  {"family": "both", "containerDefinitions": [{"name": "main", "image": "img", "memory": 1024, "resourceRequirements": [
      {"type": "GPU", "value": "1", "sharingStrategy": {"nvidiaMps": {"memory": 1024}}}]}]}
]})",
                   "w.json", {"w.json:3:", "field 'tasks[1]'"});
  ExpectInputError(R"({"tasks": [{"family": "x"}]})", "w.json", {"w.json:1:", "containerDefinitions"});
  ExpectInputError(R"({"tasks": [{"family": "x", "containerDefinitions": [{"name": "m", "image": "img", "memory": 64}], "weight": -1}]})", "w.json",
                   {"field 'tasks[0].weight'"});
  ExpectInputError(R"({"tasks": [{"family": "x", "containerDefinitions": [{"name": "m", "image": "img", "memory": 64}],
  "schedule": [{"arrival": 10, "departure": 5}]}]})",
                   "w.json", {"w.json:2:", "field 'tasks[0].schedule[0].departure'"});
  ExpectInputError(R"({"nodes": []})", "x.json", {"x.json:1:", "instanceTypes", "tasks"});
}

// The whole message of a refusal, byte for byte: file, line, field and the planner's words (planner/inputs_dialect.h).
TEST(PlannerInputTest, JsonErrorsAreWordedExactly) {
  const std::string task =
      R"("family": "x", "containerDefinitions": [{"name": "m", "image": "img", "memory": 64, )"
      R"("resourceRequirements": [{"type": "GPU", "value": "1"}]}])";
  auto tasks = [&](const std::string& fields) { return "{\"tasks\": [{" + task + ",\n " + fields + "}]}"; };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"instanceTypes\": [\n {\"name\": \"a\",\n \"memory\": 1}]}",
       "f.json:2: field 'instanceTypes[0]': missing required field 'cpu' (CPU units, 1024 per vCPU)"},
      {"{\"instanceTypes\": [\n {\"cpu\": 1, \"memory\": 1}]}",
       "f.json:2: field 'instanceTypes[0]': missing required field 'name'"},
      {"{\"instanceTypes\": [\n {\"name\": null, \"cpu\": 1, \"memory\": 1}]}",
       "f.json:2: field 'instanceTypes[0].name': expected a string, got null"},
      {"{\"instanceTypes\": [\n {\"name\": \"a\", \"count\": 2.0, \"cpu\": 1, \"memory\": 1}]}",
       "f.json:2: field 'instanceTypes[0].count': expected an integer 0..1000000, got 2.0"},
      {"{\"instanceTypes\": [\n {\"name\": \"a\", \"count\": \"this is a very long string value that goes on and on "
       "and on for more than sixty chars\", \"cpu\": 1, \"memory\": 1}]}",
       "f.json:2: field 'instanceTypes[0].count': expected an integer 0..1000000, got \"this is a very long string "
       "value that goes on and on and..."},
      {"{\"instanceTypes\": [\n {\"name\": \"a\", \"cpu\": 1, \"memory\": 1,\n \"attributes\": {\"ok\": \"y\", "
       "\"n\": null,\n   \"bad\": 3}}]}",
       "f.json:4: field 'instanceTypes[0].attributes.bad': expected a string or null, got 3"},
      {"{\"instanceTypes\": [\n {\"name\": \"a\", \"cpu\": 1, \"memory\": 1,\n \"attributes\": [\"x\"]}]}",
       "f.json:3: field 'instanceTypes[0].attributes': expected an object of NAME: value, got [\"x\"]"},
      {"{\"instanceTypes\": []}", "f.json:1: field 'instanceTypes': expected a non-empty array of instance types"},
      {"{\"instanceTypes\": [\n {\"name\": \"a\", \"cpu\": 1, \"memory\": 1},\n [1,2,3]]}",
       "f.json:3: field 'instanceTypes[1]': expected an object, got [1,2,3]"},
      {"{\"tasks\": [\n \"x\"]}", "f.json:2: field 'tasks[0]': expected an object (a task definition), got \"x\""},
      {tasks("\"gpuModels\": \"T4\""),
       "f.json:2: field 'tasks[0].gpuModels': expected an array of strings, got \"T4\""},
      {tasks("\"gpuModels\": [\"\", 5]"),
       "f.json:2: field 'tasks[0].gpuModels[0]': expected a non-empty string, got \"\""},
      {tasks("\"gpuModels\": [\"T4\",\n 5]"),
       "f.json:3: field 'tasks[0].gpuModels[1]': expected a non-empty string, got 5"},
      {tasks("\"weight\": \"2\""), "f.json:2: field 'tasks[0].weight': expected a number >= 0, got \"2\""},
      {tasks("\"schedule\": null"),
       "f.json:2: field 'tasks[0].schedule': expected an array of {\"arrival\": s, \"departure\": s}, got null"},
      {tasks("\"schedule\": [{\"arrival\": 1},\n 7]"),
       "f.json:3: field 'tasks[0].schedule[1]': expected an object, got 7"},
      {tasks("\"schedule\": [{\"departure\": 1}]"),
       "f.json:2: field 'tasks[0].schedule[0]': missing required field 'arrival' (seconds)"},
      {tasks("\"schedule\": [{\"arrival\": 5,\n \"departure\": \"9\"}]"),
       "f.json:3: field 'tasks[0].schedule[0].departure': expected an integer 0..1125899906842624, got \"9\""},
      // The first problem in reading order wins (group is read before count and schedule).
      {tasks("\"schedule\": [{\"arrival\": \"a\", \"departure\": \"b\"}], \"count\": \"c\", \"group\": 1"),
       "f.json:2: field 'tasks[0].group': expected a string, got 1"},
      // A number beyond a double is refused as JSON, not thrown out of the parser.
      {"{\"tasks\": [{\"weight\": 1e400}]}", "f.json:1: invalid JSON: number overflow parsing '1e400'"},
  };
  for (const auto& [text, message] : cases) {
    auto in = ParseInput(text, "f.json");
    ASSERT_FALSE(in.ok()) << text;
    EXPECT_EQ(in.status().code(), ErrorCode::kInvalidParameter);
    EXPECT_EQ(in.status().message(), message) << text;
  }
  // A null departure is no departure.
  Workload w = ParseWorkload(tasks("\"schedule\": [{\"arrival\": 5, \"departure\": null}]"));
  ASSERT_EQ(w.tasks.at(0).schedule.size(), 1u);
  EXPECT_FALSE(w.tasks[0].schedule[0].departure.has_value());
}

// A workload's task definitions are read by the server's codec (api::ParseRegisterTaskDefinition) and checked
// by ValidateTaskDefinition, as RegisterTaskDefinition does: the planner accepts exactly what the server accepts,
// and refuses with the server's message, placed at the codec's field or at the task.
TEST(PlannerInputTest, TaskDefinitionsAreReadAsTheServerReadsThem) {
  const std::vector<std::string> definitions = {
      R"({"family": "ok", "containerDefinitions": [{"name": "m", "image": "img", "memory": 64}]})",
      R"({"family": "ok", "cpu": 1024, "memory": "2 GB", "containerDefinitions": [{"name": "m", "image": "img"}]})",
      R"({"family": "ok", "containerDefinitions": [{"name": "m", "image": "img", "memory": 64.0, "image2": 1}]})",
      R"({"family": "no-image", "containerDefinitions": [{"name": "m", "memory": 64}]})",
      R"({"family": "cpu-string", "containerDefinitions": [{"name": "m", "image": "img", "cpu": "1", "memory": 64}]})",
      R"({"family": "zero", "cpu": 0, "containerDefinitions": [{"name": "m", "image": "img", "memory": 64}]})",
      R"({"family": "bad family!", "containerDefinitions": [{"name": "m", "image": "img", "memory": 64}]})",
      R"({"family": "compat", "requiresCompatibilities": [""],
          "containerDefinitions": [{"name": "m", "image": "img", "memory": 64}]})",
      R"({"family": "distinct", "placementConstraints": [{"type": "distinctInstance"}],
          "containerDefinitions": [{"name": "m", "image": "img", "memory": 64}]})",
      R"({"family": "none-essential",
          "containerDefinitions": [{"name": "m", "image": "img", "memory": 64, "essential": false}]})",
  };
  for (const auto& text : definitions) {
    Json def = Json::parse(text);
    auto server = api::ParseRegisterTaskDefinition(def);
    Status server_status = server.ok() ? ValidateTaskDefinition(*server) : server.status();
    auto planner = ParseInput("{\"tasks\": [" + text + "]}", "w.json");
    EXPECT_EQ(planner.ok(), server_status.ok()) << text << "\nserver: " << server_status.message();
    if (!planner.ok() && !server_status.ok()) {
      // The server's message, without the codec's field path (the planner names the field itself).
      std::string what = server_status.message();
      if (!server.ok()) what = what.substr(what.find(": ") + 2);
      EXPECT_NE(planner.status().message().find(what), std::string::npos)
          << planner.status().message() << "\nserver: " << server_status.message();
    }
  }
  // The server refuses a container without an image; the planner no longer supplies one.
  ExpectInputError(R"({"tasks": [{"family": "x", "containerDefinitions": [{"name": "m", "memory": 64}]}]})", "w.json",
                   {"w.json:1:", "field 'tasks[0]'", "'image' is required"});
  // A codec refusal names the field, at its line.
  ExpectInputError(R"({"tasks": [
  {"family": "x", "containerDefinitions": [{"name": "m", "image": "img", "memory": 64,
    "cpu": "1"}]}
]})",
                   "w.json",
                   {"w.json:3:", "field 'tasks[0].containerDefinitions[0].cpu'", "expected an integer, got a string"});
  // The planner's own fields do not reach the codec (they would be kept as unknown fields there).
  Workload w = ParseWorkload(R"({"tasks": [{"family": "x", "count": 3, "weight": 2, "group": "g", "gpuModels": ["T4"],
    "schedule": [{"arrival": 1}], "containerDefinitions": [{"name": "m", "image": "img", "memory": 64}]}]})");
  ASSERT_EQ(w.tasks.size(), 1u);
  EXPECT_EQ(w.tasks[0].count, 3);
  EXPECT_EQ(w.tasks[0].group, "g");
  ASSERT_EQ(w.tasks[0].constraints.size(), 1u);
}

// Every strict prefix of a valid JSON fleet (a file cut short) is refused with a message that starts with the
// file name and a line number; a cut pod list is either a shorter valid list or refused the same way.
TEST(PlannerInputTest, TruncatedFilesAreRefusedWithALine) {
  const std::string fleet = R"({"instanceTypes": [
  {"name": "g5", "count": 2, "cpu": 49152, "memory": 188416, "gpus": 4, "gpuMemory": 22587,
   "attributes": {"zone": "a", "flag": null}}]})";
  ASSERT_TRUE(ParseInput(fleet, "f.json").ok());
  for (size_t n = 0; n < fleet.size(); ++n) {
    auto in = ParseInput(fleet.substr(0, n), "f.json");
    ASSERT_FALSE(in.ok()) << n;
    EXPECT_EQ(in.status().message().rfind("f.json:", 0), 0u) << n << ": " << in.status().message();
  }
  const std::string pods = Pods().Add("p0", 1, 500).Add("p1", 2, 1000).Str();
  for (size_t n = 0; n < pods.size(); ++n) {
    auto in = ParseInput(pods.substr(0, n), "p.csv");
    if (!in.ok()) {
      EXPECT_EQ(in.status().message().rfind("p.csv:", 0), 0u) << n << ": " << in.status().message();
    }
  }
}

// ---- the openb mapping ------------------------------------------------------------------------------------

TEST(OpenbMappingTest, CpuUnits) {
  EXPECT_EQ(OpenbCpuUnits(12000), 12288);  // 12 cores x 1024
  EXPECT_EQ(OpenbCpuUnits(500), 512);      // half a core
  EXPECT_EQ(OpenbCpuUnits(100), 102);      // 102.4 rounds to 102
  EXPECT_EQ(OpenbCpuUnits(1500), 1536);
  EXPECT_EQ(OpenbCpuUnits(0), 0);
}

TEST(OpenbMappingTest, PodsBecomeTasks) {
  Workload w = ParseWorkload(Pods()
                                 .Add("cpu-only", 0, 0)
                                 .Add("share", 1, 460)
                                 .Add("whole", 1, 1000)
                                 .Add("eight", 8, 1000)
                                 .Add("picky", 1, 250, 5, 9, "V100M16|V100M32", 6000, 12288)
                                 .Str(),
                             "pods.csv");
  ASSERT_EQ(w.tasks.size(), 5u);
  EXPECT_EQ(w.tasks[0].demand.gpu_kind, GpuKind::kNone);
  EXPECT_EQ(w.tasks[1].demand.gpu_kind, GpuKind::kShared);  // gpu_milli < 1000: a share of one GPU
  EXPECT_EQ(w.tasks[1].gpu_milli, 460);
  EXPECT_EQ(w.tasks[2].demand.gpu_kind, GpuKind::kDedicated);  // gpu_milli = 1000: one whole GPU
  EXPECT_EQ(w.tasks[2].demand.gpu_count, 1);
  EXPECT_EQ(w.tasks[3].demand.gpu_kind, GpuKind::kDedicated);  // num_gpu > 1
  EXPECT_EQ(w.tasks[3].demand.gpu_count, 8);
  const TaskSpec& picky = w.tasks[4];
  EXPECT_EQ(picky.demand.cpu, 6144);  // 6000 milli-cores x 1024 / 1000
  EXPECT_EQ(picky.demand.memory, 12288);
  EXPECT_EQ(picky.gpu_models, (std::vector<std::string>{"V100M16", "V100M32"}));
  ASSERT_EQ(picky.constraints.size(), 1u);
  EXPECT_EQ(picky.constraints[0].type, "memberOf");
  EXPECT_EQ(picky.constraints[0].expression, "attribute:gpu-model in [V100M16, V100M32]");
  ASSERT_EQ(picky.schedule.size(), 1u);
  EXPECT_EQ(picky.schedule[0].arrival, 5);
  EXPECT_EQ(picky.schedule[0].departure, 9);
  EXPECT_EQ(picky.origin, "pods.csv:6");
  EXPECT_EQ(GpuModelExpression({"T4"}), "attribute:gpu-model == T4");
}

TEST(OpenbMappingTest, NodesBecomeInstanceTypesInRowOrder) {
  // Identical rows are one instance type; registration keeps the file's row order (A, B, A).
  std::string text = std::string(kNodeHeader) + "n0,96000,393216,8,G2\nn1,8000,61440,1,P100\nn2,96000,393216,8,G2\n";
  Fleet f = ParseFleet(text, "nodes.csv");
  ASSERT_EQ(f.types.size(), 2u);
  EXPECT_EQ(f.types[0].name, "G2x8-96c-384g");
  EXPECT_EQ(f.types[0].count, 2);
  EXPECT_EQ(f.types[0].cpu, 98304);
  EXPECT_EQ(f.types[0].gpu_memory, 0);  // openb has no GPU memory column
  EXPECT_EQ(f.registration_order, (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(f.GpuCount(), 17);
  ASSERT_NE(std::find_if(f.types[1].attributes.begin(), f.types[1].attributes.end(),
                         [](const Attribute& a) { return a.name == "gpu-model" && a.value == "P100"; }),
            f.types[1].attributes.end());
}

TEST(OpenbMappingTest, GpuUnits) {
  Fleet openb = ParseFleet(Nodes().Add(2, 8, "G2").Str(), "nodes.csv");
  Workload w = ParseWorkload(Pods().Add("share", 1, 460).Add("whole", 1, 1000).Str(), "pods.csv");
  // auto: openb's GPU memory is unknown, so milli (1000 per GPU); a share of 460 milli is 460 units.
  auto milli = BuildScenario(&openb, w, GpuUnits::kAuto);
  ASSERT_TRUE(milli.ok()) << milli.status().message();
  EXPECT_EQ(milli->units, GpuUnits::kMilli);
  EXPECT_EQ(milli->type_gpu_size, (std::vector<MiB>{1000}));
  EXPECT_EQ(milli->shapes[milli->tasks[0].shape].demand.gpu_memory, 460);
  EXPECT_DOUBLE_EQ(milli->tasks[0].gpu_demand, 0.46);
  EXPECT_DOUBLE_EQ(milli->tasks[1].gpu_demand, 1.0);
  // MiB of an openb fleet cannot be known.
  auto mib = BuildScenario(&openb, w, GpuUnits::kMib);
  ASSERT_FALSE(mib.ok());
  EXPECT_NE(mib.status().message().find("nodes.csv:2: field 'model'"), std::string::npos) << mib.status().message();
  // With a JSON fleet in MiB, the share is that fraction of the smallest GPU the task may use:
  // ceil(460 x 15,360 / 1000) = ceil(7,065.6) = 7,066 MiB.
  Fleet json = ParseFleet(R"({"instanceTypes": [
    {"name": "big", "count": 1, "cpu": 8192, "memory": 65536, "gpus": 1, "gpuMemory": 24576, "gpuModel": "A10"},
    {"name": "small", "count": 1, "cpu": 8192, "memory": 65536, "gpus": 1, "gpuMemory": 15360, "gpuModel": "T4"}]})");
  auto in_mib = BuildScenario(&json, w, GpuUnits::kAuto);
  ASSERT_TRUE(in_mib.ok()) << in_mib.status().message();
  EXPECT_EQ(in_mib->units, GpuUnits::kMib);
  EXPECT_EQ(in_mib->shapes[in_mib->tasks[0].shape].demand.gpu_memory, 7066);
  // A MiB need in milli units: 4,096 MiB of the smallest GPU that holds it (T4, 15,360 MiB):
  // ceil(4,096 x 1000 / 15,360) = ceil(266.67) = 267 units.
  Workload mps = ParseWorkload(R"({"tasks": [{"family": "svc", "containerDefinitions": [{"name": "m", "image": "img", "memory": 512,
    "resourceRequirements": [{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 4096}}}]}]}]})");
  auto as_milli = BuildScenario(&json, mps, GpuUnits::kMilli);
  ASSERT_TRUE(as_milli.ok()) << as_milli.status().message();
  EXPECT_EQ(as_milli->shapes[0].demand.gpu_memory, 267);
}

// ---- bounds -----------------------------------------------------------------------------------------------

// The hand fixture, capacity 10, in arrival order: 5 7 1 6 7 1 6 2 5 (sum 40).
//   L1  = ceil(40 / 10) = 4.
//   L2: at a = 5, J1 = {w > 5} = {7, 6, 7, 6} (no two share a bin, nor one with a 5), J2 = {}, J3 = {5, 5}:
//       4 + 0 + ceil((10 - 0) / 10) = 5. (At a = 0: J2 = {7,6,7,6} has 40 - 26 = 14 free for J3's 14: 4.)
//   FFD: 7 7 6 6 5 5 2 1 1 -> [7 2 1] [7 1] [6] [6] [5 5] = 5 bins.
//   best fit in order: 5 | 7 | 1 -> fullest with room [7] (3 left) | 6 | 7 | 1 -> [7 1] (2 left) | 6 |
//       2 -> [7] (3 left, the second one) | 5 -> [5] = [5 5] [7 1 1] [6] [7 2] [6] = 5 bins.
//   first fit in order: [5 1 1 2] [7] [6] [7] [6] and the last 5 fits none of them (1, 3, 4, 3, 4 left): 6 bins.
const std::vector<int64_t> kFixture = {5, 7, 1, 6, 7, 1, 6, 2, 5};

TEST(BoundsTest, HandFixture) {
  EXPECT_EQ(LowerBoundL1(kFixture, 10), 4);
  EXPECT_EQ(LowerBoundL2(kFixture, 10), 5);
  EXPECT_EQ(FirstFitDecreasing(kFixture, 10), 5);
  EXPECT_EQ(BestFit(kFixture, 10), 5);
  EXPECT_EQ(FirstFit(kFixture, 10), 6);
  // Three items of 51: L1 = ceil(153 / 100) = 2, but no two share a bin, so L2 = 3.
  EXPECT_EQ(LowerBoundL1({51, 51, 51}, 100), 2);
  EXPECT_EQ(LowerBoundL2({51, 51, 51}, 100), 3);
}

// The same fixture as an openb pod list (x 100 milli), through the whole bounds protocol; a pod of two GPUs
// and a CPU-only pod are left out.
TEST(BoundsTest, HandFixtureAsPods) {
  Pods pods;
  for (size_t i = 0; i < kFixture.size(); ++i) pods.Add("p" + std::to_string(i), 1, static_cast<int>(kFixture[i] * 100), i);
  pods.Add("two", 2, 1000, 20).Add("cpu", 0, 0, 21);
  Workload w = ParseWorkload(pods.Str(), "pods.csv");
  auto sc = BuildScenario(nullptr, w, GpuUnits::kAuto);
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  auto b = RunBounds(*sc);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->capacity, 1000);
  EXPECT_EQ(b->items, 9);
  EXPECT_EQ(b->skipped, 2);
  EXPECT_EQ(b->l1, 4);
  EXPECT_EQ(b->l2, 5);
  EXPECT_EQ(b->ffd, 5);
  EXPECT_EQ(b->best_fit, 5);
  EXPECT_EQ(b->first_fit, 6);
  // Every GPU task: the pod of two GPUs is two whole items (1000 each), arriving last (time 20).
  //   sum 4000 + 2000 = 6000: L1 = 6. L2 at a = 500: J1 = {700, 600, 700, 600, 1000, 1000}, J3 = {500, 500}:
  //   6 + ceil(1000 / 1000) = 7. FFD: [1000] [1000] [700 200 100] [700 100] [600] [600] [500 500] = 7.
  //   Best fit and first fit in arrival order: the single-GPU bins (5 and 6) plus two new ones.
  EXPECT_EQ(b->multi_gpu_tasks, 1);
  EXPECT_EQ(b->all.items, 11);
  EXPECT_EQ(b->all.l1, 6);
  EXPECT_EQ(b->all.l2, 7);
  EXPECT_EQ(b->all.ffd, 7);
  EXPECT_EQ(b->all.best_fit, 7);
  EXPECT_EQ(b->all.first_fit, 8);
}

// The scheduler's binpack:gpuMemory on single-GPU instances is best fit: placing the fixture at once uses the
// 5 GPUs best fit needs; spread:instanceId puts each pod on its own GPU (9).
TEST(BoundsTest, SchedulerBinpackGpuMemoryIsBestFit) {
  Pods pods;
  for (size_t i = 0; i < kFixture.size(); ++i) pods.Add("p" + std::to_string(i), 1, static_cast<int>(kFixture[i] * 100), i);
  Workload w = ParseWorkload(pods.Str(), "pods.csv");
  Fleet fleet = ParseFleet(Nodes().Add(9, 1, "T4", 64000, 262144).Str(), "nodes.csv");
  auto sc = BuildScenario(&fleet, w, GpuUnits::kMilli);
  ASSERT_TRUE(sc.ok());
  ReplayOptions o;
  o.at_once = true;
  auto r = RunReplay(*sc, {*ParseStrategy("binpack:gpuMemory"), *ParseStrategy("spread:instanceId")}, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->strategies[0].peak_gpus_in_use, 5);
  EXPECT_EQ(r->strategies[0].refused, 0);
  EXPECT_EQ(r->strategies[1].peak_gpus_in_use, 9);
}

// The openb README's one-dimensional reference for the default list: 6,989 single-GPU pods (3,911 whole,
// 3,078 fractional), bins of 1000 milli: L1 = 5,643, L2 = 5,833, FFD = 5,886, best fit 5,912, first fit 5,914.
TEST(BoundsTest, OpenbDefaultList) {
  const std::string path = OpenbFile("openb_pod_list_default.csv");
  if (!fs::exists(path)) GTEST_SKIP() << path << " is missing (set GPUPACK_OPENB_DIR)";
  auto in = LoadInput(path);
  ASSERT_TRUE(in.ok()) << in.status().message();
  const Workload& w = std::get<Workload>(*in);
  auto sc = BuildScenario(nullptr, w, GpuUnits::kMilli);
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  auto b = RunBounds(*sc);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->items, 6989);
  EXPECT_EQ(b->whole, 3911);
  EXPECT_EQ(b->fractional, 3078);
  EXPECT_EQ(b->l1, 5643);
  EXPECT_EQ(b->l2, 5833);
  EXPECT_EQ(b->ffd, 5886);
  EXPECT_EQ(b->best_fit, 5912);
  EXPECT_EQ(b->first_fit, 5914);
}

TEST(BoundsTest, OpenbNodeListHasTheReadmeGpus) {
  const std::string path = OpenbFile("openb_node_list_gpu_node.csv");
  if (!fs::exists(path)) GTEST_SKIP() << path << " is missing (set GPUPACK_OPENB_DIR)";
  auto in = LoadInput(path);
  ASSERT_TRUE(in.ok()) << in.status().message();
  const Fleet& f = std::get<Fleet>(*in);
  EXPECT_EQ(f.InstanceCount(), 1213);
  EXPECT_EQ(f.GpuCount(), 6212);
}

// ---- fgd --------------------------------------------------------------------------------------------------

// 28 GPUs: three 4 x T4 (16 GiB) and two 8 x A10 (24 GiB).
constexpr const char* kFleetJson = R"({"instanceTypes": [
  {"name": "g4", "count": 3, "cpu": 16384, "memory": 65536, "gpus": 4, "gpuMemory": 16384, "gpuModel": "T4"},
  {"name": "g8", "count": 2, "cpu": 32768, "memory": 131072, "gpus": 8, "gpuMemory": 24576, "gpuModel": "A10"}]})";

std::string SharedTask(const std::string& family, int mib, double weight, int cpu = 1024) {
  return R"({"family": ")" + family + R"(", "weight": )" + std::to_string(weight) +
         R"(, "containerDefinitions": [{"name": "m", "image": "img", "cpu": )" + std::to_string(cpu) +
         R"(, "memory": 2048, "resourceRequirements": [{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": )" +
         std::to_string(mib) + "}}}]}]}";
}
std::string DedicatedTask(const std::string& family, int gpus, double weight) {
  return R"({"family": ")" + family + R"(", "weight": )" + std::to_string(weight) +
         R"(, "containerDefinitions": [{"name": "m", "image": "img", "cpu": 2048, "memory": 8192, "resourceRequirements": [{"type": "GPU", "value": ")" +
         std::to_string(gpus) + R"("}]}]})";
}

const std::string kWorkloadJson = "{\"tasks\": [" + SharedTask("small", 3000, 3) + "," + SharedTask("half", 8192, 2) +
                                  "," + SharedTask("big", 12000, 1) + "," + DedicatedTask("one", 1, 2) + "," +
                                  DedicatedTask("four", 4, 0.5) + "]}";

class FgdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fleet_ = ParseFleet(kFleetJson);
    workload_ = ParseWorkload(kWorkloadJson);
    auto sc = BuildScenario(&fleet_, workload_, GpuUnits::kAuto);
    ASSERT_TRUE(sc.ok()) << sc.status().message();
    scenario_ = std::move(sc).value();
  }
  FgdReport Run(std::vector<uint64_t> seeds, int jobs, std::vector<PlanStrategy> strategies = AllStrategies()) {
    FgdOptions o;
    o.seeds = std::move(seeds);
    o.jobs = jobs;
    auto r = RunFgd(scenario_, strategies, o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return std::move(r).value();
  }
  Fleet fleet_;
  Workload workload_;
  Scenario scenario_;
};

TEST_F(FgdTest, SamplesUntilDemandReached) {
  EXPECT_EQ(scenario_.gpu_count, 28);
  std::vector<int> seq = SampleArrivals(scenario_, 42, 130);
  double arrived = 0;
  for (int t : seq) arrived += scenario_.tasks[t].gpu_demand;
  // 130% of 28 GPUs = 36.4 GPUs; the last arrival crosses it, the one before had not.
  EXPECT_GE(arrived, 36.4 - 1e-9);
  EXPECT_LT(arrived - scenario_.tasks[seq.back()].gpu_demand, 36.4);
  EXPECT_EQ(seq, SampleArrivals(scenario_, 42, 130));
  EXPECT_NE(seq, SampleArrivals(scenario_, 43, 130));
}

TEST_F(FgdTest, AllocationGrowsWithDemandAndNeverExceedsCapacity) {
  FgdReport r = Run({42, 43, 44}, 2);
  ASSERT_EQ(r.strategies.size(), 8u);
  for (const auto& s : r.strategies) {
    ASSERT_EQ(s.allocated_pct.size(), 131u) << s.name;
    EXPECT_EQ(s.allocated_pct[0], 0.0);
    for (const auto& run : s.runs) {
      for (size_t k = 1; k < run.allocated_pct.size(); ++k) {
        EXPECT_GE(run.allocated_pct[k], run.allocated_pct[k - 1]) << s.name << " seed " << run.seed << " at " << k;
        EXPECT_LE(run.allocated_pct[k], 100.0 + 1e-9);
      }
      EXPECT_EQ(run.placed + run.refused, run.arrivals);
      EXPECT_GT(run.refused, 0) << "130% of capacity cannot all be placed";
      // The refused tasks' GPU demand: more than nothing, at most 8 GPUs each (openb's largest pod).
      EXPECT_GT(run.refused_gpu_demand, 0.0) << s.name;
      EXPECT_LE(run.refused_gpu_demand, 8.0 * run.refused) << s.name;
    }
    EXPECT_NEAR(s.unallocated_pct_at.at(130), 100.0 - s.allocated_pct[130], 1e-9);
    EXPECT_NEAR(s.unallocated_pct_at.at(100), 100.0 - s.allocated_pct[100], 1e-9);
  }
}

TEST_F(FgdTest, DeterministicBySeedWhateverTheThreads) {
  FgdReport a = Run({42, 43}, 1);
  FgdReport b = Run({42, 43}, 4);
  ASSERT_EQ(a.strategies.size(), b.strategies.size());
  for (size_t k = 0; k < a.strategies.size(); ++k) {
    EXPECT_EQ(a.strategies[k].allocated_pct, b.strategies[k].allocated_pct) << a.strategies[k].name;
    for (size_t s = 0; s < a.strategies[k].runs.size(); ++s) {
      EXPECT_EQ(a.strategies[k].runs[s].allocated_pct, b.strategies[k].runs[s].allocated_pct);
      EXPECT_EQ(a.strategies[k].runs[s].placed, b.strategies[k].runs[s].placed);
    }
  }
  // Another seed samples another sequence.
  FgdReport c = Run({44}, 1, {*ParseStrategy("binpack:gpuMemory")});
  EXPECT_NE(c.strategies[0].runs[0].allocated_pct, a.strategies[0].runs[0].allocated_pct);
}

// The refusal cache answers only what the Placer would have answered: with and without it, every arrival of
// a run without departures gets the same outcome and the allocation is the same after each.
TEST_F(FgdTest, RefusalCacheChangesNothing) {
  std::vector<int> seq = SampleArrivals(scenario_, 7, 200);
  for (const auto& strategy : AllStrategies()) {
    Simulation::Options with, without;
    with.seed = without.seed = 7;
    with.remember_failures = true;
    auto a = Simulation::Create(scenario_, strategy, with);
    auto b = Simulation::Create(scenario_, strategy, without);
    ASSERT_TRUE(a.ok() && b.ok());
    int refused = 0;
    for (size_t i = 0; i < seq.size(); ++i) {
      auto oa = (*a)->Arrive(seq[i], static_cast<int>(i));
      auto ob = (*b)->Arrive(seq[i], static_cast<int>(i));
      ASSERT_EQ(oa.placed, ob.placed) << strategy.name << " arrival " << i;
      refused += oa.placed ? 0 : 1;
      ASSERT_DOUBLE_EQ((*a)->allocated_gpus(), (*b)->allocated_gpus());
    }
    EXPECT_GT(refused, 0) << strategy.name;
  }
}

// ---- replay and size --------------------------------------------------------------------------------------

TEST(ReplayTest, DeparturesFreeCapacity) {
  // One node of 2 GPUs (milli). Whole-GPU pods: a [0,10), b [0,10), c [5,20) is refused (both GPUs held),
  // d [10,20) takes the GPU a or b left at 10 (departures come before arrivals at the same time).
  Fleet fleet = ParseFleet(Nodes().Add(1, 2, "T4").Str(), "nodes.csv");
  Workload w = ParseWorkload(
      Pods().Add("a", 1, 1000, 0, 10).Add("b", 1, 1000, 0, 10).Add("c", 1, 1000, 5, 20).Add("d", 1, 1000, 10, 20).Str(),
      "pods.csv");
  auto sc = BuildScenario(&fleet, w, GpuUnits::kAuto);
  ASSERT_TRUE(sc.ok());
  ReplayOptions o;
  o.buckets = 4;
  auto r = RunReplay(*sc, {*ParseStrategy("binpack:gpuMemory")}, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const auto& s = r->strategies[0];
  EXPECT_TRUE(r->timed);
  EXPECT_EQ(s.arrivals, 4);
  EXPECT_EQ(s.placed, 3);
  EXPECT_EQ(s.refused, 1);
  EXPECT_EQ(s.refusals.at("RESOURCE:GPU"), 1);
  EXPECT_EQ(s.peak_gpus_in_use, 2);
  EXPECT_DOUBLE_EQ(s.peak_allocated_pct, 100.0);
  // Buckets of ceil((20 - 0 + 4) / 4) = 6 s: [0,6) holds a, b and the refused c.
  ASSERT_EQ(s.timeline.size(), 4u);
  EXPECT_EQ(s.timeline[0].arrivals, 3);
  EXPECT_EQ(s.timeline[0].refusals.at("RESOURCE:GPU"), 1);
  // [6,12) starts with a and b (2 GPUs) and ends with d alone; [12,18) has no event and holds d's GPU;
  // [18,24) starts with it and ends empty when d departs at 20.
  EXPECT_EQ(s.timeline[1].peak_gpus_in_use, 2);
  EXPECT_EQ(s.timeline[2].arrivals, 0);
  EXPECT_EQ(s.timeline[2].peak_gpus_in_use, 1);
  EXPECT_DOUBLE_EQ(s.timeline[2].peak_allocated_pct, 50.0);
  EXPECT_EQ(s.timeline[3].peak_gpus_in_use, 1);
}

TEST(SizeTest, SmallestCountPerInstanceType) {
  // Five whole-GPU pods at once need 3 nodes of 2 GPUs, or 5 nodes of 1 GPU; the 4-GPU pod fits neither.
  std::string nodes = Nodes().Add(1, 2, "T4").Add(1, 1, "P100", 64000, 262144).Str();
  Fleet fleet = ParseFleet(nodes, "nodes.csv");
  Pods pods;
  for (int i = 0; i < 5; ++i) pods.Add("w" + std::to_string(i), 1, 1000, i);
  pods.Add("four", 4, 1000, 9);
  Workload w = ParseWorkload(pods.Str(), "pods.csv");
  auto sc = BuildScenario(&fleet, w, GpuUnits::kMilli);
  ASSERT_TRUE(sc.ok());
  SizeOptions o;
  o.at_once = true;
  auto r = RunSize(*sc, {*ParseStrategy("binpack:gpuMemory")}, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->strategies[0].types.size(), 2u);
  const auto& t2 = r->strategies[0].types[0];
  EXPECT_EQ(t2.instance_type, "T4x2-96c-384g");
  EXPECT_EQ(t2.count, 3);
  EXPECT_EQ(t2.unplaceable_tasks, 1);
  EXPECT_EQ(t2.unplaceable_examples, (std::vector<std::string>{"four"}));
  EXPECT_EQ(r->strategies[0].types[1].count, 5);
}

// ---- options and reports ----------------------------------------------------------------------------------

TEST(PlannerOptionsTest, StrategiesAndSeeds) {
  auto s = ParseStrategy("spread:attribute:gpu-model,binpack:gpuMemory");
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->chain.size(), 2u);
  EXPECT_EQ(s->chain[0].type, "spread");
  EXPECT_EQ(s->chain[0].field, "attribute:gpu-model");
  EXPECT_EQ(s->chain[1].field, "gpuMemory");
  EXPECT_FALSE(ParseStrategy("binpack:gpu").ok());
  EXPECT_TRUE(ParseStrategy("fgd").ok());  // the planner's baseline (not RunTask's)
  EXPECT_FALSE(ParseStrategy("fgd:x").ok());
  EXPECT_TRUE(ParseStrategy("binpack:fragmentation").ok());
  EXPECT_EQ(AllStrategies().size(), 8u);
  EXPECT_EQ(*ParseSeeds("42..51"), DefaultSeeds());
  EXPECT_EQ(*ParseSeeds("7"), (std::vector<uint64_t>{7}));
  EXPECT_EQ(*ParseSeeds("1,5,2"), (std::vector<uint64_t>{1, 5, 2}));
  EXPECT_FALSE(ParseSeeds("51..42").ok());
  EXPECT_FALSE(ParseSeeds("x").ok());
  EXPECT_FALSE(ParseGpuUnits("gib").ok());
}

// The default list is the strategy registry's listed kinds, in list order, with the planner's attribute for a
// named field; a refused --strategy names the list.
TEST(PlannerOptionsTest, DefaultStrategiesComeFromTheRegistry) {
  std::vector<std::string> names;
  for (const PlanStrategy& s : AllStrategies()) {
    names.push_back(s.name);
    ASSERT_EQ(s.chain.size(), 1u);
    EXPECT_EQ(ResolveStrategyKind(s.chain[0]), ListedStrategies()[names.size() - 1]) << s.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"binpack:gpuMemory", "binpack:cpu", "binpack:memory", "spread:instanceId",
                                             "spread:attribute:gpu-model", "random", "binpack:fragmentation",
                                             "fgd"}));
  auto bad = ParseStrategy("binpack:foo");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--strategy 'binpack:foo': Invalid placement strategy: binpack requires 'field' cpu, memory, gpuMemory or "
            "fragmentation, got 'foo'. (strategies: binpack:gpuMemory, binpack:cpu, binpack:memory, spread:instanceId, "
            "spread:attribute:NAME, random, binpack:fragmentation, fgd)");
}

TEST_F(FgdTest, JsonCsvAndSvgReports) {
  FgdReport r = Run({42, 43}, 2, {*ParseStrategy("binpack:gpuMemory"), *ParseStrategy("random")});
  PlanContext ctx{"fleet.json", 5, 28, 2, "workload.json", 5, "mib"};
  Json j = Json::parse(Render(ctx, r, Format::kJson));
  EXPECT_EQ(j["protocol"], "fgd");
  ASSERT_EQ(j["strategies"].size(), 2u);
  const Json& s = j["strategies"][0];
  EXPECT_EQ(s["name"], "binpack:gpuMemory");
  ASSERT_EQ(s["points"].size(), 131u);
  EXPECT_EQ(s["points"][100]["arrivedDemandPct"], 100);
  EXPECT_TRUE(s["points"][100]["allocatedPct"].is_number());
  EXPECT_TRUE(s["unallocatedPctAt"]["100"].is_number());
  EXPECT_TRUE(s["unallocatedPctAt"]["130"].is_number());
  EXPECT_NEAR(s["unallocatedPctAt"]["130"].get<double>(), r.strategies[0].unallocated_pct_at.at(130), 1e-4);
  EXPECT_EQ(j["seeds"], Json({42, 43}));

  std::string csv = Render(ctx, r, Format::kCsv);
  EXPECT_EQ(csv.rfind("strategy,arrivedDemandPct,allocatedPct\n", 0), 0u);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 2 * 131);

  std::string svg = FgdSvg(ctx, r);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  size_t polylines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++polylines;
  EXPECT_EQ(polylines, 2u);
  EXPECT_NE(svg.find("arrived GPU demand"), std::string::npos);
  EXPECT_NE(svg.find("allocated GPU capacity"), std::string::npos);
  EXPECT_NE(svg.find(">random"), std::string::npos);  // legend
  // The legend's box lies below the plot (whose x axis is at y = 520 - 60), so it covers no curve: every point
  // of every polyline is above the box's top.
  const size_t box = svg.find("fill=\"white\" stroke=\"#ccc\"");
  ASSERT_NE(box, std::string::npos);
  const size_t y_at = svg.rfind(" y=\"", box);
  const double box_top = std::stod(svg.substr(y_at + 4));
  EXPECT_GT(box_top, 460.0);
  for (size_t at = svg.find("points=\""); at != std::string::npos; at = svg.find("points=\"", at + 1)) {
    std::istringstream points(svg.substr(at + 8, svg.find('"', at + 8) - at - 8));
    for (std::string xy; points >> xy;) EXPECT_LT(std::stod(xy.substr(xy.find(',') + 1)), box_top) << xy;
  }
}

// With fgd in the run, the table ends with one summary line, the JSON has `summary` (each strategy's unallocated
// share at the demand and its difference to fgd) and the SVG legend the differences; without fgd, neither.
TEST_F(FgdTest, SummaryAgainstFgd) {
  FgdReport r = Run({42, 43}, 2, {*ParseStrategy("binpack:fragmentation"), *ParseStrategy("fgd"),
                                  *ParseStrategy("binpack:gpuMemory")});
  PlanContext ctx{"fleet.json", 5, 28, 2, "workload.json", 5, "mib"};
  Json j = Json::parse(Render(ctx, r, Format::kJson));
  ASSERT_TRUE(j.contains("summary"));
  const double fgd = r.strategies[1].unallocated_pct_at.at(130);
  EXPECT_NEAR(j["summary"]["fgdUnallocatedPct"].get<double>(), fgd, 1e-4);
  EXPECT_NEAR(j["summary"]["differenceToFgd"]["binpack:gpuMemory"].get<double>(),
              r.strategies[2].unallocated_pct_at.at(130) - fgd, 2e-4);
  EXPECT_EQ(j["summary"]["differenceToFgd"]["fgd"], 0.0);
  const std::string table = Render(ctx, r, Format::kTable);
  EXPECT_NE(table.find("\nunallocated at 130% (workload.json): binpack:fragmentation "), std::string::npos);
  EXPECT_NE(table.find(" vs fgd); fgd "), std::string::npos);
  EXPECT_NE(FgdSvg(ctx, r).find(" vs fgd)"), std::string::npos);
  FgdReport without = Run({42}, 1, {*ParseStrategy("binpack:gpuMemory")});
  EXPECT_FALSE(Json::parse(Render(ctx, without, Format::kJson)).contains("summary"));
  EXPECT_EQ(Render(ctx, without, Format::kTable).find("vs fgd"), std::string::npos);
}

TEST(PlannerReportTest, BoundsJsonKeys) {
  BoundsReport b;
  b.units = "milli";
  b.capacity = 1000;
  b.l1 = 4;
  b.l2 = 5;
  b.ffd = 5;
  b.best_fit = 5;
  b.first_fit = 6;
  Json j = Json::parse(Render(PlanContext{"", 0, 0, 0, "pods.csv", 9, "milli"}, b, Format::kJson));
  EXPECT_EQ(j["protocol"], "bounds");
  EXPECT_EQ(j["L1"], 4);
  EXPECT_EQ(j["L2"], 5);
  EXPECT_EQ(j["ffd"], 5);
  EXPECT_EQ(j["bestFit"], 5);
  EXPECT_EQ(j["firstFit"], 6);
  EXPECT_FALSE(j.contains("fleet"));
}

// ---- waiting (replay --wait, size --target-wait-p95) --------------------------------------------------------

// WaitFixture: one node of 1 GPU (milli). a 600 [0,10); b a whole GPU at 1 for 10 s: does not fit, waits (the
// head); c 300 at 2 for 2 s: backfills past b into the 400 left, at once. a leaves at 10: b starts, waited 9 s.
struct WaitFixture {
  Fleet fleet = ParseFleet(Nodes().Add(1, 1, "T4").Str(), "nodes.csv");
  Workload w = ParseWorkload(Pods().Add("a", 1, 600, 0, 10).Add("b", 1, 1000, 1, 11).Add("c", 1, 300, 2, 4).Str(),
                             "pods.csv");
  Result<Scenario> sc = BuildScenario(&fleet, w, GpuUnits::kAuto);
};

TEST(WaitTest, RefusedTasksWaitBackfillAndReportPercentilesPerShape) {
  WaitFixture f;
  auto& sc = f.sc;
  ASSERT_TRUE(sc.ok());
  ReplayOptions o;
  o.wait = true;
  auto r = RunReplay(*sc, {*ParseStrategy("binpack:gpuMemory")}, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->strategies[0].waits.has_value());
  const WaitResult& waits = *r->strategies[0].waits;
  // Waits {0, 9, 0}: p50 is the 2nd of 3 (0), p95 and max the 3rd (9).
  EXPECT_EQ(waits.all.tasks, 3);
  EXPECT_EQ(waits.all.waited, 1);
  EXPECT_EQ(waits.all.never_started, 0);
  EXPECT_DOUBLE_EQ(waits.all.p50, 0);
  EXPECT_DOUBLE_EQ(waits.all.p95, 9);
  EXPECT_DOUBLE_EQ(waits.all.max, 9);
  EXPECT_EQ(waits.last_end, 20);  // b: started at 10, stays its 10 s
  ASSERT_EQ(waits.by_shape.size(), 3u);
  for (const auto& f : waits.by_shape) EXPECT_DOUBLE_EQ(f.max, f.shape == ShapeLabel(sc->shapes[sc->tasks[1].shape], sc->units) ? 9 : 0) << f.shape;
  // Without times there is nothing to wait for.
  o.at_once = true;
  EXPECT_EQ(RunReplay(*sc, {*ParseStrategy("binpack:gpuMemory")}, o).status().code(), ErrorCode::kInvalidParameter);
}

TEST(WaitTest, SizeFindsTheSmallestFleetWithinAP95WaitTarget) {
  // WaitFixture: on one node b waits 9 s (p95 9); two nodes start everything at once.
  WaitFixture f;
  auto& sc = f.sc;
  ASSERT_TRUE(sc.ok());
  SizeOptions o;
  const auto strategy = *ParseStrategy("binpack:gpuMemory");
  o.target_wait_p95_s = 10;
  auto ten = RunSize(*sc, {strategy}, o);
  ASSERT_TRUE(ten.ok()) << ten.status().message();
  EXPECT_EQ(ten->strategies[0].types[0].count, 1);
  EXPECT_EQ(ten->strategies[0].types[0].wait_p95_s, 9.0);
  o.target_wait_p95_s = 5;
  auto five = RunSize(*sc, {strategy}, o);
  ASSERT_TRUE(five.ok());
  EXPECT_EQ(five->strategies[0].types[0].count, 2);
  EXPECT_EQ(five->strategies[0].types[0].wait_p95_s, 0.0);
  // Without waiting, no refusal at all needs the same two.
  o.target_wait_p95_s.reset();
  EXPECT_EQ(RunSize(*sc, {strategy}, o)->strategies[0].types[0].count, 2);
}

}  // namespace
}  // namespace gpupack::plan
