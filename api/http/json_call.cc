#include "api/http/json_call.h"

#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace gpupack::api {

using Json = nlohmann::json;

std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string id = "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx";
  uint64_t a = rng(), b = rng();
  int n = 0;
  for (auto& c : id) {
    if (c != 'x' && c != 'y') continue;
    uint64_t v = (n < 16 ? a >> (n * 4) : b >> ((n - 16) * 4)) & 15;
    if (c == 'y') v = 8 | (v & 3);
    c = kHex[v];
    ++n;
  }
  return id;
}

HttpResponse JsonResponse(int status, std::string body, const std::string& request_id) {
  HttpResponse r;
  r.status = status;
  r.headers = {{"Content-Type", "application/x-amz-json-1.1"}, {"x-amzn-RequestId", request_id}};
  r.body = std::move(body);
  return r;
}

HttpResponse ErrorResponse(const Status& s, const std::string& request_id) {
  HttpResponse r = JsonResponse(ToEcsError(s.code()).http_status, ErrorBody(s), request_id);
  r.headers.emplace_back("x-amzn-ErrorType", ToEcsError(s.code()).type);
  return r;
}

Result<Json> ParseJsonBody(const std::string& body, int max_depth) {
  if (body.empty()) return Json::object();  // the SDK sends "{}" but curl users may send nothing
  bool too_deep = false;
  std::string duplicate;
  std::vector<std::set<std::string>> keys;  // the keys seen so far in each open object
  Json::parser_callback_t cb = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > max_depth) too_deep = true;
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == Json::parse_event_t::key && !keys.empty() && parsed.is_string() &&
        !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return !too_deep;
  };
  Json j;
  try {
    j = Json::parse(body, cb, /*allow_exceptions=*/true);
  } catch (const Json::exception& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
    if (size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    return Status::Client("request body is not valid JSON: " + what.substr(0, 300));
  }
  if (too_deep) return Status::Client("request body nests deeper than " + std::to_string(max_depth) + " levels");
  if (!duplicate.empty()) return Status::Client("request body names the key '" + duplicate.substr(0, 100) + "' twice");
  if (j.is_discarded()) return Status(ErrorCode::kClient, "request body is not valid JSON");
  return j;
}

}  // namespace gpupack::api
