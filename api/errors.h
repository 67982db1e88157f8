// The one place where a Status becomes an ECS error: its __type name and HTTP status.
#pragma once

#include <string>

#include "base/status.h"

namespace gpupack::api {

struct EcsError {
  int http_status;
  const char* type;           // "ClientException", ...
  const char* code = nullptr;  // gpupack's "code" beside __type, where __type alone does not tell the case
};

EcsError ToEcsError(ErrorCode code);

// The JSON body {"__type": "...", "message": "..."} for a non-ok status (with "code" when EcsError has one).
std::string ErrorBody(const Status& status);

}  // namespace gpupack::api
