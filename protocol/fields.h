// Fields: reading the members of the agent channel's JSON objects, for the parsers of protocol/ only (the API is
// protocol/messages.h). Each read checks the member's type and bounds and names it by its path in an error,
// e.g. "state.containers[0].status must be PENDING, RUNNING or STOPPED".
//
// Who uses it: protocol/messages.cc (every message and its parts) and protocol/heartbeat.cc (the heartbeat and
// its gpuMemoryUsed reading). It also declares the heartbeat message's reader and writer, which heartbeat.cc
// defines and messages.cc calls.
//
// A Fields is one parser's state on one object: not thread-safe, used on the stack of one call. The free
// functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.h"
#include "base/status.h"

namespace gpupack::protocol::internal {

// Indexed: `path` with the element index appended, e.g. "hello.tasks[3]".
std::string Indexed(const std::string& path, size_t i);

// CutReason shortens a reason to kMaxReasonBytes without splitting a UTF-8 character.
void CutReason(std::string& s);

// Fields reads the members of one JSON object and keeps the first error: after one, every read is a no-op, so
// a parser reads all its fields and checks status() once. `path` prefixes every field name in messages. The
// object must outlive the Fields.
class Fields {
 public:
  Fields(const Json& j, std::string path);

  const Status& status() const { return error_; }
  bool ok() const { return error_.ok(); }
  std::string Path(std::string_view key) const { return path_ + "." + std::string(key); }
  void Fail(const std::string& field, const std::string& what);
  void Take(const Status& s);

  // Get: the member, or null when absent (an error first when required) or after an error.
  const Json* Get(const char* key, bool required);

  void String(const char* key, std::string& out, bool required = false);
  void Bool(const char* key, bool& out);
  void Int64(const char* key, int64_t& out, bool required = false);
  void Int64(const char* key, std::optional<int64_t>& out);
  void Int(const char* key, std::optional<int>& out);
  void Strings(const char* key, std::vector<std::string>& out);
  void TaskStatusField(const char* key, TaskStatus& out, bool required);
  void DesiredStatus(const char* key, TaskStatus& out);
  void StopCodeField(const char* key, std::optional<StopCode>& out);

  // Array calls `each(element, path)` for every element of an array member; it returns the element's Status.
  template <typename Each>
  void Array(const char* key, bool required, Each each) {
    const Json* v = Get(key, required);
    if (v == nullptr) return;
    if (!v->is_array()) return Fail(Path(key), "must be an array");
    for (size_t i = 0; i < v->size() && ok(); ++i) Take(each((*v)[i], Indexed(Path(key), i)));
  }

 private:
  static std::optional<int64_t> AsInt64(const Json& v);

  const Json& j_;
  std::string path_;
  gpupack::Status error_;
};

// ReadId reads a message's "id": required, or 0 when absent and optional (a push from a server that gives none).
void ReadId(Fields& f, int64_t& id, bool required);

// Finish: `value`, or the first error `f` met.
template <typename T>
Result<T> Finish(const Fields& f, T value) {
  if (!f.ok()) return f.status();
  return value;
}

// ---- the heartbeat (heartbeat.cc) -------------------------------------------------------------------------------

// ReadHeartbeat reads a heartbeat's fields from `f` (the message object): id, impaired, heldGpus, and
// gpuMemoryUsed apart (a bad one is dropped with a note in gpu_memory_refused, never the heartbeat with it).
void ReadHeartbeat(Fields& f, Heartbeat& m);

// HeartbeatJson writes a heartbeat message, gpuMemoryUsed only when there is a reading.
Json HeartbeatJson(const Heartbeat& m);

}  // namespace gpupack::protocol::internal
