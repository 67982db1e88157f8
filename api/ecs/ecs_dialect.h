// EcsDialect: how the ECS front end words what base's JSON field reader (base/json_fields.h) finds in a request:
// "<path>: expected a string, got a list", "cpu: integer out of range" (ClientException), and "<path> is
// required" for a required member that is missing (InvalidParameterException). A null member is absent and a
// number such as 3.0 reads as the integer 3. The codec (codec.cc) and the request parsers (parse.cc) read with it.
#pragma once

#include "base/json_fields.h"

namespace gpupack::api {

// EcsDialect: the one ECS dialect (immutable, shared by every thread).
const JsonDialect& EcsDialect();

}  // namespace gpupack::api
