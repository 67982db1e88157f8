// LogsDialect: how the CloudWatch Logs front end (logs_handler.cc) words what base's JSON field reader
// (base/json_fields.h) finds in a request, every problem an InvalidParameterException: "1 validation error
// detected: logGroupName is required", "the request body must be a JSON object", "limit must be an integer from 1
// to 10000", and the ECS codec's words for a value of the wrong type ("nextToken: expected a string, got a
// number"). A null member is absent; integers are integers only (3.0 is not one).
#pragma once

#include "base/json_fields.h"

namespace gpupack::api {

// LogsDialect: the one CloudWatch Logs dialect (immutable, shared by every thread).
const JsonDialect& LogsDialect();

}  // namespace gpupack::api
