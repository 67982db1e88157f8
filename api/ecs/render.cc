#include "api/ecs/render.h"

#include <cstdio>
#include <sstream>
#include <string>

namespace gpupack::api {

namespace {

// Statistics: ECS's cluster statistics (DescribeClusters include STATISTICS), name and value as strings. Every
// gpupack task and service is an EC2 one, so the Fargate and External counts are 0.
Json Statistics(const ClusterCounts& counts) {
  auto stat = [](const char* name, int value) { return Json{{"name", name}, {"value", std::to_string(value)}}; };
  return Json::array({stat("runningEC2TasksCount", counts.running_tasks),
                      stat("runningFargateTasksCount", 0),
                      stat("pendingEC2TasksCount", counts.pending_tasks),
                      stat("pendingFargateTasksCount", 0),
                      stat("runningExternalTasksCount", 0),
                      stat("pendingExternalTasksCount", 0),
                      stat("activeEC2ServiceCount", counts.active_services),
                      stat("activeFargateServiceCount", 0),
                      stat("drainingEC2ServiceCount", counts.draining_services),
                      stat("drainingFargateServiceCount", 0),
                      stat("activeExternalServiceCount", 0),
                      stat("drainingExternalServiceCount", 0)});
}

Json Failures(const std::vector<Failure>& failures) {
  Json out = Json::array();
  for (const auto& f : failures) {
    Json j = {{"arn", f.arn}, {"reason", f.reason}};
    if (!f.detail.empty()) j["detail"] = f.detail;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

Json Render(const ArnContext& ctx, const ClusterResult& r) { return {{"cluster", ToJson(ctx, r.cluster, r.counts)}}; }

Json Render(const ArnContext& ctx, const ClustersResult& r) {
  Json clusters = Json::array();
  for (const auto& c : r.clusters) {
    Json j = ToJson(ctx, c.cluster, c.counts);
    if (r.statistics) j["statistics"] = Statistics(c.counts);
    clusters.push_back(std::move(j));
  }
  return {{"clusters", clusters}, {"failures", Failures(r.failures)}};
}

Json Render(const ArnContext& ctx, const ServiceResult& r) {
  return {{"service", ToJson(ctx, *r.service, /*tags=*/true)}};
}

Json Render(const ArnContext& ctx, const ServicesResult& r) {
  Json services = Json::array();
  for (const auto& s : r.services) services.push_back(ToJson(ctx, *s, r.tags));
  return {{"services", services}, {"failures", Failures(r.failures)}};
}

Json Render(const ArnContext&, const CapacityProviderResult& r) {
  return {{"capacityProvider", ToJson(r.provider, /*tags=*/true)}};
}

Json Render(const ArnContext&, const CapacityProvidersResult& r) {
  Json providers = Json::array();
  for (const auto& p : r.providers) providers.push_back(ToJson(p, r.tags));
  Json out = {{"capacityProviders", providers}, {"failures", Failures(r.failures)}};
  if (r.next_token) out["nextToken"] = *r.next_token;
  return out;
}

Json Render(const ArnContext&, const ListPage& r) {
  Json out = {{r.key, r.items}};
  if (r.next_token) out["nextToken"] = *r.next_token;
  return out;
}

Json Render(const ArnContext&, const TaskDefinitionResult& r) {
  Json out = {{"taskDefinition", ToJson(*r.definition)}};
  if (r.with_tags) out["tags"] = ToJson(r.definition->tags, true);
  return out;
}

Json Render(const ArnContext& ctx, const TasksResult& r) {
  Json tasks = Json::array();
  for (const auto& t : r.tasks) tasks.push_back(ToJson(ctx, *t));
  return {{"tasks", tasks}, {"failures", Failures(r.failures)}};
}

Json Render(const ArnContext& ctx, const TaskResult& r) { return {{"task", ToJson(ctx, *r.task)}}; }

Json Render(const ArnContext&, const InstanceResult& r) { return {{"containerInstance", ToJson(*r.instance)}}; }

Json Render(const ArnContext&, const InstancesResult& r) {
  Json instances = Json::array();
  for (const auto& i : r.instances) instances.push_back(ToJson(*i));
  return {{"containerInstances", instances}, {"failures", Failures(r.failures)}};
}

Json Render(const ArnContext&, const AttributesResult& r) {
  Json rows = Json::array();
  for (const auto& a : r.attributes) {
    Json j = {{"name", a.name}, {"targetType", "container-instance"}, {"targetId", a.target_arn}};
    if (a.value) j["value"] = *a.value;
    rows.push_back(std::move(j));
  }
  Json out = {{"attributes", rows}};
  if (r.next_token) out["nextToken"] = *r.next_token;
  return out;
}

Json Render(const ArnContext&, const AckResult&) { return {{"acknowledgment", "ACK"}}; }

namespace {

std::string WithCommas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (n < 0 ? "-" : "") + out;
}

// ReadableScore: one strategy's score of one instance as a person reads it: the strategy, its value in the
// strategy's unit (a random draw scaled to [0, 1)) and what the number is. Lower wins, for every strategy.
Json ReadableScore(const PlacementStrategy& s, double raw, const TaskDemand& demand, const std::string& group) {
  const std::string name = s.field.empty() ? s.type : s.type + ":" + s.field;
  const int64_t n = static_cast<int64_t>(raw);
  if (s.type == "random") {
    const double draw = raw / 9007199254740992.0;  // the scorer's 53-bit key over 2^53
    char text[64];
    std::snprintf(text, sizeof text, "%.4f", draw);
    return {{"strategy", name}, {"value", std::stod(text)}, {"text", std::string("random draw ") + text + " (lowest wins)"}};
  }
  std::string text;
  if (s.type == "binpack" && (s.field == "cpu" || s.field == "CPU")) {
    text = WithCommas(n) + " CPU units left on the instance after placement (least wins)";
  } else if (s.type == "binpack" && (s.field == "memory" || s.field == "MEMORY")) {
    text = WithCommas(n) + " MiB of memory left on the instance after placement (least wins)";
  } else if (s.type == "binpack") {
    text = demand.gpu_kind == GpuKind::kShared
               ? WithCommas(n) + " MiB left on the best-fitting GPU after placement (least wins)"
               : WithCommas(n) + " MiB of shareable GPU memory left on the instance after placement (least wins)";
  } else if (s.type == "spread" && s.field.rfind("attribute:", 0) == 0) {
    text = WithCommas(n) + " task(s) of group " + group + " on instances with this instance's " + s.field.substr(10) +
           " (fewest wins)";
  } else if (s.type == "spread") {
    text = WithCommas(n) + " task(s) of group " + group + " already on the instance (fewest wins)";
  } else {
    text = "score " + WithCommas(n) + " (lowest wins)";
  }
  return {{"strategy", name}, {"value", n}, {"text", text}};
}

}  // namespace

Json Render(const ArnContext&, const ExplainResult& r) {
  Json instances = Json::array();
  for (const auto& v : r.instances) {
    Json gpus = Json::array();
    for (const auto& g : v.gpus) gpus.push_back({{"gpuId", g.gpu_id}, {"fits", g.fits}, {"detail", g.detail}});
    Json j = {{"containerInstanceArn", v.arn}, {"eligible", v.eligible}, {"chosen", v.chosen}, {"gpus", gpus}};
    if (!v.eligible) {
      j["reason"] = v.reason;
      j["detail"] = v.detail;
    } else {
      Json readable = Json::array();
      for (size_t i = 0; i < v.scores.size() && i < r.strategies.size(); ++i)
        readable.push_back(ReadableScore(r.strategies[i], v.scores[i], r.demand, r.group));
      j["scores"] = std::move(readable);
      j["rawScores"] = v.scores;  // the placer's numbers, compared lexicographically
    }
    instances.push_back(std::move(j));
  }
  const TaskDemand& d = r.demand;
  Json out = {{"demand",
               {{"cpu", d.cpu},
                {"memory", d.memory},
                {"gpuKind", d.gpu_kind == GpuKind::kShared      ? "NVIDIA_MPS"
                            : d.gpu_kind == GpuKind::kDedicated ? "DEDICATED"
                                                                : "NONE"},
                {"gpuMemoryInMiB", d.gpu_memory},
                {"gpuComputePercent", d.gpu_compute},
                {"gpuCount", d.gpu_count}}},
              {"instances", instances}};
  if (!r.chosen.empty()) out["chosenContainerInstanceArn"] = r.chosen;
  return out;
}

}  // namespace gpupack::api
