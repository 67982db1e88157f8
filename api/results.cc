#include "api/results.h"

#include <sstream>

namespace gpupack::api {

namespace {

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

std::string PageToken(size_t end) {
  std::ostringstream token;
  token << "gp1." << std::hex << end;
  return token.str();
}

ListPage PageOf(const char* key, std::vector<std::string> items, size_t begin, size_t limit) {
  ListPage page;
  page.key = key;
  begin = std::min(begin, items.size());
  const size_t end = std::min(items.size(), begin + limit);
  if (end < items.size()) page.next_token = PageToken(end);
  items.erase(items.begin() + static_cast<std::ptrdiff_t>(end), items.end());
  items.erase(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(begin));
  page.items = std::move(items);
  return page;
}

Json Render(const ArnContext& ctx, const ClusterResult& r) { return {{"cluster", ToJson(ctx, r.cluster, r.counts)}}; }

Json Render(const ArnContext& ctx, const ClustersResult& r) {
  Json clusters = Json::array();
  for (const auto& c : r.clusters) clusters.push_back(ToJson(ctx, c.cluster, c.counts));
  return {{"clusters", clusters}, {"failures", Failures(r.failures)}};
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
      j["scores"] = v.scores;
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
