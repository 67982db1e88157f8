// MetricsRegistry tests: the exact text of each family type, escaping, empty families, refused registrations,
// and counters/histograms updated from several threads while another thread renders. When promtool (from the
// Prometheus distribution) is on PATH, a rendered sample is also checked with `promtool check metrics`.
// The server's families (api/server_metrics.h) over a control plane on a MemoryStore: GPU series labelled to
// join dcgm-exporter (UUID, gpu, Hostname) with bytes = MiB x 1048576, placement failures counted per task, tasks
// by status, the services' replicas, the per-task allocations and the store's commit latency.
#include "metrics/registry.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <future>
#include <regex>

#include <gtest/gtest.h>

#include "api/ecs/router.h"
#include "engine/control_plane.h"
#include "api/server_metrics.h"
#include "storage/group_committer.h"
#include "storage/memory_store.h"
#include "tests/unit/temp_dir.h"

namespace gpupack::api {
namespace {

TEST(MetricsRegistryTest, CounterRendersHelpTypeAndSortedLabelSets) {
  MetricsRegistry registry;
  auto& requests = registry.AddCounter("gpupack_requests_total", "ECS API responses by operation and HTTP status.");
  requests.Inc({{"operation", "RunTask"}, {"code", "200"}});
  requests.Inc({{"operation", "RunTask"}, {"code", "200"}}, 2);
  requests.Inc({{"operation", "DescribeTasks"}, {"code", "400"}});
  requests.Inc({{"operation", "DescribeTasks"}, {"code", "400"}}, -5);  // ignored: counters only go up
  requests.Inc({{"operation", "DescribeTasks"}, {"code", "400"}}, std::nan(""));  // ignored
  EXPECT_EQ(registry.Render(),
            "# HELP gpupack_requests_total ECS API responses by operation and HTTP status.\n"
            "# TYPE gpupack_requests_total counter\n"
            "gpupack_requests_total{operation=\"DescribeTasks\",code=\"400\"} 1\n"
            "gpupack_requests_total{operation=\"RunTask\",code=\"200\"} 3\n");
  EXPECT_EQ(requests.Value({{"operation", "RunTask"}, {"code", "200"}}), 3);
  EXPECT_EQ(requests.Value({{"operation", "StopTask"}, {"code", "200"}}), 0);
}

TEST(MetricsRegistryTest, UnlabelledCounterHasNoBraces) {
  MetricsRegistry registry;
  registry.AddCounter("gpupack_placements_total", "Tasks placed.").Inc({}, 1234567);
  EXPECT_EQ(registry.Render(),
            "# HELP gpupack_placements_total Tasks placed.\n"
            "# TYPE gpupack_placements_total counter\n"
            "gpupack_placements_total 1234567\n");
}

TEST(MetricsRegistryTest, CollectedGaugeRendersSamplesInCallbackOrderAtEveryScrape) {
  MetricsRegistry registry;
  int scrapes = 0;
  registry.AddCollected("gpupack_gpu_containers", "GPU containers per GPU.", MetricType::kGauge,
                        [&](std::vector<MetricSample>& out) {
                          ++scrapes;
                          out.push_back({{{"container_instance", "i-2"}, {"gpu", "0"}}, 3});
                          out.push_back({{{"container_instance", "i-1"}, {"gpu", "1"}}, 0.25});
                          out.push_back({{{"container_instance", "i-1"}, {"gpu", "2"}}, double(scrapes)});
                        });
  const std::string expected_head =
      "# HELP gpupack_gpu_containers GPU containers per GPU.\n"
      "# TYPE gpupack_gpu_containers gauge\n"
      "gpupack_gpu_containers{container_instance=\"i-2\",gpu=\"0\"} 3\n"
      "gpupack_gpu_containers{container_instance=\"i-1\",gpu=\"1\"} 0.25\n";
  EXPECT_EQ(registry.Render(), expected_head + "gpupack_gpu_containers{container_instance=\"i-1\",gpu=\"2\"} 1\n");
  EXPECT_EQ(registry.Render(), expected_head + "gpupack_gpu_containers{container_instance=\"i-1\",gpu=\"2\"} 2\n");
}

TEST(MetricsRegistryTest, HistogramRendersCumulativeBucketsInAscendingOrderWithInfSumAndCount) {
  MetricsRegistry registry;
  // Given unsorted, with a duplicate and an explicit +Inf: rendered ascending, once each, +Inf last.
  auto& latency = registry.AddHistogram("gpupack_request_duration_seconds", "ECS API request latency by operation.",
                                        {0.5, 0.0005, 2.5, 0.5, std::numeric_limits<double>::infinity()});
  EXPECT_EQ(latency.buckets(), (std::vector<double>{0.0005, 0.5, 2.5}));
  latency.Observe({{"operation", "RunTask"}}, 0.0001);  // <= 0.0005
  latency.Observe({{"operation", "RunTask"}}, 0.5);     // exactly on a bound: counted in that bucket
  latency.Observe({{"operation", "RunTask"}}, 1);       // <= 2.5
  latency.Observe({{"operation", "RunTask"}}, 7.5);     // +Inf only
  latency.Observe({{"operation", "CreateCluster"}}, 0.25);
  EXPECT_EQ(registry.Render(),
            "# HELP gpupack_request_duration_seconds ECS API request latency by operation.\n"
            "# TYPE gpupack_request_duration_seconds histogram\n"
            "gpupack_request_duration_seconds_bucket{operation=\"CreateCluster\",le=\"0.0005\"} 0\n"
            "gpupack_request_duration_seconds_bucket{operation=\"CreateCluster\",le=\"0.5\"} 1\n"
            "gpupack_request_duration_seconds_bucket{operation=\"CreateCluster\",le=\"2.5\"} 1\n"
            "gpupack_request_duration_seconds_bucket{operation=\"CreateCluster\",le=\"+Inf\"} 1\n"
            "gpupack_request_duration_seconds_sum{operation=\"CreateCluster\"} 0.25\n"
            "gpupack_request_duration_seconds_count{operation=\"CreateCluster\"} 1\n"
            "gpupack_request_duration_seconds_bucket{operation=\"RunTask\",le=\"0.0005\"} 1\n"
            "gpupack_request_duration_seconds_bucket{operation=\"RunTask\",le=\"0.5\"} 2\n"
            "gpupack_request_duration_seconds_bucket{operation=\"RunTask\",le=\"2.5\"} 3\n"
            "gpupack_request_duration_seconds_bucket{operation=\"RunTask\",le=\"+Inf\"} 4\n"
            "gpupack_request_duration_seconds_sum{operation=\"RunTask\"} 9.0001\n"
            "gpupack_request_duration_seconds_count{operation=\"RunTask\"} 4\n");
  EXPECT_EQ(latency.Count({{"operation", "RunTask"}}), 4u);
  EXPECT_EQ(latency.Count({{"operation", "StopTask"}}), 0u);
}

TEST(MetricsRegistryTest, HistogramWithoutLabelsOrBucketsHasOnlyInf) {
  MetricsRegistry registry;
  auto& h = registry.AddHistogram("gpupack_batch_size", "Operations per store batch.", {});
  h.Observe({}, 3);
  h.Observe({}, std::nan(""));  // counted in +Inf only; the sum becomes NaN, as in the Prometheus clients
  EXPECT_EQ(registry.Render(),
            "# HELP gpupack_batch_size Operations per store batch.\n"
            "# TYPE gpupack_batch_size histogram\n"
            "gpupack_batch_size_bucket{le=\"+Inf\"} 2\n"
            "gpupack_batch_size_sum NaN\n"
            "gpupack_batch_size_count 2\n");
}

TEST(MetricsRegistryTest, CollectedHistogramKeepsItsSuffixes) {
  MetricsRegistry registry;
  registry.AddCollected("gpupack_view_age_seconds", "Age of the read view at each scrape.", MetricType::kHistogram,
                        [](std::vector<MetricSample>& out) {
                          out.push_back({{{"le", "1"}}, 2, "_bucket"});
                          out.push_back({{{"le", "+Inf"}}, 3, "_bucket"});
                          out.push_back({{}, 4.5, "_sum"});
                          out.push_back({{}, 3, "_count"});
                        });
  EXPECT_EQ(registry.Render(),
            "# HELP gpupack_view_age_seconds Age of the read view at each scrape.\n"
            "# TYPE gpupack_view_age_seconds histogram\n"
            "gpupack_view_age_seconds_bucket{le=\"1\"} 2\n"
            "gpupack_view_age_seconds_bucket{le=\"+Inf\"} 3\n"
            "gpupack_view_age_seconds_sum 4.5\n"
            "gpupack_view_age_seconds_count 3\n");
}

TEST(MetricsRegistryTest, CollectedSamplesThatWouldBreakTheFormatAreLeftOut) {
  MetricsRegistry registry;
  registry.AddCollected("gpupack_agents_connected", "Agents connected now.", MetricType::kGauge,
                        [](std::vector<MetricSample>& out) {
                          out.push_back({{{"bad-name", "x"}}, 1});          // not a label name
                          out.push_back({{{"__reserved", "x"}}, 1});        // reserved prefix
                          out.push_back({{{"a", "x"}, {"a", "y"}}, 1});     // a label twice
                          out.push_back({{}, 1, "_sum"});                   // a gauge has no suffixes
                          out.push_back({{{"cluster", "default"}}, 2});     // the only good one
                        });
  registry.AddCollected("gpupack_h", "A collected histogram.", MetricType::kHistogram,
                        [](std::vector<MetricSample>& out) {
                          out.push_back({{}, 1, "_bucket"});           // a bucket without le
                          out.push_back({{{"le", "1"}}, 1, "_sum"});   // le on the sum
                          out.push_back({{}, 1, ""});                  // no suffix
                          out.push_back({{}, 1, "_total"});            // not a histogram suffix
                        });
  EXPECT_EQ(registry.Render(),
            "# HELP gpupack_agents_connected Agents connected now.\n"
            "# TYPE gpupack_agents_connected gauge\n"
            "gpupack_agents_connected{cluster=\"default\"} 2\n"
            "# HELP gpupack_h A collected histogram.\n"
            "# TYPE gpupack_h histogram\n");
}

TEST(MetricsRegistryTest, EmptyFamiliesStillHaveHelpAndTypeInRegistrationOrder) {
  MetricsRegistry registry;
  registry.AddHistogram("gpupack_z_seconds", "Z.", {1});
  registry.AddCounter("gpupack_a_total", "A.");
  registry.AddCollected("gpupack_m", "M.", MetricType::kGauge, [](std::vector<MetricSample>&) {});
  EXPECT_EQ(registry.Render(),
            "# HELP gpupack_z_seconds Z.\n# TYPE gpupack_z_seconds histogram\n"
            "# HELP gpupack_a_total A.\n# TYPE gpupack_a_total counter\n"
            "# HELP gpupack_m M.\n# TYPE gpupack_m gauge\n");
  EXPECT_EQ(MetricsRegistry().Render(), "");
}

TEST(MetricsRegistryTest, EscapesLabelValuesAndHelp) {
  MetricsRegistry registry;
  auto& c = registry.AddCounter("gpupack_failures_total", "Failures by reason.\nOne line: a \\ stays one.");
  c.Inc({{"reason", "path C:\\gpu \"0\"\nnext"}});
  EXPECT_EQ(registry.Render(),
            "# HELP gpupack_failures_total Failures by reason.\\nOne line: a \\\\ stays one.\n"
            "# TYPE gpupack_failures_total counter\n"
            "gpupack_failures_total{reason=\"path C:\\\\gpu \\\"0\\\"\\nnext\"} 1\n");
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeLabelValue("tab\tand unicode \xc3\xa9 stay"), "tab\tand unicode \xc3\xa9 stay");
}

TEST(MetricsRegistryTest, FormatsIntegersWithoutExponentAndOthersShortest) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-0.0), "0");
  EXPECT_EQ(FormatMetricValue(1234567), "1234567");
  EXPECT_EQ(FormatMetricValue(-42), "-42");
  EXPECT_EQ(FormatMetricValue(81920), "81920");
  EXPECT_EQ(FormatMetricValue(1e15), "1000000000000000");
  EXPECT_EQ(FormatMetricValue(9007199254740993.0), "9007199254740992");  // the double nearest to it
  EXPECT_EQ(FormatMetricValue(0.0005), "0.0005");
  EXPECT_EQ(FormatMetricValue(2.5), "2.5");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(0.0001), "0.0001");
  EXPECT_EQ(FormatMetricValue(0.00001), "1e-05");
  EXPECT_EQ(FormatMetricValue(1.0 / 3), "0.3333333333333333");  // reads back as the same double
  EXPECT_EQ(FormatMetricValue(123456.75), "123456.75");
  EXPECT_EQ(FormatMetricValue(1e300), "1e+300");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(MetricsRegistryTest, RefusesProgrammingErrors) {
  MetricsRegistry registry;
  registry.AddCounter("gpupack_x_total", "X.");
  EXPECT_THROW(registry.AddCounter("gpupack_x_total", "again"), std::invalid_argument);
  EXPECT_THROW(registry.AddHistogram("gpupack_x_total", "again", {1}), std::invalid_argument);
  EXPECT_THROW(registry.AddCollected("gpupack_x_total", "again", MetricType::kGauge, [](auto&) {}),
               std::invalid_argument);
  EXPECT_THROW(registry.AddCounter("", "empty"), std::invalid_argument);
  EXPECT_THROW(registry.AddCounter("1abc", "digit first"), std::invalid_argument);
  EXPECT_THROW(registry.AddCounter("gpupack-x", "dash"), std::invalid_argument);
  EXPECT_THROW(registry.AddCollected("gpupack_y", "no callback", MetricType::kGauge, nullptr), std::invalid_argument);
  EXPECT_THROW(registry.AddHistogram("gpupack_h1", "NaN bucket", {1, std::nan("")}), std::invalid_argument);
  EXPECT_THROW(registry.AddHistogram("gpupack_h2", "-Inf bucket", {-std::numeric_limits<double>::infinity()}),
               std::invalid_argument);
  registry.AddCounter("ns:gpupack_y_total", "colons are allowed in metric names");

  auto& c = registry.AddCounter("gpupack_c_total", "C.");
  EXPECT_THROW(c.Inc({{"bad-label", "x"}}), std::invalid_argument);
  EXPECT_THROW(c.Inc({{"a", "x"}, {"a", "y"}}), std::invalid_argument);
  auto& h = registry.AddHistogram("gpupack_h_seconds", "H.", {1});
  EXPECT_THROW(h.Observe({{"le", "1"}}, 1), std::invalid_argument);
  EXPECT_THROW(h.Observe({{"__name__", "x"}}, 1), std::invalid_argument);

  // Nothing refused was registered or recorded.
  EXPECT_EQ(registry.Render(),
            "# HELP gpupack_x_total X.\n# TYPE gpupack_x_total counter\n"
            "# HELP ns:gpupack_y_total colons are allowed in metric names\n# TYPE ns:gpupack_y_total counter\n"
            "# HELP gpupack_c_total C.\n# TYPE gpupack_c_total counter\n"
            "# HELP gpupack_h_seconds H.\n# TYPE gpupack_h_seconds histogram\n");
}

// ParseSamples maps each sample line `name{labels} value` of a rendering to its value.
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return samples;
}

TEST(MetricsRegistryTest, ConcurrentIncAndObserveWhileRenderingKeepExactTotals) {
  constexpr int kWriters = 4;
  constexpr int kPerWriter = 20000;
  MetricsRegistry registry;
  auto& counter = registry.AddCounter("gpupack_ops_total", "Ops.");
  auto& histogram = registry.AddHistogram("gpupack_op_seconds", "Op latency.", {1, 2, 3});
  std::atomic<uint64_t> collected{0};
  registry.AddCollected("gpupack_collected", "Read at scrape time.", MetricType::kGauge,
                        [&](std::vector<MetricSample>& out) { out.push_back({{}, double(collected.load())}); });

  std::atomic<int> writers_left{kWriters};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      const MetricLabels mine = {{"writer", std::to_string(w)}};
      const MetricLabels shared = {{"writer", "all"}};
      for (int i = 0; i < kPerWriter; ++i) {
        counter.Inc(mine);
        counter.Inc(shared, 2);
        histogram.Observe(shared, double(i % 4));  // 0, 1, 2, 3: one per bucket and none above 3
        ++collected;
      }
      --writers_left;
    });
  }
  // The renderer checks every snapshot it takes while the writers run: a histogram series is internally
  // consistent (cumulative buckets never decrease, +Inf equals _count) and counters never go down.
  int renders = 0;
  double last_shared = 0;
  const std::string bucket = "gpupack_op_seconds_bucket{writer=\"all\",le=\"";
  do {
    auto s = ParseSamples(registry.Render());
    ++renders;
    const double shared = s["gpupack_ops_total{writer=\"all\"}"];
    EXPECT_GE(shared, last_shared);
    last_shared = shared;
    if (s.count("gpupack_op_seconds_count{writer=\"all\"}")) {
      EXPECT_LE(s[bucket + "1\"}"], s[bucket + "2\"}"]);
      EXPECT_LE(s[bucket + "2\"}"], s[bucket + "3\"}"]);
      EXPECT_EQ(s[bucket + "3\"}"], s[bucket + "+Inf\"}"]);
      EXPECT_EQ(s[bucket + "+Inf\"}"], s["gpupack_op_seconds_count{writer=\"all\"}"]);
    }
  } while (writers_left.load() > 0 && renders < 1000000);
  for (auto& t : writers) t.join();

  auto s = ParseSamples(registry.Render());
  for (int w = 0; w < kWriters; ++w) {
    EXPECT_EQ(s["gpupack_ops_total{writer=\"" + std::to_string(w) + "\"}"], kPerWriter);
    EXPECT_EQ(counter.Value({{"writer", std::to_string(w)}}), kPerWriter);
  }
  constexpr double kAll = double(kWriters) * kPerWriter;
  EXPECT_EQ(s["gpupack_ops_total{writer=\"all\"}"], 2 * kAll);
  EXPECT_EQ(s[bucket + "1\"}"], kAll / 2);  // 0 and 1
  EXPECT_EQ(s[bucket + "2\"}"], kAll * 3 / 4);
  EXPECT_EQ(s[bucket + "3\"}"], kAll);
  EXPECT_EQ(s[bucket + "+Inf\"}"], kAll);
  EXPECT_EQ(s["gpupack_op_seconds_count{writer=\"all\"}"], kAll);
  EXPECT_EQ(s["gpupack_op_seconds_sum{writer=\"all\"}"], kAll / 4 * (0 + 1 + 2 + 3));
  EXPECT_EQ(s["gpupack_collected"], kAll);
}

TEST(MetricsRegistryTest, RegisteringWhileRenderingIsSafe) {
  MetricsRegistry registry;
  std::atomic<bool> done{false};
  std::thread renderer([&] {
    for (int i = 0; i < 100000 && !done.load(); ++i) (void)registry.Render();
  });
  for (int i = 0; i < 200; ++i) registry.AddCounter("gpupack_c" + std::to_string(i) + "_total", "C.").Inc({});
  done = true;
  renderer.join();
  EXPECT_EQ(ParseSamples(registry.Render()).size(), 200u);
}

// A rendering with every kind of family, shaped like the server's /metrics.
std::string SampleExposition() {
  MetricsRegistry registry;
  registry.AddCounter("gpupack_placements_total", "Tasks placed.").Inc({}, 12);
  auto& failures = registry.AddCounter("gpupack_placement_failures_total", "Tasks not placed by cluster and reason.");
  failures.Inc({{"cluster", "default"}, {"reason", "not enough GPU memory"}}, 3);
  failures.Inc({{"cluster", "default"}, {"reason", "odd \"reason\" with \\ and\nnewline"}});
  registry.AddCollected("gpupack_gpu_memory_total_bytes", "GPU memory per GPU.", MetricType::kGauge,
                        [](std::vector<MetricSample>& out) {
                          out.push_back({{{"cluster", "default"}, {"container_instance", "i-1"}, {"Hostname", "h1"},
                                          {"UUID", "GPU-0"}, {"gpu", "0"}},
                                         85899345920.0});
                        });
  auto& latency = registry.AddHistogram("gpupack_request_duration_seconds", "ECS API request latency by operation.",
                                        {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5});
  latency.Observe({{"operation", "RunTask"}}, 0.003);
  latency.Observe({{"operation", "RunTask"}}, 9);
  registry.AddHistogram("gpupack_empty_seconds", "A histogram with no observations yet.", {1});
  registry.AddCollected("gpupack_agents_connected", "Node agents connected now.", MetricType::kGauge,
                        [](std::vector<MetricSample>& out) { out.push_back({{}, 2}); });
  return registry.Render();
}

TEST(MetricsRegistryTest, PromtoolAcceptsTheRendering) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool is not on PATH (Debian: apt-get install prometheus)";
  }
  const testing_support::TempDir dir("gpupack-metrics");
  const std::string input = dir.Write("metrics.txt", SampleExposition());
  const std::string report = dir.File("promtool.txt");
  const std::string command = "promtool check metrics < '" + input + "' > '" + report + "' 2>&1";
  const int rc = std::system(command.c_str());
  std::ifstream in(report);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Exit 0 and no findings: the text parses and passes promtool's lint (HELP present, names, units, _total).
  EXPECT_EQ(rc, 0) << output;
  EXPECT_EQ(output, "");
}


// ---- The server's families over a control plane ----------------------------------------------------------------

// MetricsServer: a control plane on a MemoryStore whose commits are timed, with the server's control-plane
// families registered (the per-task ones with `per_task`: --metrics-per-task), played from the tests as the agent
// (placement on instances without a channel).
class MetricsServer {
 public:
  explicit MetricsServer(bool per_task = false) {
    timed_ = TimeStoreCommits(store_, metrics_);
    committer_ = std::make_unique<GroupCommitter>(*timed_);
    ControlPlaneOptions o;
    o.seed = 7;
    o.placement.place_on_disconnected = true;
    cp_ = std::make_unique<ControlPlane>(o, store_, *committer_);
    Status s = cp_->Load();
    EXPECT_TRUE(s.ok()) << s.message();
    AddControlPlaneMetrics(metrics_, *cp_, per_task);
    Ok("CreateCluster", {{"clusterName", "default"}});
  }
  ~MetricsServer() { committer_->Flush(); }

  Json Ok(const std::string& op, const Json& body) {
    std::promise<OperationResult> p;
    Execute(*cp_, op, body, [&](OperationResult r) { p.set_value(std::move(r)); });
    OperationResult r = p.get_future().get();
    EXPECT_TRUE(r.status.ok()) << op << ": " << r.status.message();
    return r.body;
  }
  // Scrape: the samples of a rendering, by `name{labels}`.
  std::map<std::string, double> Scrape() { return ParseSamples(metrics_.Render()); }
  std::string Render() { return metrics_.Render(); }

 private:
  MemoryStore store_;
  MetricsRegistry metrics_;
  std::unique_ptr<Store> timed_;
  std::unique_ptr<GroupCommitter> committer_;
  std::unique_ptr<ControlPlane> cp_;
};

// RegisterHost registers an instance named `host` (its ec2InstanceId, as the agent sends its host name) with GPUs
// `uuids` of `mib` MiB each, and returns its id (the ARN's last part).
std::string RegisterHost(MetricsServer& s, const std::string& host, const std::vector<std::string>& uuids, int mib) {
  Json devices = Json::array();
  for (const auto& u : uuids) devices.push_back({{"id", u}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", mib}}}});
  Json resources = Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", 8192}},
                                {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", 32768}}});
  Json body = s.Ok("RegisterContainerInstance",
                   {{"totalResources", resources},
                    {"platformDevices", devices},
                    {"instanceIdentityDocument", Json({{"instanceId", host}}).dump()}});
  const std::string arn = body["containerInstance"]["containerInstanceArn"];
  return arn.substr(arn.rfind('/') + 1);
}

void RegisterShared(MetricsServer& s, const std::string& family, int memory, int compute) {
  Json mps = {{"memory", memory}, {"maxComputePercent", compute}};
  s.Ok("RegisterTaskDefinition",
       {{"family", family},
        {"containerDefinitions",
         Json::array({{{"name", "main"}, {"image", "busybox"}, {"memory", 64},
                       {"resourceRequirements", Json::array({{{"type", "GPU"}, {"sharingStrategy", {{"nvidiaMps", mps}}}}})}}})}});
}

// GpuKey: the sample key of a per-GPU family, as the server labels it.
std::string GpuKey(const std::string& family, const std::string& instance, const std::string& host,
                   const std::string& uuid, int index) {
  return family + "{cluster=\"default\",container_instance=\"" + instance + "\",Hostname=\"" + host + "\",UUID=\"" +
         uuid + "\",gpu=\"" + std::to_string(index) + "\"}";
}

TEST(ServerMetricsTest, GpuSeriesCarryUuidIndexAndHostnameWithBytesOfTheMiBFigures) {
  MetricsServer s(/*per_task=*/true);
  const std::string id = RegisterHost(s, "gpu-host-1", {"GPU-aaaa", "GPU-bbbb"}, 22587);
  RegisterShared(s, "mps", 4096, 50);
  Json run = s.Ok("RunTask", {{"taskDefinition", "mps"}});
  ASSERT_EQ(run["tasks"].size(), 1u);
  const std::string task_arn = run["tasks"][0]["taskArn"];
  const std::string uuid = run["tasks"][0]["containers"][0]["gpuIds"][0];
  const int index = uuid == "GPU-aaaa" ? 0 : 1;

  auto m = s.Scrape();
  for (int i = 0; i < 2; ++i) {
    const std::string u = i == 0 ? "GPU-aaaa" : "GPU-bbbb";
    EXPECT_EQ(m[GpuKey("gpupack_gpu_memory_total_bytes", id, "gpu-host-1", u, i)], 22587.0 * 1048576) << u;
    EXPECT_EQ(m[GpuKey("gpupack_gpu_memory_allocated_bytes", id, "gpu-host-1", u, i)],
              i == index ? 4096.0 * 1048576 : 0.0) << u;
    EXPECT_EQ(m[GpuKey("gpupack_gpu_compute_allocated_ratio", id, "gpu-host-1", u, i)], i == index ? 0.5 : 0.0);
    EXPECT_EQ(m[GpuKey("gpupack_gpu_held", id, "gpu-host-1", u, i)], 0.0);
  }
  const std::string task_labels = "{cluster=\"default\",task_arn=\"" + task_arn + "\",container=\"main\",container_instance=\"" +
                                  id + "\",Hostname=\"gpu-host-1\",UUID=\"" + uuid + "\",gpu=\"" + std::to_string(index) +
                                  "\",mode=\"NVIDIA_MPS\"}";
  EXPECT_EQ(m.at("gpupack_task_gpu_memory_allocated_bytes" + task_labels), 4096.0 * 1048576);
  EXPECT_EQ(m.at("gpupack_task_gpu_compute_limit_ratio" + task_labels), 0.5);
  const std::string instance_labels = "{cluster=\"default\",container_instance=\"" + id + "\",Hostname=\"gpu-host-1\"}";
  EXPECT_EQ(m.at("gpupack_instance_impaired" + instance_labels), 0.0);
  EXPECT_EQ(m.at("gpupack_instance_agent_connected" + instance_labels), 0.0);  // no channel behind it

  // No series has a label Prometheus owns (instance, job) or a MiB figure.
  const std::string text = s.Render();
  EXPECT_FALSE(std::regex_search(text, std::regex(R"([{,](instance|job)=")"))) << text;
  EXPECT_EQ(text.find("_mib"), std::string::npos) << text;
}

// /metrics needs no signature, so by default it names no task and no container: with a shared and a dedicated
// task placed, the text holds neither task's ARN (nor its id), no task_arn or container label, and no
// gpupack_task_ family, while the per-GPU series still count what the tasks hold. Asked for (--metrics-per-task),
// the two per-task families name both tasks and their containers.
TEST(ServerMetricsTest, ByDefaultNoSeriesNamesATaskOrAContainerAndThePerTaskFlagAddsThem) {
  for (const bool per_task : {false, true}) {
    SCOPED_TRACE(per_task ? "--metrics-per-task" : "default");
    MetricsServer s(per_task);
    const std::string id = RegisterHost(s, "h1", {"GPU-1", "GPU-2"}, 10000);
    RegisterShared(s, "shared", 1000, 25);
    s.Ok("RegisterTaskDefinition",
         {{"family", "whole"},
          {"containerDefinitions", Json::array({{{"name", "trainer-secret-name"}, {"image", "busybox"}, {"memory", 64},
                                                 {"resourceRequirements", Json::array({{{"type", "GPU"},
                                                                                        {"value", "1"}}})}}})}});
    std::vector<std::string> arns;
    for (const char* family : {"shared", "whole"}) {
      Json run = s.Ok("RunTask", {{"taskDefinition", family}});
      ASSERT_EQ(run["tasks"].size(), 1u) << family << ": " << run.dump();
      arns.push_back(run["tasks"][0]["taskArn"]);
    }
    const std::string text = s.Render();
    for (const std::string& arn : arns) {
      const std::string task_id = arn.substr(arn.rfind('/') + 1);
      EXPECT_EQ(text.find(task_id) != std::string::npos, per_task) << task_id << "\n" << text;
    }
    EXPECT_EQ(text.find("task_arn=") != std::string::npos, per_task) << text;
    EXPECT_EQ(text.find("container=") != std::string::npos, per_task) << text;
    EXPECT_EQ(text.find("trainer-secret-name") != std::string::npos, per_task) << text;
    EXPECT_EQ(text.find("gpupack_task_gpu_memory_allocated_bytes") != std::string::npos, per_task);
    EXPECT_EQ(text.find("gpupack_task_gpu_compute_limit_ratio") != std::string::npos, per_task);
    auto m = s.Scrape();
    double allocated = 0;
    for (const char* uuid : {"GPU-1", "GPU-2"})
      allocated += m.at(GpuKey("gpupack_gpu_memory_allocated_bytes", id, "h1", uuid, uuid[4] == '1' ? 0 : 1));
    EXPECT_EQ(allocated, (1000.0 + 10000.0) * 1048576);  // the shared task's declared MiB and the whole GPU
  }
}

TEST(ServerMetricsTest, PlacementFailuresCountTasksNotRejectedInstances) {
  MetricsServer s;
  RegisterHost(s, "h1", {"GPU-1"}, 10000);
  RegisterHost(s, "h2", {"GPU-2"}, 10000);
  RegisterHost(s, "h3", {"GPU-3"}, 10000);
  RegisterShared(s, "big", 8000, 100);
  // Three fit (one per GPU); the other four of the request are not placed: four tasks, three instances refused
  // the fourth.
  Json run = s.Ok("RunTask", {{"taskDefinition", "big"}, {"count", 7}});
  EXPECT_EQ(run["tasks"].size(), 3u);
  auto m = s.Scrape();
  EXPECT_EQ(m.at("gpupack_placements_total"), 3);
  EXPECT_EQ(m.at("gpupack_placement_failures_total{cluster=\"default\",reason=\"RESOURCE:GPU_MEMORY\"}"), 4);
  EXPECT_EQ(m.at("gpupack_placement_instance_refusals_total{cluster=\"default\",reason=\"RESOURCE:GPU_MEMORY\"}"), 3);
  // One more task that does not fit: one more task, three more refusals.
  s.Ok("RunTask", {{"taskDefinition", "big"}});
  m = s.Scrape();
  EXPECT_EQ(m.at("gpupack_placement_failures_total{cluster=\"default\",reason=\"RESOURCE:GPU_MEMORY\"}"), 5);
  EXPECT_EQ(m.at("gpupack_placement_instance_refusals_total{cluster=\"default\",reason=\"RESOURCE:GPU_MEMORY\"}"), 6);
  // Tasks by status: the three placed are PENDING (no agent reported them); every status has its series.
  EXPECT_EQ(m.at("gpupack_tasks{cluster=\"default\",status=\"PENDING\"}"), 3);
  EXPECT_EQ(m.at("gpupack_tasks{cluster=\"default\",status=\"RUNNING\"}"), 0);
  EXPECT_EQ(m.at("gpupack_tasks{cluster=\"default\",status=\"STOPPED\"}"), 0);
}

// ServiceSamples: the sample lines of the gpupack_service_ families, in rendering order.
std::vector<std::string> ServiceSamples(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("gpupack_service_", 0) == 0) out.push_back(line);
  return out;
}

// A service's replicas, per cluster and service: desired, running and pending tasks and the deployments in
// progress, equal to what DescribeServices says, for the services not INACTIVE. One GPU of 10,000 MiB holds two
// tasks of 4,000 MiB, so "web" (desiredCount 3) places 2 (PENDING) and its third waits for capacity, counted in
// neither running nor pending. "idle" lives in a cluster without instances; "gone" was deleted with no task, so
// it is INACTIVE at once and exported no more. Families list their services in ARN order (cluster, then name).
TEST(ServerMetricsTest, ServicesShowDesiredRunningAndPendingTasksAndInactiveOnesAreLeftOut) {
  MetricsServer s;
  RegisterHost(s, "h1", {"GPU-1"}, 10000);
  RegisterShared(s, "web", 4000, 25);
  s.Ok("CreateCluster", {{"clusterName", "batch"}});
  s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 3}});
  s.Ok("CreateService",
       {{"cluster", "batch"}, {"serviceName", "idle"}, {"taskDefinition", "web"}, {"desiredCount", 1}});
  s.Ok("CreateService", {{"serviceName", "gone"}, {"taskDefinition", "web"}, {"desiredCount", 0}});
  s.Ok("DeleteService", {{"service", "gone"}});
  Json gone = s.Ok("DescribeServices", {{"services", Json::array({"gone"})}});
  ASSERT_EQ(gone["services"].size(), 1u);
  EXPECT_EQ(gone["services"][0]["status"], "INACTIVE");

  const std::string text = s.Render();
  for (const char* family : {"desired", "running", "pending"})
    EXPECT_NE(text.find(std::string("# TYPE gpupack_service_") + family + "_tasks gauge\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE gpupack_service_deployments_in_progress gauge\n"), std::string::npos);
  EXPECT_EQ(ServiceSamples(text), (std::vector<std::string>{
                                      "gpupack_service_desired_tasks{cluster=\"batch\",service=\"idle\"} 1",
                                      "gpupack_service_desired_tasks{cluster=\"default\",service=\"web\"} 3",
                                      "gpupack_service_running_tasks{cluster=\"batch\",service=\"idle\"} 0",
                                      "gpupack_service_running_tasks{cluster=\"default\",service=\"web\"} 0",
                                      "gpupack_service_pending_tasks{cluster=\"batch\",service=\"idle\"} 0",
                                      "gpupack_service_pending_tasks{cluster=\"default\",service=\"web\"} 2",
                                      "gpupack_service_deployments_in_progress{cluster=\"batch\",service=\"idle\"} 1",
                                      "gpupack_service_deployments_in_progress{cluster=\"default\",service=\"web\"} 1",
                                  }));

  // The agent reports one task RUNNING: 1 running, 1 pending.
  Json list = s.Ok("ListTasks", {{"serviceName", "web"}});
  ASSERT_EQ(list["taskArns"].size(), 2u);
  s.Ok("SubmitTaskStateChange", {{"task", list["taskArns"][0]}, {"status", "RUNNING"}});
  auto m = s.Scrape();
  const std::string web = "{cluster=\"default\",service=\"web\"}";
  EXPECT_EQ(m.at("gpupack_service_running_tasks" + web), 1);
  EXPECT_EQ(m.at("gpupack_service_pending_tasks" + web), 1);

  // Scaled to 2 and the second RUNNING: the deployment completes, and the figures are DescribeServices'.
  s.Ok("UpdateService", {{"service", "web"}, {"desiredCount", 2}});
  s.Ok("SubmitTaskStateChange", {{"task", list["taskArns"][1]}, {"status", "RUNNING"}});
  Json d = s.Ok("DescribeServices", {{"services", Json::array({"web"})}})["services"][0];
  EXPECT_EQ(d["deployments"][0]["rolloutState"], "COMPLETED");
  m = s.Scrape();
  EXPECT_EQ(m.at("gpupack_service_desired_tasks" + web), d["desiredCount"].get<double>());
  EXPECT_EQ(m.at("gpupack_service_running_tasks" + web), d["runningCount"].get<double>());
  EXPECT_EQ(m.at("gpupack_service_pending_tasks" + web), d["pendingCount"].get<double>());
  EXPECT_EQ(m.at("gpupack_service_desired_tasks" + web), 2);
  EXPECT_EQ(m.at("gpupack_service_running_tasks" + web), 2);
  EXPECT_EQ(m.at("gpupack_service_pending_tasks" + web), 0);
  EXPECT_EQ(m.at("gpupack_service_deployments_in_progress" + web), 0);
  EXPECT_EQ(s.Render().find("service=\"gone\""), std::string::npos);
}

TEST(ServerMetricsTest, StopTaskReleasesItsAllocationSeriesAndCommitsAreTimed) {
  MetricsServer s(/*per_task=*/true);
  RegisterHost(s, "h1", {"GPU-1"}, 10000);
  RegisterShared(s, "small", 1000, 25);
  Json run = s.Ok("RunTask", {{"taskDefinition", "small"}});
  const std::string arn = run["tasks"][0]["taskArn"];
  EXPECT_NE(s.Render().find("gpupack_task_gpu_memory_allocated_bytes{cluster=\"default\",task_arn=\"" + arn), std::string::npos);
  s.Ok("StopTask", {{"task", arn}});
  const std::string text = s.Render();
  EXPECT_EQ(text.find("task_arn=\"" + arn), std::string::npos) << text;
  auto m = s.Scrape();
  EXPECT_GE(m.at("gpupack_store_commit_duration_seconds_count{result=\"ok\"}"), 3);  // registration, definition, task
}

TEST(ServerMetricsTest, PromtoolAcceptsTheServerFamilies) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool is not on PATH (Debian: apt-get install prometheus)";
  }
  MetricsServer s(/*per_task=*/true);
  RegisterHost(s, "h1", {"GPU-1", "GPU-2"}, 10000);
  RegisterShared(s, "small", 1000, 25);
  for (int i = 0; i < 3; ++i) s.Ok("RunTask", {{"taskDefinition", "small"}, {"count", 10}});  // 20 fit
  s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "small"}, {"desiredCount", 2}});  // none fits
  const testing_support::TempDir dir("gpupack-server-metrics");
  const std::string input = dir.Write("metrics.txt", s.Render());
  const std::string report = dir.File("promtool.txt");
  const std::string command = "promtool check metrics < '" + input + "' > '" + report + "' 2>&1";
  const int rc = std::system(command.c_str());
  std::ifstream in(report);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << output;
  EXPECT_EQ(output, "");
}

TEST(ServerMetricsTest, CapacityProviderLinesShowTheirLengthAndWaitsAndPassPromtool) {
  MetricsServer s;
  s.Ok("CreateCapacityProvider", {{"name", "pool"}});
  s.Ok("PutClusterCapacityProviders", {{"cluster", "default"},
                                       {"capacityProviders", Json::array({"pool"})},
                                       {"defaultCapacityProviderStrategy",
                                        Json::array({{{"capacityProvider", "pool"}, {"weight", 1}}})}});
  Json devices = Json::array({{{"id", "GPU-q"}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", 10000}}}}});
  Json resources = Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", 8192}},
                                {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", 32768}}});
  s.Ok("RegisterContainerInstance",
       {{"totalResources", resources},
        {"platformDevices", devices},
        {"attributes", Json::array({{{"name", kCapacityProviderAttribute}, {"value", "pool"}}})}});
  RegisterShared(s, "big", 6000, 50);
  Json run = s.Ok("RunTask", {{"taskDefinition", "big"}, {"count", 3}});  // one placed, two wait
  ASSERT_EQ(run["tasks"].size(), 3u);
  const std::string line = "{cluster=\"default\",capacity_provider=\"pool\"}";
  EXPECT_EQ(s.Scrape().at("gpupack_capacity_provider_waiting_tasks" + line), 2);
  s.Ok("SubmitTaskStateChange", {{"task", run["tasks"][0]["taskArn"]}, {"status", "STOPPED"}, {"reason", "done"}});
  auto m = s.Scrape();
  EXPECT_EQ(m.at("gpupack_capacity_provider_waiting_tasks" + line), 1);
  EXPECT_EQ(m.at("gpupack_capacity_provider_wait_seconds_count{capacity_provider=\"pool\"}"), 1);
  EXPECT_EQ(m.at("gpupack_capacity_provider_wait_seconds_bucket{capacity_provider=\"pool\",le=\"+Inf\"}"), 1);
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "promtool is not on PATH";
  const testing_support::TempDir dir("gpupack-queue-metrics");
  const std::string input = dir.Write("metrics.txt", s.Render());
  const std::string report = dir.File("promtool.txt");
  const int rc = std::system(("promtool check metrics < '" + input + "' > '" + report + "' 2>&1").c_str());
  std::ifstream in(report);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << output;
  EXPECT_EQ(output, "");
}

}  // namespace
}  // namespace gpupack::api
