// Fields: reading the members of the agent channel's JSON objects, for the parsers of protocol/ only (the API is
// protocol/messages.h): base/json_fields.h in the channel's words. Each read checks the member's type and bounds
// and names it by its path in an error, e.g. "state.containers[0].status must be PENDING, RUNNING or STOPPED".
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

#include "base/json_fields.h"
#include "base/status.h"
#include "protocol/messages.h"

namespace gpupack::protocol::internal {

// CutReason shortens a reason to kMaxReasonBytes without splitting a UTF-8 character.
void CutReason(std::string& s);

// Words: how the channel's parsers word a field error (base/json_fields.h): "<path> must be a string",
// "<path> is required", InvalidParameter.
const JsonDialect& Words();

// Fields reads the members of one JSON object in the channel's words (base/json_fields.h: the first error is
// kept, after one every read is a no-op; `path` prefixes every field name in messages), plus the channel's
// enums. The object must outlive the Fields.
class Fields : public JsonFields {
 public:
  Fields(const Json& j, std::string path) : JsonFields(j, JsonPath(std::move(path)), Words()) {}

  void TaskStatusField(const char* key, TaskStatus& out, bool required);
  void DesiredStatus(const char* key, TaskStatus& out);
  void StopCodeField(const char* key, std::optional<StopCode>& out);
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
