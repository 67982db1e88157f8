#include "api/ecs/parse_fields.h"

#include <algorithm>

namespace gpupack::api {

namespace {

constexpr size_t kMaxTags = 50;
constexpr size_t kMaxTagKey = 128;
constexpr size_t kMaxTagValue = 256;

}  // namespace

bool HasControlCharacter(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// CheckText: an optional free-text field of at most `max` characters without control characters.
Status CheckText(const std::optional<std::string>& v, const std::string& key, size_t max) {
  if (!v) return Status::Ok();
  if (v->size() > max)
    return Status::InvalidParameter(key + " can be at most " + std::to_string(max) + " characters long, got " +
                                    std::to_string(v->size()) + ".");
  if (HasControlCharacter(*v)) return Status::InvalidParameter(key + " must not contain control characters.");
  return Status::Ok();
}

// CheckTags: at most 50 tags per resource, keys 1-128 and values 0-256 characters; no control characters
// unless `control_ok` (task definitions, whose tags were stored with them before this rule; they are not part of
// DescribeTasks' answer).
Status CheckTags(const std::vector<KeyValuePair>& tags, bool control_ok) {
  if (tags.size() > kMaxTags)
    return Status::InvalidParameter("Tags can have at most " + std::to_string(kMaxTags) + " entries per resource, got " +
                                    std::to_string(tags.size()) + ".");
  for (const auto& t : tags) {
    if (t.name.empty() || t.name.size() > kMaxTagKey || (!control_ok && HasControlCharacter(t.name)))
      return Status::InvalidParameter("Tag keys must be 1-128 characters without control characters.");
    if (t.value.size() > kMaxTagValue || (!control_ok && HasControlCharacter(t.value)))
      return Status::InvalidParameter("Tag values must be at most 256 characters without control characters.");
  }
  return Status::Ok();
}

// RequireString: `key` is a string that is not empty ("KEY is required" when absent, null or "").
Status RequireString(Fields& f, const char* key, std::string& out) {
  f.String(key, out, /*required=*/true);
  if (f.ok() && out.empty()) f.Take(Status::InvalidParameter(std::string(key) + " is required"));
  return f.status();
}

// RequireRefs: `key` is required and names 1 to 100 resources (a Describe call).
Status RequireRefs(Fields& f, const char* key, const std::string& what, std::vector<std::string>& out) {
  GP_TRY(f.status());
  if (!f.object().contains(key)) return Status::InvalidParameter(std::string(key) + " is required");
  std::vector<std::string> refs = f.StringList(key);
  GP_TRY(f.status());
  if (refs.empty()) return Status::InvalidParameter(std::string(key) + " must name at least one " + what);
  if (refs.size() > kMaxDescribe) return Status::InvalidParameter(std::string(key) + " can have at most 100 entries");
  out = std::move(refs);
  return Status::Ok();
}

Status OptionalRef(Fields& f, const char* key, std::string& out) {
  f.String(key, out);
  return f.status();
}

// ParsePage: maxResults 1..100 (default 100) and a nextToken this server issued ("gp1.<hex offset>").
Result<PageRequest> ParsePage(Fields& f) {
  const auto max_results = f.Int32("maxResults");
  const auto token = f.Text("nextToken");
  GP_TRY(f.status());
  PageRequest page;
  if (max_results) {
    if (*max_results < 1 || *max_results > 100) return Status::InvalidParameter("maxResults must be between 1 and 100");
    page.limit = static_cast<size_t>(*max_results);
  }
  if (token && !token->empty()) {
    if (token->rfind("gp1.", 0) != 0 || token->size() > 20)
      return Status::InvalidParameter("nextToken is not a token this server issued");
    try {
      page.begin = std::stoull(token->substr(4), nullptr, 16);
    } catch (...) {
      return Status::InvalidParameter("nextToken is not a token this server issued");
    }
  }
  return page;
}

}  // namespace gpupack::api
