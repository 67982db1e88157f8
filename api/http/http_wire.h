// http_wire: the small pieces of HTTP text that the HttpServer writes on its own (error bodies, request ids,
// dates) and the header checks it applies to handlers' responses. Plain C++, no Beast or Asio, so the files
// of the server that use them stay quick to compile. Internal to the api library (namespace http_internal).
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/http/http_server.h"

namespace gpupack::api::http_internal {

// JsonEscape escapes `s` for a JSON string literal (enough for the server's own short error messages).
std::string JsonEscape(std::string_view s);

// NewRequestId is a random UUID (v4) for the answers the server gives by itself (413, 431, 400, 503): every
// response carries x-amzn-RequestId, and the AWS SDKs report it as $metadata.requestId.
std::string NewRequestId();

// ErrorResponse is an ECS-shaped error: {"__type": "<type>", "message": "<message>"}, with the Content-Type,
// x-amzn-RequestId and x-amzn-ErrorType headers the ECS handler's errors carry. `fields` are string members put
// between __type and message (first, so a body cut short still holds them).
HttpResponse ErrorResponse(int status, std::string_view type, std::string_view message,
                           const std::vector<std::pair<std::string, std::string>>& fields = {});

// HttpDate formats `t` as an IMF-fixdate (RFC 9110 §5.6.7), e.g. "Sun, 06 Nov 1994 08:49:37 GMT",
// independent of the C locale.
std::string HttpDate(std::time_t t);

// IEquals compares ASCII case-insensitively.
bool IEquals(std::string_view a, std::string_view b);

// ValidHeaderName: an RFC 9110 token.
bool ValidHeaderName(std::string_view name);

// ValidHeaderValue: no CR, LF or NUL (header injection), no other control characters except HTAB.
bool ValidHeaderValue(std::string_view value);

// HostPortString is "host:port", with an IPv6 host in brackets ("[::1]:8080").
std::string HostPortString(const std::string& host, uint16_t port);

}  // namespace gpupack::api::http_internal
