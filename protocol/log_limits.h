// Bounds of a log filter: FilterLogEvents' filterPattern (CloudWatch's length limit) and the terms it holds. The
// Logs front end refuses a pattern beyond them (InvalidParameterException) and the agent channel a LogsRequest
// beyond them (messages.cc), so matching one line of output costs a bounded amount of work whatever a caller
// sends (docs/api.md "Logs").
#pragma once

#include <cstddef>

namespace gpupack::protocol {

inline constexpr size_t kMaxFilterPatternBytes = 1024;  // of the pattern, and of a request's terms together
inline constexpr size_t kMaxLogTerms = 32;

}  // namespace gpupack::protocol
