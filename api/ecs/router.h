// Router: X-Amz-Target operation name -> parser, operation and renderer.
//
// Each route parses the JSON body into the operation's typed request (api/ecs/parse.h), runs it in the engine
// (engine/operations/), and renders its typed result (api/ecs/render.h). A request type whose kAccess is kWrite
// goes through the applier (serialized, answered once durable); a read runs at once on the last published read
// view, on the caller's thread.
// Thread-safe: Dispatch may be called from any thread.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "api/ecs/parse.h"
#include "engine/applier.h"
#include "engine/control_plane.h"
#include "engine/core/requests.h"

namespace gpupack::api {

struct OperationResult {
  Status status;
  Json body;  // the response document when status is ok
};

class Router {
 public:
  using Done = std::function<void(OperationResult)>;

  explicit Router(Applier& applier) : applier_(applier) {}

  // Dispatch runs one ECS operation (the part of X-Amz-Target after the dot) for `caller` (the calling key when
  // it has the agent role, see Caller). `done` is called exactly once, possibly on the committer's thread.
  void Dispatch(const std::string& operation, const Json& body, Done done, const Caller& caller = {}) const;

  // Knows: is this an operation we serve? AccessOf: does it write (nullopt when unknown)?
  static bool Knows(const std::string& operation);
  // NotServed: the refusal of an operation we do not serve: UnsupportedFeatureException naming it for an ECS
  // operation gpupack leaves out (services, capacity providers, tagging, ...), UnknownOperationException for
  // any other name; both point to the list in docs/api.md.
  static Status NotServed(const std::string& operation);
  static std::optional<Access> AccessOf(const std::string& operation);

 private:
  Applier& applier_;
};

// Execute runs one ECS operation through a Router over the control plane's applier (see Router::Dispatch): the
// entry point of the console, the tests and the fuzz targets.
inline void Execute(ControlPlane& control_plane, const std::string& operation, const Json& body, Router::Done done,
                    const Caller& caller = {}) {
  Router(control_plane.applier()).Dispatch(operation, body, std::move(done), caller);
}

}  // namespace gpupack::api
