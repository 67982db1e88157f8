// FieldLimits: the length and character set of every text field a node agent sends the server (registration,
// the channel's hello, state reports and heartbeats), checked where the server reads them, so nothing an agent
// sends can make a label, an attribute, a log line or /metrics large or carry control characters
// (docs/security.md, "Limits on input"). Pure functions; thread-safe.
//
// The limits follow ECS's where ECS has one (attribute names and values 128, container names 255, reasons cut to
// 255 by the parsers), else the longest value a real host sends with room to spare (an EC2 instance id is
// 19 characters, an instance type about 20, an NVIDIA GPU UUID 40).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/status.h"

namespace gpupack::protocol {

// Charset: which bytes a field may hold.
enum class Charset {
  kIdentifier,  // letters, digits and - _ . : / (instance ids and types, GPU ids: MIG-GPU-uuid/1/0 too)
  kName,        // letters, digits, - and _ (container names, as ECS defines them)
  kPrintable,   // printable ASCII, spaces included (agent versions, ARNs)
};

struct FieldLimit {
  std::string_view name;  // as the refusal names it, e.g. "instanceIdentityDocument.instanceId"
  size_t max_bytes;
  Charset charset;
};

inline constexpr FieldLimit kInstanceIdLimit{"instanceIdentityDocument.instanceId", 64, Charset::kIdentifier};
inline constexpr FieldLimit kInstanceTypeLimit{"instanceIdentityDocument.instanceType", 64, Charset::kIdentifier};
inline constexpr FieldLimit kGpuIdLimit{"platformDevices[].id", 128, Charset::kIdentifier};
inline constexpr FieldLimit kAgentVersionLimit{"versionInfo.agentVersion", 128, Charset::kPrintable};
// An instance identity document is a small JSON object; ours holds two fields (EC2's about fifteen).
inline constexpr size_t kMaxIdentityDocumentBytes = 4096;
// Task ARNs an agent reports, and container names in its reports.
inline constexpr FieldLimit kReportedTaskArnLimit{"taskArn", 1024, Charset::kPrintable};
inline constexpr FieldLimit kReportedContainerLimit{"containerName", 255, Charset::kName};
inline constexpr FieldLimit kHeldGpuLimit{"heldGpus[]", 128, Charset::kIdentifier};
// At most this many GPUs held in one heartbeat, and containers in one task report.
inline constexpr size_t kMaxHeldGpus = 64;
inline constexpr size_t kMaxReportedContainers = 64;

// CheckField: ok when `value` is 1..limit.max_bytes bytes of limit.charset; else InvalidParameter naming the
// field (`at`, its path in the message, e.g. "hello.tasks[3].taskArn", else limit.name), the limit, and the length or the first byte
// refused (by its code: it may be a control character), never the value itself (it may be a megabyte).
Status CheckField(std::string_view value, const FieldLimit& limit, std::string_view at = {});

}  // namespace gpupack::protocol
