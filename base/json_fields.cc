#include "base/json_fields.h"

#include <cmath>
#include <utility>

namespace gpupack {

using nlohmann::json;

std::string JsonPath::str() const {
  std::string out;
  Append(out);
  return out;
}

void JsonPath::Append(std::string& out) const {
  if (parent_ == nullptr) {
    out += root_;
    return;
  }
  parent_->Append(out);
  if (key_ != nullptr) {
    if (!out.empty()) out += '.';
    out += key_;
  } else {
    out += '[';  // three appends, not "[" + ... + "]": GCC 12 at -O3 warns on that (-Wrestrict, a false positive)
    out += std::to_string(index_);
    out += ']';
  }
}

const char* JsonTypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "a list";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number with a fraction";
    default: return "a number";
  }
}

JsonFields::JsonFields(const json& j, JsonPath path, const JsonDialect& dialect)
    : j_(j), path_(std::move(path)), dialect_(dialect) {
  if (!j_.is_object()) Report({path_, JsonWant::kObject, &j_});
}

std::string JsonFields::Path(std::string_view key) const {
  std::string out = path_.str();
  if (!out.empty()) out += '.';
  out += key;
  return out;
}

void JsonFields::Fail(const std::string& path, const std::string& what) {
  if (error_.ok()) error_ = dialect_.Invalid(path, what);
}

void JsonFields::Take(const Status& s) {
  if (error_.ok() && !s.ok()) error_ = s;
}

void JsonFields::Report(const JsonError& e) {
  if (error_.ok()) error_ = dialect_.Error(e);
}

const json* JsonFields::Get(const char* key, bool required) {
  if (!error_.ok()) return nullptr;
  auto it = j_.find(key);
  if (it == j_.end() || (it->is_null() && dialect_.NullIsAbsent())) {
    if (required) {
      const JsonPath at(path_, key);
      Report({at, JsonWant::kAny, nullptr});
    }
    return nullptr;
  }
  return &*it;
}

// ---- value reads ------------------------------------------------------------------------------------------------

bool JsonFields::StringValue(const json& v, const JsonPath& at, std::string& out) {
  if (!v.is_string()) {
    Report({at, JsonWant::kString, &v});
    return false;
  }
  out = v.get_ref<const std::string&>();
  return true;
}

bool JsonFields::BoolValue(const json& v, const JsonPath& at, bool& out) {
  if (!v.is_boolean()) {
    Report({at, JsonWant::kBoolean, &v});
    return false;
  }
  out = v.get<bool>();
  return true;
}

bool JsonFields::Int64Value(const json& v, const JsonPath& at, int64_t& out, int64_t lo, int64_t hi) {
  std::optional<int64_t> n;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(kInt64Max)) n = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    n = v.get<int64_t>();
  } else if (v.is_number_float() && dialect_.IntegralFloats()) {
    const double d = v.get<double>();
    // Within [lo, hi] as a double first: a cast of 1e300 to int64_t is undefined.
    if (std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(lo) && d <= static_cast<double>(hi))
      n = static_cast<int64_t>(d);
  }
  if (!n || *n < lo || *n > hi) {
    Report({at, JsonWant::kInteger, &v, lo, hi});
    return false;
  }
  out = *n;
  return true;
}

bool JsonFields::IntValue(const json& v, const JsonPath& at, int& out) {
  int64_t n = 0;
  if (!Int64Value(v, at, n, kInt32Min, kInt32Max)) return false;
  out = static_cast<int>(n);
  return true;
}

bool JsonFields::ArrayValue(const json& v, const JsonPath& at, size_t max) {
  if (!v.is_array() || v.size() > max) {
    Report({at, JsonWant::kArray, &v, 0, 0, max});
    return false;
  }
  return true;
}

// ---- member reads -----------------------------------------------------------------------------------------------

void JsonFields::String(const char* key, std::string& out, bool required) {
  if (const json* v = Get(key, required)) StringValue(*v, JsonPath(path_, key), out);
}

void JsonFields::String(const char* key, std::optional<std::string>& out) {
  std::string s;
  if (const json* v = Get(key, false); v != nullptr && StringValue(*v, JsonPath(path_, key), s)) out = std::move(s);
}

void JsonFields::Bool(const char* key, bool& out, bool required) {
  if (const json* v = Get(key, required)) BoolValue(*v, JsonPath(path_, key), out);
}

void JsonFields::Bool(const char* key, std::optional<bool>& out) {
  bool b = false;
  if (const json* v = Get(key, false); v != nullptr && BoolValue(*v, JsonPath(path_, key), b)) out = b;
}

void JsonFields::Int64(const char* key, int64_t& out, bool required, int64_t lo, int64_t hi) {
  if (const json* v = Get(key, required)) Int64Value(*v, JsonPath(path_, key), out, lo, hi);
}

void JsonFields::Int64(const char* key, std::optional<int64_t>& out, int64_t lo, int64_t hi) {
  int64_t n = 0;
  if (const json* v = Get(key, false); v != nullptr && Int64Value(*v, JsonPath(path_, key), n, lo, hi)) out = n;
}

void JsonFields::Int(const char* key, int& out, bool required) {
  if (const json* v = Get(key, required)) IntValue(*v, JsonPath(path_, key), out);
}

void JsonFields::Int(const char* key, std::optional<int>& out) {
  int n = 0;
  if (const json* v = Get(key, false); v != nullptr && IntValue(*v, JsonPath(path_, key), n)) out = n;
}

void JsonFields::Strings(const char* key, std::vector<std::string>& out, size_t max) {
  const json* v = Get(key, false);
  if (v == nullptr) return;
  const JsonPath at(path_, key);
  if (!v->is_array() || v->size() > max) return Report({at, JsonWant::kStringArray, v, 0, 0, max});
  out.clear();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (!e.is_string()) {
      const JsonPath element(at, i);
      return Report({element, JsonWant::kString, &e, 0, 0, 0, &at});
    }
    out.push_back(e.get<std::string>());
  }
}

}  // namespace gpupack
