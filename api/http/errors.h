// The one place where a Status becomes an error of the JSON APIs: its __type name and HTTP status. Every front end
// (ECS, CloudWatch Logs, the console) answers its errors through it.
#pragma once

#include <string>

#include "base/status.h"

namespace gpupack::api {

struct EcsError {
  int http_status;
  const char* type;            // "ClientException", ...
  const char* code = nullptr;  // gpupack's "code" beside __type, where __type alone does not tell the case
};

EcsError ToEcsError(ErrorCode code);

// The CloudWatch Logs errors that have no ECS code (api/logs/); its other errors are ECS's
// (InvalidParameterException, UnknownOperationException).
inline constexpr EcsError kLogsResourceNotFound = {400, "ResourceNotFoundException"};
inline constexpr EcsError kLogsServiceUnavailable = {503, "ServiceUnavailableException"};

// The JSON body {"__type": "...", "message": "..."} for a non-ok status, or for `error` and `message` (with
// "code" when the EcsError has one).
std::string ErrorBody(const Status& status);
std::string ErrorBody(const EcsError& error, const std::string& message);

}  // namespace gpupack::api
