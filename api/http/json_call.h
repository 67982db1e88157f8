// JSON 1.1 calls over HTTP, as the ECS and CloudWatch Logs front ends answer them: the request id, the JSON
// response with x-amzn-RequestId, the error response (its __type and HTTP status from api/http/errors.h) and
// the request body parsed under a nesting limit, refusing duplicate keys.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "api/http/errors.h"
#include "api/http/http_server.h"
#include "base/status.h"

namespace gpupack::api {

// NewRequestId: a random UUID (version 4), the x-amzn-RequestId of one request.
std::string NewRequestId();

// JsonResponse: `status` with `body` as application/x-amz-json-1.1 and x-amzn-RequestId.
HttpResponse JsonResponse(int status, std::string body, const std::string& request_id);

// ErrorResponse: the error's HTTP status and {"__type", "message"} body, with x-amzn-ErrorType.
HttpResponse ErrorResponse(const Status& s, const std::string& request_id);

// ParseJsonBody parses a request body (empty: {}), refusing nesting deeper than `max_depth` (before any deep
// structure is built) and objects that name a key twice (which value wins is a parser's choice; a body that
// means two things is refused). Errors are ClientException.
Result<nlohmann::json> ParseJsonBody(const std::string& body, int max_depth);

}  // namespace gpupack::api
