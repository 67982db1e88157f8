#include "api/ecs/router.h"

#include <map>
#include <memory>

#include "api/ecs/render.h"
#include "engine/operations/operations.h"

namespace gpupack::api {

namespace {

struct Route {
  Access access;
  std::function<void(Applier&, const Json&, Router::Done, const Caller&)> run;
};

// Guarded runs a read; a bug that throws answers ServerException instead of ending the process (writes are
// guarded the same way inside the applier).
template <typename F>
Status Guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Status::Server(std::string("internal error: ") + e.what());
  }
}

template <typename Req>
using Parser = Result<Req> (*)(const Json&);

template <typename Req>
Result<Req> GuardedParse(Parser<Req> parse, const Json& body) {
  try {
    return parse(body);
  } catch (const std::exception& e) {
    return Status::Server(std::string("internal error: ") + e.what());
  }
}

// WithPolicy: the server's placement policy goes into the requests that place (never from the body).
template <typename Req>
void WithPolicy(Req& req, const Applier& applier) {
  if constexpr (requires { req.policy = applier.placement(); }) req.policy = applier.placement();
}

// WithCaller: the calling agent key (and the host it is bound to) go into the requests an agent makes (never
// from the body).
template <typename Req>
void WithCaller(Req& req, const Caller& caller) {
  if constexpr (requires { req.agent_key = caller.agent_key; }) req.agent_key = caller.agent_key;
  if constexpr (requires { req.agent_host = caller.agent_host; }) req.agent_host = caller.agent_host;
}

// WriteRoute: parse, then run the operation in the applier; render once the commit is durable.
template <typename Req, typename Res>
Route WriteRoute(Parser<Req> parse, Status (*op)(const Req&, Transaction&, Res&)) {
  static_assert(Req::kAccess == Access::kWrite, "a write operation takes a write request");
  return {Access::kWrite, [parse, op](Applier& applier, const Json& body, Router::Done done, const Caller& caller) {
            auto req = GuardedParse(parse, body);
            if (!req.ok()) return done({req.status(), {}});
            auto request = std::make_shared<Req>(std::move(req).value());
            WithPolicy(*request, applier);
            WithCaller(*request, caller);
            auto result = std::make_shared<Res>();
            applier.Write([request, result, op](Transaction& txn) { return op(*request, txn, *result); },
                          [&applier, result, done = std::move(done)](Status s) {
                            done({s, s.ok() ? Render(applier.arn(), *result) : Json()});
                          });
          }};
}

// ReadRoute: parse, then answer from the last published read view.
template <typename Req, typename Res>
Route ReadRoute(Parser<Req> parse, Status (*op)(const Req&, const ReadContext&, Res&)) {
  static_assert(Req::kAccess == Access::kRead, "a read operation takes a read request");
  return {Access::kRead, [parse, op](Applier& applier, const Json& body, Router::Done done, const Caller&) {
            auto req = GuardedParse(parse, body);
            if (!req.ok()) return done({req.status(), {}});
            std::shared_ptr<const ReadView> view = applier.View();
            Res result;
            Status s = Guarded([&] { return op(*req, ReadContext{*view, applier.arn()}, result); });
            done({s, s.ok() ? Render(applier.arn(), result) : Json()});
          }};
}

// ExplainRoute: the placement dry run reads the applier's working state (the placer needs a ClusterState), on
// the writer thread between two writes; the caller's thread only queues it.
Route ExplainRoute() {
  return {Access::kRead, [](Applier& applier, const Json& body, Router::Done done, const Caller&) {
            auto req = GuardedParse<ExplainPlacementRequest>(&ParseExplainPlacement, body);
            if (!req.ok()) return done({req.status(), {}});
            auto request = std::make_shared<ExplainPlacementRequest>(std::move(req).value());
            WithPolicy(*request, applier);
            applier.Read([&applier, request, done = std::move(done)](const ClusterState& state) {
              ExplainResult result;
              Status s = Guarded([&] { return ExplainPlacement(*request, state, applier.arn(), result); });
              done({s, s.ok() ? Render(applier.arn(), result) : Json()});
            });
          }};
}

const std::map<std::string, Route>& Routes() {
  static const std::map<std::string, Route> kRoutes = {
      {"CreateCluster", WriteRoute(&ParseCreateCluster, &CreateCluster)},
      {"DeleteCluster", WriteRoute(&ParseDeleteCluster, &DeleteCluster)},
      {"UpdateClusterSettings", WriteRoute(&ParseUpdateClusterSettings, &UpdateClusterSettings)},
      {"DescribeClusters", ReadRoute(&ParseDescribeClusters, &DescribeClusters)},
      {"ListClusters", ReadRoute(&ParseListClusters, &ListClusters)},
      {"RegisterTaskDefinition", WriteRoute(&ParseRegisterTaskDefinitionRequest, &RegisterTaskDefinition)},
      {"DeregisterTaskDefinition", WriteRoute(&ParseDeregisterTaskDefinition, &DeregisterTaskDefinition)},
      {"DescribeTaskDefinition", ReadRoute(&ParseDescribeTaskDefinition, &DescribeTaskDefinition)},
      {"ListTaskDefinitions", ReadRoute(&ParseListTaskDefinitions, &ListTaskDefinitions)},
      {"ListTaskDefinitionFamilies", ReadRoute(&ParseListTaskDefinitionFamilies, &ListTaskDefinitionFamilies)},
      {"RunTask", WriteRoute(&ParseRunTask, &RunTask)},
      {"StartTask", WriteRoute(&ParseStartTask, &StartTask)},
      {"StopTask", WriteRoute(&ParseStopTask, &StopTask)},
      {"DescribeTasks", ReadRoute(&ParseDescribeTasks, &DescribeTasks)},
      {"ListTasks", ReadRoute(&ParseListTasks, &ListTasks)},
      {"RegisterContainerInstance", WriteRoute(&ParseRegisterContainerInstance, &RegisterContainerInstance)},
      {"DeregisterContainerInstance", WriteRoute(&ParseDeregisterContainerInstance, &DeregisterContainerInstance)},
      {"DescribeContainerInstances", ReadRoute(&ParseDescribeContainerInstances, &DescribeContainerInstances)},
      {"ListContainerInstances", ReadRoute(&ParseListContainerInstances, &ListContainerInstances)},
      {"UpdateContainerInstancesState",
       WriteRoute(&ParseUpdateContainerInstancesState, &UpdateContainerInstancesState)},
      {"PutAttributes", WriteRoute(&ParsePutAttributes, &PutAttributes)},
      {"DeleteAttributes", WriteRoute(&ParseDeleteAttributes, &DeleteAttributes)},
      {"ListAttributes", ReadRoute(&ParseListAttributes, &ListAttributes)},
      {"SubmitTaskStateChange", WriteRoute(&ParseSubmitTaskStateChange, &SubmitTaskStateChange)},
      {"SubmitContainerStateChange", WriteRoute(&ParseSubmitContainerStateChange, &SubmitContainerStateChange)},
      {"CreateService", WriteRoute(&ParseCreateService, &CreateService)},
      {"UpdateService", WriteRoute(&ParseUpdateService, &UpdateService)},
      {"DeleteService", WriteRoute(&ParseDeleteService, &DeleteService)},
      {"DescribeServices", ReadRoute(&ParseDescribeServices, &DescribeServices)},
      {"ListServices", ReadRoute(&ParseListServices, &ListServices)},
      {"CreateCapacityProvider", WriteRoute(&ParseCreateCapacityProvider, &CreateCapacityProvider)},
      {"UpdateCapacityProvider", WriteRoute(&ParseUpdateCapacityProvider, &UpdateCapacityProvider)},
      {"DeleteCapacityProvider", WriteRoute(&ParseDeleteCapacityProvider, &DeleteCapacityProvider)},
      {"DescribeCapacityProviders", ReadRoute(&ParseDescribeCapacityProviders, &DescribeCapacityProviders)},
      {"PutClusterCapacityProviders", WriteRoute(&ParsePutClusterCapacityProviders, &PutClusterCapacityProviders)},
      {"ExplainPlacement", ExplainRoute()},
  };
  return kRoutes;
}

// UnservedEcsOperations: ECS operations (API version 2014-11-13) gpupack does not serve, with what they belong
// to, so a client hears that the feature is missing rather than that it misspelled an operation.
const std::map<std::string, std::string>& UnservedEcsOperations() {
  static const std::map<std::string, std::string> kUnserved = [] {
    std::map<std::string, std::string> m;
    for (const char* op : {"ListServicesByNamespace", "UpdateServicePrimaryTaskSet", "CreateTaskSet",
                           "DeleteTaskSet", "DescribeTaskSets", "UpdateTaskSet", "DescribeServiceDeployments",
                           "DescribeServiceRevisions", "ListServiceDeployments", "StopServiceDeployment"})
      m[op] = "task sets, service revisions and Service Connect namespaces";
    for (const char* op : {"TagResource", "UntagResource", "ListTagsForResource"}) m[op] = "the tagging operations";
    for (const char* op : {"PutAccountSetting", "PutAccountSettingDefault", "DeleteAccountSetting",
                           "ListAccountSettings"})
      m[op] = "account settings";
    for (const char* op : {"GetTaskProtection", "UpdateTaskProtection"}) m[op] = "task scale-in protection";
    m["ExecuteCommand"] = "ECS Exec";
    m["UpdateCluster"] = "UpdateCluster (use UpdateClusterSettings)";
    m["UpdateContainerAgent"] = "agent updates through the API";
    m["DeleteTaskDefinitions"] = "deleting task definitions";
    m["DiscoverPollEndpoint"] = "the ECS agent's poll endpoint (gpupack agents use their own channel)";
    m["SubmitAttachmentStateChanges"] = "attachments";
    return m;
  }();
  return kUnserved;
}

}  // namespace

Status Router::NotServed(const std::string& operation) {
  const std::string name = operation.substr(0, 100);
  auto it = UnservedEcsOperations().find(operation);
  if (it != UnservedEcsOperations().end())
    return Status::Unsupported(name + " is not supported: gpupack does not support " + it->second +
                               "; the ECS operations it serves are listed in docs/api.md (Operations)");
  return Status(ErrorCode::kUnknownOperation, "unknown operation '" + name +
                                                  "': the ECS operations gpupack serves are listed in docs/api.md "
                                                  "(Operations)");
}

bool Router::Knows(const std::string& operation) { return Routes().count(operation) != 0; }

std::optional<Access> Router::AccessOf(const std::string& operation) {
  auto it = Routes().find(operation);
  if (it == Routes().end()) return std::nullopt;
  return it->second.access;
}

void Router::Dispatch(const std::string& operation, const Json& body, Done done, const Caller& caller) const {
  auto it = Routes().find(operation);
  if (it == Routes().end()) {
    done({NotServed(operation), {}});
    return;
  }
  if (!body.is_object()) {
    done({Status::Client("request body must be a JSON object"), {}});
    return;
  }
  it->second.run(applier_, body, std::move(done), caller);
}

}  // namespace gpupack::api
