// The fgd protocol as the FGD paper's simulator runs it (docs/planning.md, "The protocol"): arrivals, node order,
// the target workload's cut, the bestfit baseline, the published figures, and the reproduction of the paper's
// FGD figure on the openb default list.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/inputs.h"
#include "planner/protocols.h"
#include "planner/published.h"
#include "planner/report.h"
#include "planner/simulation.h"

namespace gpupack::plan {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

template <typename T>
T Parse(const std::string& text, const std::string& name) {
  auto in = ParseInput(text, name);
  EXPECT_TRUE(in.ok()) << in.status().message();
  return std::get<T>(std::move(in).value());
}

// openb CSVs: nodes (sn,cpu_milli,memory_mib,gpu,model) and pods (11 columns).
std::string Nodes(const std::vector<std::string>& rows) {
  std::string s = "sn,cpu_milli,memory_mib,gpu,model\n";
  for (const auto& r : rows) s += r + "\n";
  return s;
}
std::string Pods(const std::vector<std::string>& rows) {
  std::string s = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
                  "scheduled_time\n";
  for (const auto& r : rows) s += r + ",,LS,Running,0,100,0\n";
  return s;
}

struct Case {
  Fleet fleet;
  Workload workload;
  Scenario scenario;
  Case(const std::string& nodes, const std::string& pods)
      : fleet(Parse<Fleet>(nodes, "nodes.csv")), workload(Parse<Workload>(pods, "pods.csv")) {
    auto sc = BuildScenario(&fleet, workload, GpuUnits::kMilli);
    EXPECT_TRUE(sc.ok()) << sc.status().message();
    scenario = std::move(sc).value();
  }
};

// Every pod of the list arrives once, in a random order, before any copy: six pods of 1 GPU each on 10 GPUs,
// 130% = 13 GPUs, so arrivals 1..6 are the six pods (a permutation) and 7..13 copies.
TEST(FgdProtocolTest, EveryTaskOnceThenCopies) {
  Case c(Nodes({"n0,64000,262144,8,V100", "n1,64000,262144,2,T4"}),
         Pods({"p0,1000,1024,1,1000", "p1,2000,1024,1,1000", "p2,3000,1024,1,1000", "p3,4000,1024,1,1000",
               "p4,5000,1024,1,1000", "p5,6000,1024,1,1000"}));
  std::vector<int> seq = SampleArrivals(c.scenario, 42, 130);
  ASSERT_EQ(seq.size(), 13u);
  std::set<int> first(seq.begin(), seq.begin() + 6);
  EXPECT_EQ(first.size(), 6u);
  std::vector<int> order(seq.begin(), seq.begin() + 6);
  EXPECT_NE(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));  // shuffled (for this seed)
  std::vector<int> other = SampleArrivals(c.scenario, 43, 130);
  EXPECT_NE(order, std::vector<int>(other.begin(), other.begin() + 6));  // another seed, another order
  // A demand below the list's own stops part way through the first pass, still without repeats.
  std::vector<int> part = SampleArrivals(c.scenario, 42, 40);  // 4 GPUs
  ASSERT_EQ(part.size(), 4u);
  EXPECT_EQ(std::set<int>(part.begin(), part.end()).size(), 4u);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), seq.begin()));
}

// Instances are registered in a random order per seed (ties then fall on a random instance, as in the paper's
// simulator, where nodes get a random name prefix); without the option, in the fleet's order.
TEST(FgdProtocolTest, NodeOrderIsRandomPerSeed) {
  std::vector<std::string> rows;
  for (int i = 0; i < 40; ++i) rows.push_back("n" + std::to_string(i) + "," + std::to_string(1000 * (i + 1)) + ",262144,1,T4");
  Case c(Nodes(rows), Pods({"p0,1000,1024,1,1000"}));
  auto types = [&](std::optional<uint64_t> seed) {
    Simulation::Options o;
    o.node_order_seed = seed;
    auto sim = Simulation::Create(c.scenario, *ParseStrategy("fgd"), o);
    EXPECT_TRUE(sim.ok());
    std::vector<std::string> out;
    for (const auto& e : (*sim)->state().EntriesOf(kPlanCluster)) out.push_back(e.instance->instance_type);
    return out;
  };
  const auto fleet_order = types(std::nullopt);
  ASSERT_EQ(fleet_order.size(), 40u);
  for (size_t i = 0; i < fleet_order.size(); ++i) EXPECT_EQ(fleet_order[i], c.fleet.types[i].name);
  const auto a = types(42), b = types(43);
  EXPECT_EQ(a, types(42));
  EXPECT_NE(a, fleet_order);
  EXPECT_NE(a, b);
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), 40u);  // a permutation
}

// The 95% cut of the target workload takes, among shapes of equal count, the one of the larger CPU first (then
// the larger GPU share, more GPUs, the models that sort last), as the simulator does: 18 pods of shape X and one
// each of Y (2 cores) and Z (4 cores) = 20 pods; X covers 90%, one more is needed, and Z goes before Y although Y
// comes first in the list.
TEST(FgdProtocolTest, TargetCutTiesGoToTheLargerCpu) {
  std::vector<std::string> pods;
  pods.push_back("y,2000,1024,1,500");
  pods.push_back("z,4000,1024,1,500");
  for (int i = 0; i < 18; ++i) pods.push_back("x" + std::to_string(i) + ",1000,1024,1,500");
  Case c(Nodes({"n0,64000,262144,8,V100"}), Pods(pods));
  ASSERT_TRUE(c.scenario.fgd_workload);
  const auto& classes = c.scenario.fgd_workload->classes;
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(classes[0].shape.cpu, c.workload.tasks[2].demand.cpu);  // X
  EXPECT_EQ(classes[1].shape.cpu, c.workload.tasks[1].demand.cpu);  // Z
  EXPECT_NEAR(classes[0].shape.weight, 18.0 / 19.0, 1e-12);
}

// bestfit scores an instance by the CPU and GPU it keeps after the task (0.5 x CPU left / 128 cores + 0.5 x GPUs
// left / 8, in steps of 1%): a 1-GPU pod of 8 cores goes to the node where less is left.
//   a: 64 cores, 8 GPUs -> left 0.5 x 56/128 + 0.5 x 7/8 = 0.656  (score 34)
//   b: 32 cores, 4 GPUs -> left 0.5 x 24/128 + 0.5 x 3/8 = 0.281  (score 71, wins)
TEST(FgdProtocolTest, BestFitKeepsTheLeastCpuAndGpu) {
  Case c(Nodes({"a,64000,262144,8,V100", "b,32000,262144,4,V100"}), Pods({"p0,8000,1024,1,1000"}));
  auto sim = Simulation::Create(c.scenario, *ParseStrategy("bestfit"), {});
  ASSERT_TRUE(sim.ok());
  auto out = (*sim)->Arrive(0, 0);
  ASSERT_TRUE(out.placed);
  const auto& entries = (*sim)->state().EntriesOf(kPlanCluster);
  EXPECT_EQ(entries[1].instance->gpus[0].mode, GpuMode::kDedicated);
  EXPECT_EQ(entries[0].instance->gpus[0].mode, GpuMode::kIdle);
}

// The paper's lists are recognised by content (not name): the bundled default list under another name gets the
// default's figures; an edited copy gets none.
TEST(FgdProtocolTest, PublishedFiguresByContent) {
  const std::string path = BundledOpenbDir() + "/openb_pod_list_default.csv";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is missing (set GPUPACK_OPENB_DIR)";
  auto in = LoadInput(path);
  ASSERT_TRUE(in.ok()) << in.status().message();
  Workload w = std::get<Workload>(std::move(in).value());
  w.source = "renamed.csv";
  auto pub = PublishedFor(w);
  ASSERT_TRUE(pub.has_value());
  EXPECT_EQ(pub->name, "default");
  EXPECT_DOUBLE_EQ(pub->fgd, 4.61);
  EXPECT_DOUBLE_EQ(pub->best_fit, 6.92);
  EXPECT_EQ(PublishedReference(*pub, "bestfit").first, "BestFit");
  EXPECT_EQ(PublishedReference(*pub, "binpack:fragmentation").first, "FGD");
  w.tasks[17].demand.cpu += 1;
  EXPECT_FALSE(PublishedFor(w).has_value());
}

// The report shows the paper's figure beside each strategy, and the difference, only for a recognised list at
// 130%.
TEST(FgdProtocolTest, ReportShowsThePublishedFigure) {
  FgdReport r;
  r.demand_pct = 130;
  r.seeds = {42};
  FgdStrategyResult s;
  s.name = "fgd";
  s.allocated_pct.assign(131, 0.0);
  s.unallocated_pct_at[130] = 4.70;
  r.strategies.push_back(s);
  s.name = "bestfit";
  s.unallocated_pct_at[130] = 6.80;
  r.strategies.push_back(s);
  PlanContext ctx;
  ctx.fleet_source = "nodes.csv";
  ctx.instances = 1213;
  ctx.gpus = 6212;
  ctx.workload_source = "pods.csv";
  ctx.tasks = 8152;
  ctx.units = "milli";
  EXPECT_EQ(Render(ctx, r, Format::kTable).find("published"), std::string::npos);
  EXPECT_FALSE(Json::parse(Render(ctx, r, Format::kJson)).contains("published"));
  ctx.published = PublishedList{"default", 1, 12.53, 9.15, 8.12, 8.00, 6.92, 4.61};
  const std::string table = Render(ctx, r, Format::kTable);
  EXPECT_NE(table.find("openb list 'default'"), std::string::npos);
  EXPECT_NE(table.find("+0.09"), std::string::npos);  // fgd 4.70 vs FGD 4.61
  EXPECT_NE(table.find("-0.12"), std::string::npos);  // bestfit 6.80 vs BestFit 6.92
  Json j = Json::parse(Render(ctx, r, Format::kJson));
  EXPECT_EQ(j["published"]["list"], "default");
  EXPECT_EQ(j["published"]["strategies"]["bestfit"]["reference"], "BestFit");
  EXPECT_NEAR(j["published"]["strategies"]["fgd"]["difference"].get<double>(), 0.09, 1e-9);
  r.demand_pct = 120;
  r.strategies[0].unallocated_pct_at = {{120, 4.0}};
  r.strategies[1].unallocated_pct_at = {{120, 6.0}};
  EXPECT_EQ(Render(ctx, r, Format::kTable).find("published"), std::string::npos);
}

// DefaultListUnallocated: one strategy's unallocated share of GPU capacity at 130% on the openb default list,
// mean of seeds 42..51 (the fgd protocol, two threads); nullopt when the bundled lists are missing.
std::optional<double> DefaultListUnallocated(const std::string& strategy) {
  const std::string dir = BundledOpenbDir();
  if (!fs::exists(dir + "/openb_pod_list_default.csv")) return std::nullopt;
  auto nodes = LoadInput(dir + "/openb_node_list_gpu_node.csv");
  auto pods = LoadInput(dir + "/openb_pod_list_default.csv");
  EXPECT_TRUE(nodes.ok() && pods.ok());
  auto sc = BuildScenario(&std::get<Fleet>(*nodes), std::get<Workload>(*pods), GpuUnits::kAuto);
  EXPECT_TRUE(sc.ok()) << sc.status().message();
  FgdOptions o;
  o.jobs = 2;
  auto r = RunFgd(*sc, {*ParseStrategy(strategy)}, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->seeds, DefaultSeeds());
  return r->strategies[0].unallocated_pct_at.at(130);
}

// gpupack's fgd reproduces the paper's FGD on the openb default list: 4.61% of GPU capacity unallocated at 130%,
// mean of seeds 42..51, within 0.15 points (docs/planning.md has all seventeen lists).
TEST(FgdReproductionTest, DefaultListWithinPointFifteenOfThePaper) {
  const auto unallocated = DefaultListUnallocated("fgd");
  if (!unallocated) GTEST_SKIP() << BundledOpenbDir() << " lacks the openb lists";
  EXPECT_NEAR(*unallocated, 4.61, 0.15);
}

// binpack:fragmentation, gpupack's own online rule (its target learned from the arrivals as they come, as the
// server learns it from RunTask), leaves less GPU capacity unallocated than the paper's FGD on the openb default
// list: below the published 4.61%, mean of seeds 42..51. docs/planning.md has 4.35% and all seventeen lists; the
// second check catches a drift away from that figure, either way.
TEST(FgdReproductionTest, FragmentationBelowThePublishedFgdOnTheDefaultList) {
  const auto unallocated = DefaultListUnallocated("binpack:fragmentation");
  if (!unallocated) GTEST_SKIP() << BundledOpenbDir() << " lacks the openb lists";
  EXPECT_LT(*unallocated, 4.61);
  EXPECT_NEAR(*unallocated, 4.35, 0.05);
}

}  // namespace
}  // namespace gpupack::plan
