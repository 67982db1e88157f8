#include "api/logs/log_index.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace gpupack::api {

namespace {

using Json = nlohmann::json;

constexpr const char* kClusterGroupPrefix = "/gpupack/";

// AwslogsOf: the awslogs group and stream prefix of a container definition (nullopt: another driver or none).
std::optional<AwslogsTarget> AwslogsOf(const ContainerDefinition& def) {
  if (def.extra_json.empty()) return std::nullopt;
  const Json extra = Json::parse(def.extra_json, nullptr, false);
  if (!extra.is_object() || !extra.contains("logConfiguration")) return std::nullopt;
  const Json& config = extra["logConfiguration"];
  if (!config.is_object() || config.value("logDriver", Json()) != "awslogs") return std::nullopt;
  const Json options = config.value("options", Json::object());
  if (!options.is_object() || !options.contains("awslogs-group") || !options["awslogs-group"].is_string())
    return std::nullopt;
  AwslogsTarget out{options["awslogs-group"].get<std::string>(), ""};
  if (options.contains("awslogs-stream-prefix") && options["awslogs-stream-prefix"].is_string())
    out.prefix = options["awslogs-stream-prefix"].get<std::string>();
  return out;
}

LogCatalog::Family FamilyOf(const std::shared_ptr<const TaskDefinitionFamily>& revisions) {
  LogCatalog::Family family;
  family.seen = revisions;
  for (const auto& [number, def] : *revisions) {
    LogCatalog::Revision r;
    r.registered_at = def->registered_at;
    for (const ContainerDefinition& c : def->containers)
      if (auto target = AwslogsOf(c)) r.containers.emplace(c.name, std::move(*target));
    if (!r.containers.empty()) family.revisions.emplace(number, std::move(r));
  }
  return family;
}

// DefinitionKey: family and revision of a task definition ARN ("...:task-definition/family:revision").
std::optional<std::pair<std::string, int>> DefinitionKey(const std::string& arn) {
  const size_t slash = arn.rfind('/'), colon = arn.rfind(':');
  if (slash == std::string::npos || colon == std::string::npos || colon < slash) return std::nullopt;
  int revision = 0;
  for (size_t i = colon + 1; i < arn.size(); ++i) {
    if (arn[i] < '0' || arn[i] > '9' || revision > 100000000) return std::nullopt;
    revision = revision * 10 + (arn[i] - '0');
  }
  return std::make_pair(arn.substr(slash + 1, colon - slash - 1), revision);
}

// StreamsOf: the streams of a task's containers.
std::vector<StreamRef> StreamsOf(const LogCatalog& catalog, const Task& task) {
  std::vector<StreamRef> out;
  const LogCatalog::Revision* revision = nullptr;
  if (auto key = DefinitionKey(task.task_definition_arn)) revision = catalog.Find(key->first, key->second);
  const std::string region = ArnPart(task.arn, 3), account = ArnPart(task.arn, 4);
  for (const Container& c : task.containers) {
    StreamRef s;
    s.name = c.name + "/" + task.id;
    const AwslogsTarget* target = nullptr;
    if (revision != nullptr)
      if (auto it = revision->containers.find(c.name); it != revision->containers.end()) target = &it->second;
    if (target != nullptr) {
      s.group = target->group;
      if (!target->prefix.empty()) s.name = target->prefix + "/" + s.name;
    } else {
      s.group = kClusterGroupPrefix + task.cluster;
    }
    s.task_arn = task.arn;
    s.container = c.name;
    s.instance_arn = task.container_instance_arn;
    s.created_at = task.created_at;
    s.arn = "arn:aws:logs:" + region + ":" + account + ":log-group:" + s.group + ":log-stream:" + s.name;
    out.push_back(std::move(s));
  }
  return out;
}

// ClusterOfGroup: "<cluster>" of a group named "/gpupack/<cluster>" when that cluster exists, else "".
std::string ClusterOfGroup(const ReadView& view, const std::string& group) {
  if (group.rfind(kClusterGroupPrefix, 0) != 0) return "";
  std::string name = group.substr(std::char_traits<char>::length(kClusterGroupPrefix));
  return view.FindCluster(name) != nullptr ? name : "";
}

// ForEachTaskOf calls `f(const Task&)` for every task of `cluster` the view keeps (running, then stopped).
template <typename F>
void ForEachTaskOf(const ReadView& view, const std::string& cluster, F&& f) {
  for (bool stopped : {false, true}) {
    view.TaskOrderOf(cluster, stopped).ForEachFrom(0, [&](const TaskKey& key) {
      if (const Task* t = view.FindTask(key.arn)) f(*t);
      return true;
    });
  }
}

}  // namespace

std::string ArnPart(const std::string& arn, int n) {
  size_t from = 0;
  for (int i = 0; i < n; ++i) {
    from = arn.find(':', from);
    if (from == std::string::npos) return "";
    ++from;
  }
  return arn.substr(from, arn.find(':', from) - from);
}

const LogCatalog::Revision* LogCatalog::Find(const std::string& family, int revision) const {
  auto f = families.find(family);
  if (f == families.end()) return nullptr;
  auto r = f->second.revisions.find(revision);
  return r == f->second.revisions.end() ? nullptr : &r->second;
}

std::shared_ptr<const LogCatalog> LogIndex::Catalog(const ReadView& view) const {
  const auto& defs = view.TaskDefinitions();
  std::shared_ptr<const LogCatalog> last;
  {
    std::lock_guard lock(mu_);
    last = last_;
  }
  if (last && last->families.size() == defs.size() &&
      std::equal(defs.begin(), defs.end(), last->families.begin(),
                 [](const auto& a, const auto& b) { return a.first == b.first && a.second == b.second.seen; }))
    return last;
  // Families whose revisions did not change are taken over as they were; the others are read again.
  auto next = std::make_shared<LogCatalog>();
  for (const auto& [name, revisions] : defs) {
    const LogCatalog::Family* before = nullptr;
    if (last)
      if (auto it = last->families.find(name); it != last->families.end() && it->second.seen == revisions)
        before = &it->second;
    LogCatalog::Family family = before != nullptr ? *before : FamilyOf(revisions);
    for (const auto& [number, r] : family.revisions) {
      const std::string arn = (*revisions).at(number)->arn;
      for (const auto& [container, target] : r.containers) {
        next->groups[target.group].insert(arn);
        auto [it, added] = next->group_created.try_emplace(target.group, r.registered_at);
        if (!added) it->second = std::min(it->second, r.registered_at);
      }
    }
    next->families.emplace(name, std::move(family));
  }
  std::lock_guard lock(mu_);
  last_ = next;
  return next;
}

bool GroupExists(const ReadView& view, const LogCatalog& catalog, const std::string& group) {
  return catalog.groups.count(group) > 0 || !ClusterOfGroup(view, group).empty();
}

std::vector<StreamRef> GroupStreams(const ReadView& view, const LogCatalog& catalog, const std::string& group,
                                    size_t* visited) {
  std::vector<StreamRef> out;
  auto take = [&](const Task& t) {
    if (visited != nullptr) ++*visited;
    for (StreamRef& s : StreamsOf(catalog, t))
      if (s.group == group) out.push_back(std::move(s));
  };
  if (auto g = catalog.groups.find(group); g != catalog.groups.end()) {
    // An awslogs group: the tasks of its revisions, in whichever cluster they run.
    // (A group named like a cluster's own takes that cluster's other containers too.)
    const std::set<std::string>& arns = g->second;
    const std::string own_cluster = ClusterOfGroup(view, group);
    for (const Cluster* c : view.Clusters())
      ForEachTaskOf(view, c->name, [&](const Task& t) {
        if (arns.count(t.task_definition_arn) > 0 || t.cluster == own_cluster) take(t);
      });
  } else if (const std::string cluster = ClusterOfGroup(view, group); !cluster.empty()) {
    ForEachTaskOf(view, cluster, take);
  }
  std::sort(out.begin(), out.end(), [](const StreamRef& a, const StreamRef& b) { return a.name < b.name; });
  return out;
}

std::optional<StreamRef> FindStream(const ReadView& view, const LogCatalog& catalog, const std::string& group,
                                    const std::string& name) {
  const size_t slash = name.rfind('/');
  if (slash == std::string::npos || slash + 1 == name.size()) return std::nullopt;
  const std::string task_id = name.substr(slash + 1);
  std::vector<const Cluster*> clusters;
  if (catalog.groups.count(group) > 0) clusters = view.Clusters();
  else if (const Cluster* c = view.FindCluster(ClusterOfGroup(view, group))) clusters.push_back(c);
  for (const Cluster* c : clusters) {
    const size_t at = c->arn.find(":cluster/");
    if (at == std::string::npos) continue;
    const Task* t = view.FindTask(c->arn.substr(0, at) + ":task/" + c->name + "/" + task_id);
    if (t == nullptr) continue;
    for (StreamRef& s : StreamsOf(catalog, *t))
      if (s.group == group && s.name == name) return std::move(s);
  }
  return std::nullopt;
}

std::map<std::string, GroupInfo> AllGroups(const ReadView& view, const LogCatalog& catalog) {
  std::map<std::string, GroupInfo> out;
  for (const Cluster* c : view.Clusters())
    out[kClusterGroupPrefix + c->name] = GroupInfo{c->created_at, ArnPart(c->arn, 3), ArnPart(c->arn, 4)};
  for (const auto& [group, arns] : catalog.groups) {
    const std::string& any = *arns.begin();
    auto [it, added] =
        out.try_emplace(group, GroupInfo{catalog.group_created.at(group), ArnPart(any, 3), ArnPart(any, 4)});
    if (!added) it->second.created_at = std::min(it->second.created_at, catalog.group_created.at(group));
  }
  return out;
}

}  // namespace gpupack::api
