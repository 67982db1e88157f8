// The one place where a Status becomes an ECS error: its __type name and HTTP status.
#pragma once

#include <string>

#include "base/status.h"

namespace gpupack::api {

struct EcsError {
  int http_status;
  const char* type;  // "ClientException", ...
};

EcsError ToEcsError(ErrorCode code);

// The JSON body {"__type": "...", "message": "..."} for a non-ok status.
std::string ErrorBody(const Status& status);

}  // namespace gpupack::api
