#include "protocol/fields.h"

#include <climits>
#include <limits>
#include <utility>

namespace gpupack::protocol::internal {

std::string Indexed(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

void CutReason(std::string& s) {
  if (s.size() <= kMaxReasonBytes) return;
  size_t n = kMaxReasonBytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
}

Fields::Fields(const Json& j, std::string path) : j_(j), path_(std::move(path)) {
  if (!j_.is_object()) error_ = Status::InvalidParameter(path_ + " must be an object");
}

void Fields::Fail(const std::string& field, const std::string& what) {
  if (error_.ok()) error_ = Status::InvalidParameter(field + " " + what);
}

void Fields::Take(const Status& s) {
  if (error_.ok() && !s.ok()) error_ = s;
}

const Json* Fields::Get(const char* key, bool required) {
  if (!error_.ok()) return nullptr;
  auto it = j_.find(key);
  if (it == j_.end()) {
    if (required) Fail(Path(key), "is required");
    return nullptr;
  }
  return &*it;
}

void Fields::String(const char* key, std::string& out, bool required) {
  const Json* v = Get(key, required);
  if (v == nullptr) return;
  if (!v->is_string()) return Fail(Path(key), "must be a string");
  out = v->get<std::string>();
}

void Fields::Bool(const char* key, bool& out) {
  const Json* v = Get(key, false);
  if (v == nullptr) return;
  if (!v->is_boolean()) return Fail(Path(key), "must be true or false");
  out = v->get<bool>();
}

void Fields::Int64(const char* key, int64_t& out, bool required) {
  const Json* v = Get(key, required);
  if (v == nullptr) return;
  if (auto n = AsInt64(*v)) out = *n;
  else Fail(Path(key), "must be an integer");
}

void Fields::Int64(const char* key, std::optional<int64_t>& out) {
  int64_t n = 0;
  if (Get(key, false) == nullptr) return;
  Int64(key, n, true);
  if (ok()) out = n;
}

void Fields::Int(const char* key, std::optional<int>& out) {
  const Json* v = Get(key, false);
  if (v == nullptr) return;
  auto n = AsInt64(*v);
  if (!n || *n < INT_MIN || *n > INT_MAX) return Fail(Path(key), "must be a 32-bit integer");
  out = static_cast<int>(*n);
}

void Fields::Strings(const char* key, std::vector<std::string>& out) {
  const Json* v = Get(key, false);
  if (v == nullptr) return;
  if (!v->is_array()) return Fail(Path(key), "must be an array of strings");
  out.clear();
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) return Fail(Indexed(Path(key), i), "must be a string");
    out.push_back((*v)[i].get<std::string>());
  }
}

void Fields::TaskStatusField(const char* key, TaskStatus& out, bool required) {
  const Json* v = Get(key, required);
  if (v == nullptr) return;
  auto s = v->is_string() ? ParseTaskStatus(v->get<std::string>()) : std::nullopt;
  if (!s) return Fail(Path(key), "must be PENDING, RUNNING or STOPPED");
  out = *s;
}

void Fields::DesiredStatus(const char* key, TaskStatus& out) {
  const Json* v = Get(key, false);
  if (v == nullptr) return;
  auto s = v->is_string() ? ParseTaskStatus(v->get<std::string>()) : std::nullopt;
  if (!s || *s == TaskStatus::kPending) return Fail(Path(key), "must be RUNNING or STOPPED");
  out = *s;
}

void Fields::StopCodeField(const char* key, std::optional<StopCode>& out) {
  const Json* v = Get(key, false);
  if (v == nullptr) return;
  auto c = v->is_string() ? ParseStopCode(v->get<std::string>()) : std::nullopt;
  if (!c) {
    return Fail(Path(key), "must be one of TaskFailedToStart, EssentialContainerExited, UserInitiated, "
                           "ServiceSchedulerInitiated, SpotInterruption, TerminationNotice, InfrastructureHealth");
  }
  out = *c;
}

std::optional<int64_t> Fields::AsInt64(const Json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

void ReadId(Fields& f, int64_t& id, bool required) { f.Int64("id", id, required); }

}  // namespace gpupack::protocol::internal
