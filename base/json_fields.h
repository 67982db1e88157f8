// JsonFields: the one reader of JSON object members for every parser of ours (the agent channel's messages, the
// stores' documents, the ECS and CloudWatch Logs requests, the planner's inputs). Each read checks the member's
// type and bounds and names it by its path in an error; the words of the error are the caller's: a JsonDialect
// says how a missing member, a value of the wrong type and the caller's own failures read, and which Status
// they are. So one reader serves "hello.id must be an integer" (the channel), "cpu: expected an integer, got a
// string" (ECS) and "field 'gpus[1].id': expected string, got number" (the store) alike.
//
// A JsonFields is one parser's state on one object: not thread-safe, used on the stack of one call. It keeps
// the first error: after one, every read is a no-op, so a parser reads all its fields and checks status() once.
// A JsonDialect is immutable and shared (usually one static per caller).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace gpupack {

// JsonPath: where a value sits in a document, e.g. "hello.tasks[3]" or "gpus[1].total_memory_mib". A member or
// element path points at its parent's JsonPath (which must outlive it) and is rendered only when an error names
// it, so reading a document builds no strings. The document itself, unnamed, renders as "".
class JsonPath {
 public:
  JsonPath() = default;
  explicit JsonPath(std::string root) : root_(std::move(root)) {}      // a named root, e.g. "hello"
  JsonPath(const JsonPath& parent, const char* key) : parent_(&parent), key_(key) {}  // parent.key
  JsonPath(const JsonPath& parent, size_t index) : parent_(&parent), index_(index) {}  // parent[index]

  // str: the path; a member of an unnamed root is its key alone ("arn", not ".arn").
  std::string str() const;
  // parent: the enclosing path, or null for a root. key: the member's key, or null for a root or an element.
  const JsonPath* parent() const { return parent_; }
  const char* key() const { return key_; }

 private:
  void Append(std::string& out) const;

  const JsonPath* parent_ = nullptr;
  const char* key_ = nullptr;  // a member, or
  size_t index_ = 0;           // an element when key_ is null (and parent_ is not)
  std::string root_;           // a root's name
};

// JsonWant: what a read expected of a value; kAny for a required member that is missing.
enum class JsonWant { kAny, kObject, kArray, kString, kInteger, kBoolean, kStringArray };

// JsonError: one problem the reader found, for the dialect to word.
struct JsonError {
  const JsonPath& path;             // the member or element at fault (a missing member: where it should be)
  JsonWant want;                    // what was expected there
  const nlohmann::json* got;        // the value found; null when the member is missing (want is kAny)
  int64_t lo = 0, hi = 0;           // kInteger: the bounds (got is not an integer in [lo, hi])
  size_t max_size = 0;              // kArray, kStringArray: the most elements (got is an array longer than that)
  const JsonPath* array = nullptr;  // an element of a kStringArray that is not a string: the array's path
};

// JsonDialect: how one caller words its errors and reads null and numbers.
class JsonDialect {
 public:
  virtual ~JsonDialect() = default;
  // Invalid: the Status for the caller's own failure `what` at `path` (JsonFields::Fail).
  virtual Status Invalid(const std::string& path, const std::string& what) const = 0;
  // Error: the Status for a problem the reader found (a missing member, a wrong type, out of bounds).
  virtual Status Error(const JsonError& e) const = 0;
  // NullIsAbsent: a member that is null reads as absent (else it is a value of the wrong type).
  virtual bool NullIsAbsent() const { return false; }
  // IntegralFloats: a number such as 3.0 reads as the integer 3 (within the bounds).
  virtual bool IntegralFloats() const { return false; }
};

// JsonFields reads the members of one JSON object and keeps the first error. The object and the dialect must
// outlive it. A value that is not an object is an error (JsonWant::kObject at `path`).
class JsonFields {
 public:
  static constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  static constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
  static constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  static constexpr size_t kNoMax = std::numeric_limits<size_t>::max();

  JsonFields(const nlohmann::json& j, JsonPath path, const JsonDialect& dialect);
  JsonFields(const JsonFields&) = delete;  // member paths point at path_
  JsonFields& operator=(const JsonFields&) = delete;

  const Status& status() const { return error_; }
  bool ok() const { return error_.ok(); }
  const JsonPath& path() const { return path_; }
  const JsonDialect& dialect() const { return dialect_; }
  const nlohmann::json& object() const { return j_; }
  // Path: the rendered path of member `key`.
  std::string Path(std::string_view key) const;

  // Fail keeps the caller's own failure `what` at `path` (a rendered path), worded by the dialect's Invalid.
  void Fail(const std::string& path, const std::string& what);
  // Take keeps `s` when it is the first error (a nested object's, an element's).
  void Take(const Status& s);
  // Report keeps the dialect's wording of `e` when it is the first error.
  void Report(const JsonError& e);

  // Get: the member, or null when absent (an error first when required) or after an error.
  const nlohmann::json* Get(const char* key, bool required = false);

  // Member reads: an absent member leaves `out` as it is (or is an error when required).
  void String(const char* key, std::string& out, bool required = false);
  void String(const char* key, std::optional<std::string>& out);
  void Bool(const char* key, bool& out, bool required = false);
  void Bool(const char* key, std::optional<bool>& out);
  void Int64(const char* key, int64_t& out, bool required = false, int64_t lo = kInt64Min, int64_t hi = kInt64Max);
  void Int64(const char* key, std::optional<int64_t>& out, int64_t lo = kInt64Min, int64_t hi = kInt64Max);
  void Int(const char* key, int& out, bool required = false);
  void Int(const char* key, std::optional<int>& out);
  // Strings: an array of strings of at most `max` elements (replaces `out`).
  void Strings(const char* key, std::vector<std::string>& out, size_t max = kNoMax);

  // Value reads, for a value at `at` that is not a member of this object (an array's element, a document's root):
  // false, with the error kept, when the value is not what was wanted.
  bool StringValue(const nlohmann::json& v, const JsonPath& at, std::string& out);
  bool BoolValue(const nlohmann::json& v, const JsonPath& at, bool& out);
  bool Int64Value(const nlohmann::json& v, const JsonPath& at, int64_t& out, int64_t lo = kInt64Min,
                  int64_t hi = kInt64Max);
  bool IntValue(const nlohmann::json& v, const JsonPath& at, int& out);
  // ArrayValue: `v` is an array of at most `max` elements.
  bool ArrayValue(const nlohmann::json& v, const JsonPath& at, size_t max = kNoMax);

  // Array calls `each(element, path)` for every element of an array member, while no error is kept, and keeps
  // the Status it returns. `path` is a const JsonPath& or, for callers that name paths as strings, the rendered
  // std::string.
  template <typename Each>
  void Array(const char* key, bool required, Each each, size_t max = kNoMax) {
    const nlohmann::json* v = Get(key, required);
    if (v == nullptr) return;
    const JsonPath at(path_, key);
    if (!ArrayValue(*v, at, max)) return;
    for (size_t i = 0; i < v->size() && ok(); ++i) {
      const JsonPath element(at, i);
      if constexpr (std::is_invocable_v<Each, const nlohmann::json&, const JsonPath&>) {
        Take(each((*v)[i], element));
      } else {
        Take(each((*v)[i], element.str()));
      }
    }
  }

 private:
  const nlohmann::json& j_;
  JsonPath path_;
  const JsonDialect& dialect_;
  Status error_;
};

// JsonTypeName: the value's JSON type in words for messages: "null", "a boolean", "a string", "a list",
// "an object", "a number with a fraction" or "a number" (ECS's words; a dialect may use its own).
const char* JsonTypeName(const nlohmann::json& v);

}  // namespace gpupack
