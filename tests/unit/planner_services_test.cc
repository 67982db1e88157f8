// Tests for the planner's services (docs/planning.md, "Services"): a workload's `services` entries, each a task
// definition with serviceName and desired counts over time, expanded into replicas (replica k present while the
// desired count is at least k, so a scale-in removes the newest first); size keeps every service at its desired
// count at all times, on hand-checked fleets; replay reports a refused replica per service; fgd refuses services;
// and the input errors, message for message.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/inputs.h"
#include "planner/protocols.h"
#include "planner/report.h"
#include "planner/simulation.h"

namespace gpupack::plan {
namespace {

using Json = nlohmann::json;

Workload ParseWorkload(const std::string& text) {
  auto in = ParseInput(text, "w.json");
  EXPECT_TRUE(in.ok()) << in.status().message();
  return std::get<Workload>(std::move(in).value());
}

Fleet ParseFleet(const std::string& text) {
  auto in = ParseInput(text, "fleet.json");
  EXPECT_TRUE(in.ok()) << in.status().message();
  return std::get<Fleet>(std::move(in).value());
}

// A task definition body of one container that shares a GPU: `mib` of GPU memory, 1 vCPU, 2 GiB.
std::string Shared(const std::string& family, int mib) {
  return R"("family": ")" + family +
         R"(", "containerDefinitions": [{"name": "m", "image": "img", "cpu": 1024, "memory": 2048, )"
         R"("resourceRequirements": [{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": )" +
         std::to_string(mib) + "}}}]}]";
}

// A service entry: the definition of Shared plus `fields` (serviceName, desiredCount or desired, ...).
std::string Service(const std::string& family, int mib, const std::string& fields) {
  return "{" + Shared(family, mib) + ", " + fields + "}";
}

// Instances of one GPU of 24,000 MiB (16 vCPUs, 64 GiB), `count` of them.
std::string OneGpuFleet(int count) {
  return R"({"instanceTypes": [{"name": "g1", "count": )" + std::to_string(count) +
         R"(, "cpu": 16384, "memory": 65536, "gpus": 1, "gpuMemory": 24000, "gpuModel": "L4"}]})";
}

Occurrence Occ(int64_t arrival, std::optional<int64_t> departure = std::nullopt) { return {arrival, departure}; }

void ExpectSchedule(const std::vector<Occurrence>& got, const std::vector<Occurrence>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].arrival, want[i].arrival) << what << " occurrence " << i;
    EXPECT_EQ(got[i].departure, want[i].departure) << what << " occurrence " << i;
  }
}

// ---- expansion ----------------------------------------------------------------------------------------------

TEST(ServiceExpansionTest, DesiredStepsBecomeReplicaPresence) {
  // 3 from 0, 1 from 100, 2 from 200, 0 from 300, 1 from 400.
  auto replicas = ReplicaSchedules({{0, 3}, {100, 1}, {200, 2}, {300, 0}, {400, 1}});
  ASSERT_EQ(replicas.size(), 3u);
  // The scale-in at 100 removes replicas 3 and 2 (the newest) and keeps replica 1; replica 2 comes back at 200.
  ExpectSchedule(replicas[0], {Occ(0, 300), Occ(400)}, "replica 1");
  ExpectSchedule(replicas[1], {Occ(0, 100), Occ(200, 300)}, "replica 2");
  ExpectSchedule(replicas[2], {Occ(0, 100)}, "replica 3");
  // Before the first step the count is 0; a constant count is one step at 0, and its replicas never leave.
  auto late = ReplicaSchedules({{50, 0}, {60, 2}});
  ASSERT_EQ(late.size(), 2u);
  ExpectSchedule(late[1], {Occ(60)}, "late replica 2");
  EXPECT_TRUE(ReplicaSchedules({{0, 0}}).empty());
  EXPECT_TRUE(ReplicaSchedules({}).empty());
}

TEST(ServiceExpansionTest, ServicesAreTasksOfTheirGroupAfterTheTasks) {
  Workload w = ParseWorkload("{\"services\": [" +
                             Service("llm", 10000, R"("serviceName": "llm-svc", "desired": [
                                 {"at": 0, "count": 2}, {"at": 600, "count": 3}, {"at": 1200, "count": 1}])") +
                             "," + Service("embed", 6000, R"("serviceName": "embed", "desiredCount": 2,
                                 "gpuModels": ["L4"], "schedulingStrategy": "REPLICA")") +
                             "],\n \"tasks\": [{" + Shared("batch", 3000) + "}]}");
  ASSERT_EQ(w.tasks.size(), 3u);
  EXPECT_EQ(w.ServiceCount(), 2);
  EXPECT_FALSE(w.tasks[0].IsService());  // the task first, whatever the order of the keys
  const TaskSpec& llm = w.tasks[1];
  EXPECT_EQ(llm.name, "llm-svc");
  EXPECT_EQ(llm.service, "llm-svc");
  EXPECT_EQ(llm.group, "service:llm-svc");
  EXPECT_EQ(llm.demand.gpu_memory, 10000);
  // Replica by replica: 1 [0, never), 2 [0, 1200), 3 [600, 1200).
  ExpectSchedule(llm.schedule, {Occ(0), Occ(0, 1200), Occ(600, 1200)}, "llm");
  EXPECT_EQ(llm.Copies(), 3);  // at once: the peak desired count
  EXPECT_EQ(llm.CopyArrival(2), 600);
  const TaskSpec& embed = w.tasks[2];
  ExpectSchedule(embed.schedule, {Occ(0), Occ(0)}, "embed");
  ASSERT_EQ(embed.constraints.size(), 1u);
  EXPECT_EQ(embed.constraints[0].expression, "attribute:gpu-model == L4");
  // The task has no schedule, so the workload as a whole has no times; services alone have.
  EXPECT_FALSE(w.HasTimes());
  EXPECT_TRUE(ParseWorkload("{\"services\": [" + Service("x", 256, R"("serviceName": "x", "desiredCount": 0)") + "]}")
                  .HasTimes());
}

// Scale-in removes the newest replica in the simulation too: with spread, replica 1 is on the A instance and
// replica 2 on the B one; when the count drops back to 1, B is empty again, so a task that needs B whole fits.
TEST(ServiceExpansionTest, ScaleInFreesTheNewestReplicasInstance) {
  Fleet fleet = ParseFleet(R"({"instanceTypes": [
    {"name": "a", "cpu": 16384, "memory": 65536, "gpus": 1, "gpuMemory": 24000, "gpuModel": "A"},
    {"name": "b", "cpu": 16384, "memory": 65536, "gpus": 1, "gpuMemory": 24000, "gpuModel": "B"}]})");
  Workload w = ParseWorkload("{\"tasks\": [{" + Shared("probe", 20000) +
                             R"(, "gpuModels": ["B"], "schedule": [{"arrival": 30}]}],
    "services": [)" + Service("llm", 10000, R"("serviceName": "llm", "desired": [
                                 {"at": 0, "count": 1}, {"at": 10, "count": 2}, {"at": 20, "count": 1}])") +
                             "]}");
  auto sc = BuildScenario(&fleet, w, GpuUnits::kAuto);
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  auto r = RunReplay(*sc, {*ParseStrategy("spread:instanceId")}, ReplayOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->strategies[0].arrivals, 3);
  EXPECT_EQ(r->strategies[0].refused, 0) << "the probe found B held: the oldest replica left instead of the newest";
}

// ---- size -----------------------------------------------------------------------------------------------------

// Instances of one 24,000 MiB GPU; llm replicas take 10,000 MiB, embed replicas 6,000 MiB (binpack:gpuMemory,
// best fit). Three llm and four embed at all times: 54,000 MiB > 2 GPUs, and 3 do: {llm, llm}, {llm, embed,
// embed}, {embed, embed}. Over time, three llm and one embed (36,000) until 3600, then one llm and four embed
// (34,000): two GPUs at every moment ({llm, llm} + {llm, embed}, then {llm, embed, embed} + {embed, embed}),
// though the peaks together (54,000) would need three.
TEST(ServiceSizeTest, KeepsEveryServiceAtItsDesiredCount) {
  Fleet fleet = ParseFleet(OneGpuFleet(1));
  auto size = [&](const std::string& services, bool at_once) {
    Workload w = ParseWorkload("{\"services\": [" + services + "]}");
    auto sc = BuildScenario(&fleet, w, GpuUnits::kAuto);
    EXPECT_TRUE(sc.ok()) << sc.status().message();
    SizeOptions o;
    o.at_once = at_once;
    auto r = RunSize(*sc, {*ParseStrategy("binpack:gpuMemory")}, o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->timed, !at_once);
    return r->strategies.at(0).types.at(0);
  };
  const std::string constant = Service("llm", 10000, R"("serviceName": "llm", "desiredCount": 3)") + "," +
                               Service("embed", 6000, R"("serviceName": "embed", "desiredCount": 4)");
  SizeTypeResult flat = size(constant, false);
  EXPECT_EQ(flat.count, 3);
  EXPECT_EQ(flat.unplaceable_tasks, 0);

  const std::string varying =
      Service("llm", 10000, R"("serviceName": "llm", "desired": [{"at": 0, "count": 3}, {"at": 3600, "count": 1}])") +
      "," +
      Service("embed", 6000, R"("serviceName": "embed", "desired": [{"at": 0, "count": 1}, {"at": 3600, "count": 4}])");
  EXPECT_EQ(size(varying, false).count, 2);
  EXPECT_EQ(size(varying, true).count, 3);  // at once: every service at its peak

  // A replica that fits no instance of the type is counted (each arrival) and left out of the search.
  SizeTypeResult too_big = size(constant + "," + Service("huge", 30000, R"("serviceName": "huge", "desired": [
      {"at": 0, "count": 1}, {"at": 10, "count": 0}, {"at": 20, "count": 2}])"), false);
  EXPECT_EQ(too_big.count, 3);
  EXPECT_EQ(too_big.unplaceable_tasks, 3);
  EXPECT_EQ(too_big.unplaceable_examples, (std::vector<std::string>{"huge"}));
}

// ---- replay and fgd -----------------------------------------------------------------------------------------

// Two instances of one 24,000 MiB GPU. At 0: llm 1 and 2 share i0 (4,000 left), embed 1..3 share i1 (6,000
// left). At 600 llm 3 (10,000) finds no GPU with room: refused, as the server would keep it waiting. At 1200
// llm drops to 1: replicas 3 (never placed) and 2 go.
TEST(ServiceReplayTest, RefusedReplicasAreCountedPerService) {
  Fleet fleet = ParseFleet(OneGpuFleet(2));
  Workload w = ParseWorkload("{\"services\": [" +
                             Service("llm", 10000, R"("serviceName": "llm", "desired": [
                                 {"at": 0, "count": 2}, {"at": 600, "count": 3}, {"at": 1200, "count": 1}])") +
                             "," + Service("embed", 6000, R"("serviceName": "embed", "desiredCount": 3)") + "]}");
  auto sc = BuildScenario(&fleet, w, GpuUnits::kAuto);
  ASSERT_TRUE(sc.ok()) << sc.status().message();
  ReplayOptions o;
  o.buckets = 3;
  auto r = RunReplay(*sc, {*ParseStrategy("binpack:gpuMemory")}, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->timed);
  const ReplayStrategyResult& s = r->strategies[0];
  EXPECT_EQ(s.arrivals, 6);
  EXPECT_EQ(s.placed, 5);
  EXPECT_EQ(s.refused, 1);
  EXPECT_EQ(s.refusals, (std::map<std::string, int>{{"RESOURCE:GPU_MEMORY", 1}}));
  EXPECT_EQ(s.refused_replicas, (std::map<std::string, int>{{"embed", 0}, {"llm", 1}}));
  EXPECT_EQ(s.peak_gpus_in_use, 2);
  EXPECT_NEAR(s.peak_allocated_pct, 100.0 * 38000 / 48000, 1e-9);
  // Buckets of 401 s: the refusal is in the second ([401, 802)).
  ASSERT_EQ(s.timeline.size(), 3u);
  EXPECT_EQ(s.timeline[1].refusals, (std::map<std::string, int>{{"RESOURCE:GPU_MEMORY", 1}}));

  PlanContext ctx{"fleet.json", 2, 2, 1, "w.json", 0, "mib", 2};
  Json j = Json::parse(Render(ctx, *r, Format::kJson));
  EXPECT_EQ(j["workload"], Json({{"source", "w.json"}, {"tasks", 0}, {"services", 2}}));
  EXPECT_EQ(j["strategies"][0]["refusedReplicasByService"], Json({{"embed", 0}, {"llm", 1}}));
  const std::string table = Render(ctx, *r, Format::kTable);
  EXPECT_NE(table.find("workload w.json (2 services) on fleet"), std::string::npos) << table;
  EXPECT_NE(table.find("\nrefused replicas by service (the server would keep each waiting for capacity):\n"
                       "strategy           embed  llm\n"
                       "binpack:gpuMemory      0    1\n"),
            std::string::npos)
      << table;
}

TEST(ServiceReplayTest, FgdRefusesServices) {
  Fleet fleet = ParseFleet(OneGpuFleet(2));
  Workload w = ParseWorkload("{\"tasks\": [{" + Shared("batch", 3000) + "}], \"services\": [" +
                             Service("llm", 10000, R"("serviceName": "llm", "desiredCount": 1)") + "," +
                             Service("embed", 6000, R"("serviceName": "embed", "desiredCount": 1)") + "]}");
  auto sc = BuildScenario(&fleet, w, GpuUnits::kAuto);
  ASSERT_TRUE(sc.ok());
  auto r = RunFgd(*sc, {*ParseStrategy("binpack:gpuMemory")}, FgdOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidParameter);
  EXPECT_EQ(r.status().message(),
            "the workload has services (llm, embed), which fgd does not replay: it samples tasks by weight, with no "
            "time and no desired count; use --protocol size or replay");
}

// ---- input errors -------------------------------------------------------------------------------------------

TEST(ServiceInputTest, ErrorsAreWordedExactly) {
  auto services = [](const std::string& fields) {
    return "{\"services\": [{" + Shared("x", 1000) + ",\n " + fields + "}]}";
  };
  const std::string ok = Service("x", 1000, R"("serviceName": "a", "desiredCount": 1)");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"services\": []}", "w.json:1: field 'services': expected a non-empty array of services"},
      {"{\"services\": [\n 7]}", "w.json:2: field 'services[0]': expected an object (a task definition with "
                                 "serviceName), got 7"},
      {services("\"desiredCount\": 1"), "w.json:1: field 'services[0]': missing required field 'serviceName'"},
      {services("\"serviceName\": \"a b\", \"desiredCount\": 1"),
       "w.json:2: field 'services[0].serviceName': expected 1-255 letters, numbers, hyphens and underscores (ECS's "
       "rule), got 'a b'"},
      {"{\"services\": [" + ok + ",\n" + ok + "]}",
       "w.json:2: field 'services[1].serviceName': service 'a' is listed twice"},
      {services("\"serviceName\": \"a\""),
       "w.json:1: field 'services[0]': missing required field 'desiredCount' (or 'desired', counts over time)"},
      {services("\"serviceName\": \"a\", \"desiredCount\": 1, \"desired\": []"),
       "w.json:1: field 'services[0]': give 'desiredCount' or 'desired', not both"},
      {services("\"serviceName\": \"a\", \"desiredCount\": 5001"),
       "w.json:2: field 'services[0].desiredCount': expected an integer 0..5000, got 5001"},
      {services("\"serviceName\": \"a\", \"desired\": 3"),
       "w.json:2: field 'services[0].desired': expected an array of {\"at\": s, \"count\": n}, got 3"},
      {services("\"serviceName\": \"a\", \"desired\": [{\"at\": 0}]"),
       "w.json:2: field 'services[0].desired[0]': missing required field 'count' (replicas)"},
      {services("\"serviceName\": \"a\", \"desired\": [{\"count\": 1}]"),
       "w.json:2: field 'services[0].desired[0]': missing required field 'at' (seconds)"},
      {services("\"serviceName\": \"a\", \"desired\": [{\"at\": 0, \"count\": -1}]"),
       "w.json:2: field 'services[0].desired[0].count': expected an integer 0..5000, got -1"},
      {services("\"serviceName\": \"a\", \"desired\": [{\"at\": 60, \"count\": 1},\n {\"at\": 60, \"count\": 2}]"),
       "w.json:3: field 'services[0].desired[1].at': expected a time after the step before (60), got 60"},
      {services("\"serviceName\": \"a\", \"desiredCount\": 1, \"count\": 2"),
       "w.json:2: field 'services[0].count': a service takes no 'count' (its replicas follow desiredCount or "
       "desired)"},
      {services("\"serviceName\": \"a\", \"desiredCount\": 1, \"group\": \"g\""),
       "w.json:2: field 'services[0].group': a service takes no 'group' (its tasks' group is "
       "service:<serviceName>, as the server's)"},
      {services("\"serviceName\": \"a\", \"desiredCount\": 1, \"placementStrategy\": []"),
       "w.json:2: field 'services[0].placementStrategy': a service takes no 'placementStrategy' (every service is "
       "placed with the --strategy under study)"},
      {services("\"serviceName\": \"a\", \"desiredCount\": 1, \"schedulingStrategy\": \"DAEMON\""),
       "w.json:2: field 'services[0].schedulingStrategy': expected \"REPLICA\" (the planner replays REPLICA "
       "services), got \"DAEMON\""},
      // The definition is read and validated as a task's: the codec names the field, the validation the entry.
      {"{\"services\": [{\"serviceName\": \"a\", \"desiredCount\": 1, \"family\": \"x\",\n \"containerDefinitions\": "
       "[{\"name\": \"m\", \"image\": \"img\", \"memory\": 64,\n \"cpu\": \"1\"}]}]}",
       "w.json:3: field 'services[0].containerDefinitions[0].cpu': expected an integer, got a string"},
      {"{\"services\": [\n {\"serviceName\": \"a\", \"desiredCount\": 1, \"family\": \"x\", \"containerDefinitions\": "
       "[{\"name\": \"m\", \"memory\": 64}]}]}",
       "w.json:2: field 'services[0]': Invalid 'image' setting for container 'm'. 'image' is required."},
      {"{\"instanceTypes\": [{\"name\": \"a\", \"cpu\": 1, \"memory\": 1}], \"services\": [" + ok + "]}",
       "w.json:1: a file is either a fleet (\"instanceTypes\") or a workload (\"tasks\", \"services\"), not both"},
      {"{\"nodes\": []}",
       "w.json:1: expected a fleet ({\"instanceTypes\": [...]}) or a workload ({\"tasks\": [...]}, {\"services\": "
       "[...]} or both)"},
  };
  for (const auto& [text, message] : cases) {
    auto in = ParseInput(text, "w.json");
    ASSERT_FALSE(in.ok()) << text;
    EXPECT_EQ(in.status().code(), ErrorCode::kInvalidParameter);
    EXPECT_EQ(in.status().message(), message) << text;
  }
}

}  // namespace
}  // namespace gpupack::plan
