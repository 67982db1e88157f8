#include "api/http/errors.h"

#include <nlohmann/json.hpp>

#include "protocol/messages.h"

namespace gpupack::api {

EcsError ToEcsError(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return {200, ""};
    case ErrorCode::kClient: return {400, "ClientException"};
    case ErrorCode::kInvalidParameter: return {400, "InvalidParameterException"};
    case ErrorCode::kClusterNotFound: return {400, "ClusterNotFoundException"};
    case ErrorCode::kServiceNotFound: return {400, "ServiceNotFoundException"};
    case ErrorCode::kServiceNotActive: return {400, "ServiceNotActiveException"};
    case ErrorCode::kConflict: return {400, "ConflictException"};
    case ErrorCode::kAccessDenied: return {400, "AccessDeniedException"};
    case ErrorCode::kLimitExceeded: return {400, "LimitExceededException"};
    case ErrorCode::kResourceInUse: return {400, "ResourceInUseException"};
    case ErrorCode::kUnsupportedFeature: return {400, "UnsupportedFeatureException"};
    case ErrorCode::kUnknownOperation: return {400, "UnknownOperationException"};
    case ErrorCode::kServer: return {500, "ServerException"};
    case ErrorCode::kInstanceDeregistered:
      return {400, "InvalidParameterException", protocol::kInstanceDeregisteredCode};
    case ErrorCode::kUnrecognizedClient: return {400, "UnrecognizedClientException"};
    case ErrorCode::kInvalidSignature: return {400, "InvalidSignatureException"};
    case ErrorCode::kIncompleteSignature: return {400, "IncompleteSignatureException"};
    case ErrorCode::kMissingAuthenticationToken: return {403, "MissingAuthenticationTokenException"};
  }
  return {500, "ServerException"};
}

std::string ErrorBody(const Status& status) { return ErrorBody(ToEcsError(status.code()), status.message()); }

std::string ErrorBody(const EcsError& error, const std::string& message) {
  nlohmann::json j = {{"__type", error.type}, {"message", message}};
  if (error.code != nullptr) j["code"] = error.code;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace gpupack::api
