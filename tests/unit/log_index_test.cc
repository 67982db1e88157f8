// LogIndex: log groups and streams found from the task definitions and the clusters' task orders, never by a
// walk of every task (a group that does not exist looks at no task).
#include "api/logs/log_index.h"

#include <gtest/gtest.h>

namespace gpupack::api {
namespace {

const std::string kPrefix = "arn:aws:ecs:us-east-1:000000000000:";

ContainerDefinition ContainerDef(const std::string& name, const std::string& extra_json = "") {
  ContainerDefinition c;
  c.name = name;
  c.extra_json = extra_json;
  return c;
}

// ViewWith: a view of a cluster "default" holding `tasks` tasks of web:1, whose "app" container logs to awslogs
// group /ecs/web (prefix "ecs") and whose "side" container to the cluster's own group; and a cluster "idle" with
// no task.
std::shared_ptr<const ReadView> ViewWith(int tasks) {
  ClusterState state;
  for (const char* name : {"default", "idle"}) {
    Cluster c;
    c.name = name;
    c.arn = kPrefix + "cluster/" + name;
    c.created_at = 1000;
    state.PutCluster(c);
  }
  TaskDefinition td;
  td.family = "web";
  td.revision = 1;
  td.arn = kPrefix + "task-definition/web:1";
  td.registered_at = 2000;
  td.containers.push_back(ContainerDef(
      "app", R"({"logConfiguration":{"logDriver":"awslogs","options":{"awslogs-group":"/ecs/web",)"
             R"("awslogs-stream-prefix":"ecs"}}})"));
  td.containers.push_back(ContainerDef("side"));
  state.PutTaskDefinition(td);
  for (int i = 0; i < tasks; ++i) {
    Task t;
    t.id = "t" + std::to_string(1000 + i);
    t.arn = kPrefix + "task/default/" + t.id;
    t.cluster = "default";
    t.task_definition_arn = td.arn;
    t.created_at = 3000 + i;
    t.container_instance_arn = kPrefix + "container-instance/default/i1";
    t.resources_released = true;
    for (const char* c : {"app", "side"}) {
      Container container;
      container.name = c;
      t.containers.push_back(container);
    }
    state.PutTask(t);
  }
  return ReadView::FromState(state);
}

TEST(LogIndexTest, AGroupThatDoesNotExistIsAnsweredWithoutLookingAtATask) {
  const auto view = ViewWith(300);
  LogIndex index;
  const auto catalog = index.Catalog(*view);

  size_t visited = 0;
  EXPECT_FALSE(GroupExists(*view, *catalog, "/nope"));
  EXPECT_TRUE(GroupStreams(*view, *catalog, "/nope", &visited).empty());
  EXPECT_EQ(visited, 0u) << "a group no task definition names and no cluster owns must not read any task";
  EXPECT_FALSE(GroupExists(*view, *catalog, "/gpupack/none"));
  EXPECT_TRUE(GroupStreams(*view, *catalog, "/gpupack/none", &visited).empty());
  EXPECT_EQ(visited, 0u);
  // A cluster's group with no task reads only that cluster's (none).
  EXPECT_TRUE(GroupExists(*view, *catalog, "/gpupack/idle"));
  EXPECT_TRUE(GroupStreams(*view, *catalog, "/gpupack/idle", &visited).empty());
  EXPECT_EQ(visited, 0u);

  // The awslogs group holds each task's "app" stream, the cluster's group each "side" stream, sorted by name.
  const std::vector<StreamRef> web = GroupStreams(*view, *catalog, "/ecs/web");
  ASSERT_EQ(web.size(), 300u);
  EXPECT_EQ(web.front().name, "ecs/app/t1000");
  EXPECT_EQ(web.back().name, "ecs/app/t1299");
  EXPECT_EQ(web.front().arn, "arn:aws:logs:us-east-1:000000000000:log-group:/ecs/web:log-stream:ecs/app/t1000");
  const std::vector<StreamRef> own = GroupStreams(*view, *catalog, "/gpupack/default");
  ASSERT_EQ(own.size(), 300u);
  EXPECT_EQ(own.front().name, "side/t1000");

  // A stream named in full is found by its task id alone; a name of another group's stream is not.
  auto s = FindStream(*view, *catalog, "/ecs/web", "ecs/app/t1005");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->task_arn, kPrefix + "task/default/t1005");
  EXPECT_EQ(s->container, "app");
  EXPECT_FALSE(FindStream(*view, *catalog, "/ecs/web", "side/t1005").has_value());
  EXPECT_FALSE(FindStream(*view, *catalog, "/ecs/web", "ecs/app/t9999").has_value());
  EXPECT_TRUE(FindStream(*view, *catalog, "/gpupack/default", "side/t1005").has_value());

  const auto groups = AllGroups(*view, *catalog);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups.at("/ecs/web").created_at, 2000);  // its oldest revision's registration
  EXPECT_EQ(groups.at("/gpupack/idle").created_at, 1000);
  EXPECT_EQ(groups.at("/ecs/web").region, "us-east-1");
}

TEST(LogIndexTest, TheCatalogIsReadAgainOnlyWhenTaskDefinitionsChange) {
  const auto v0 = ViewWith(3);
  LogIndex index;
  const auto c0 = index.Catalog(*v0);
  EXPECT_EQ(index.Catalog(*v0), c0) << "the same definitions: the same catalog";

  ViewDelta delta;  // a new revision that logs to another group
  auto td = std::make_shared<TaskDefinition>(*v0->FindTaskDefinition("web", 1));
  td->revision = 2;
  td->arn = kPrefix + "task-definition/web:2";
  td->containers[0].extra_json = R"({"logConfiguration":{"logDriver":"awslogs","options":{"awslogs-group":"/ecs/v2"}}})";
  delta.task_definitions.push_back(td);
  const auto v1 = ReadView::Apply(*v0, delta);
  const auto c1 = index.Catalog(*v1);
  EXPECT_NE(c1, c0);
  EXPECT_TRUE(GroupExists(*v1, *c1, "/ecs/v2"));
  EXPECT_TRUE(GroupExists(*v1, *c1, "/ecs/web"));
  EXPECT_TRUE(GroupStreams(*v1, *c1, "/ecs/v2").empty());  // no task of web:2 yet
}

}  // namespace
}  // namespace gpupack::api
