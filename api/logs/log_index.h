// LogIndex: where the Logs front end (logs_handler.h) finds log groups and streams without reading every task.
//
// Names (the awslogs driver's): a container whose definition has logConfiguration {logDriver: "awslogs",
// options: {"awslogs-group": G, "awslogs-stream-prefix": P}} logs to group G, stream "P/<container>/<task id>"
// ("<container>/<task id>" without a prefix); any other container to group "/gpupack/<cluster>", stream
// "<container>/<task id>".
//
// Groups are known from the task definitions and the clusters, never from the tasks: "/gpupack/<cluster>" exists
// while the cluster does, an awslogs group while a task definition the server keeps names it (created with the
// oldest such revision). A LogCatalog reads each revision's logConfiguration once and keeps, by group, the
// revisions whose containers log there. LogIndex::Catalog() builds it for a view again only for the families
// whose revisions changed since the last one (one pointer compare per family).
//
// A group's streams are those of the tasks of its own revisions (or, for "/gpupack/<cluster>", of that cluster's
// tasks), read through the clusters' task orders with one lookup per task and no JSON; a group that does not
// exist costs a map lookup, a stream named in full (GetLogEvents, FilterLogEvents' logStreamNames) one task
// lookup per cluster.
//
// Thread-safe: LogIndex::Catalog() may be called from any thread (a mutex guards the last catalog); a catalog
// is immutable and the functions below only read it and the view.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/core/read_view.h"

namespace gpupack::api {

// StreamRef: one container's stream, and where its events are.
struct StreamRef {
  std::string group, name;
  std::string task_arn, container, instance_arn;
  EpochMs created_at = 0;
  std::string arn;
};

// AwslogsTarget: the group and stream prefix a container definition's awslogs configuration names.
struct AwslogsTarget {
  std::string group, prefix;
};

// LogCatalog: the awslogs targets of every task definition the view holds, by revision and by group.
struct LogCatalog {
  struct Revision {
    std::map<std::string, AwslogsTarget> containers;  // container name -> target (awslogs containers only)
    EpochMs registered_at = 0;
  };
  struct Family {
    std::shared_ptr<const TaskDefinitionFamily> seen;  // what it was built from (kept alive: compared by address)
    std::map<int, Revision> revisions;                 // only revisions with an awslogs container
  };
  std::map<std::string, Family> families;
  // group -> the task definition ARNs ("...:task-definition/family:revision") whose containers log there
  std::map<std::string, std::set<std::string>> groups;
  std::map<std::string, EpochMs> group_created;  // group -> its oldest revision's registeredAt

  const Revision* Find(const std::string& family, int revision) const;
};

class LogIndex {
 public:
  // Catalog: the catalog of `view`'s task definitions (the last one when they did not change).
  std::shared_ptr<const LogCatalog> Catalog(const ReadView& view) const;

 private:
  mutable std::mutex mu_;
  mutable std::shared_ptr<const LogCatalog> last_;  // guarded by mu_
};

// GroupExists: the group exists in `view` (the rule above).
bool GroupExists(const ReadView& view, const LogCatalog& catalog, const std::string& group);
// GroupStreams: the streams of `group`, sorted by name (none for a group that does not exist). `visited` (if
// given) counts the tasks it looked at.
std::vector<StreamRef> GroupStreams(const ReadView& view, const LogCatalog& catalog, const std::string& group,
                                    size_t* visited = nullptr);
// FindStream: the stream `name` of `group` (nullopt: there is none), without listing the group.
std::optional<StreamRef> FindStream(const ReadView& view, const LogCatalog& catalog, const std::string& group,
                                    const std::string& name);

// GroupInfo: one log group as DescribeLogGroups lists it.
struct GroupInfo {
  EpochMs created_at = 0;
  std::string region, account;
};
// AllGroups: every group that exists, by name.
std::map<std::string, GroupInfo> AllGroups(const ReadView& view, const LogCatalog& catalog);

// ArnPart: the n-th ':' field of an ARN ("" when it has fewer).
std::string ArnPart(const std::string& arn, int n);

}  // namespace gpupack::api
