#include "protocol/fields.h"

#include <string>

namespace gpupack::protocol::internal {

void CutReason(std::string& s) {
  if (s.size() <= kMaxReasonBytes) return;
  size_t n = kMaxReasonBytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
}

namespace {

// ChannelWords: the channel's parsers' words, e.g. "hello.id must be an integer".
class ChannelWords : public JsonDialect {
 public:
  Status Invalid(const std::string& path, const std::string& what) const override {
    return Status::InvalidParameter(path + " " + what);
  }
  Status Error(const JsonError& e) const override { return Invalid(e.path.str(), What(e)); }

 private:
  static std::string What(const JsonError& e) {
    if (e.got == nullptr) return "is required";
    switch (e.want) {
      case JsonWant::kAny: return "is required";
      case JsonWant::kObject: return "must be an object";
      case JsonWant::kString: return "must be a string";
      case JsonWant::kBoolean: return "must be true or false";
      case JsonWant::kStringArray: return "must be an array of strings";
      case JsonWant::kArray:
        if (e.got->is_array()) return "must hold at most " + std::to_string(e.max_size) + " entries";
        return "must be an array";
      case JsonWant::kInteger:
        if (e.lo == JsonFields::kInt64Min && e.hi == JsonFields::kInt64Max) return "must be an integer";
        if (e.lo == JsonFields::kInt32Min && e.hi == JsonFields::kInt32Max) return "must be a 32-bit integer";
        return "must be an integer from " + std::to_string(e.lo) + " to " + std::to_string(e.hi);
    }
    return "is not valid";
  }
};

}  // namespace

const JsonDialect& Words() {
  static const ChannelWords words;
  return words;
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

void ReadId(Fields& f, int64_t& id, bool required) { f.Int64("id", id, required); }

}  // namespace gpupack::protocol::internal
