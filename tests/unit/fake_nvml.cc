// A fake libnvidia-ml.so.1 for gpu_discovery_test: the few NVML functions gpupack loads, with its own copy of
// the documented C types (so a layout mistake on either side shows up as wrong values in the test). Built twice:
// the full library, and with FAKE_NVML_LEGACY an old driver's (no _v2 memory info, no attributes, no MPS
// listing, only the _v2 compute listing). FakeNvml* functions let the test steer it.
//
// Default scenario: 2 GPUs.
//   0: "NVIDIA H200", total 143771 MiB, reserved 551 MiB (both whole MiB), 132 SMs, minor 3 (not the legacy build)
//      compute processes: 1000 (MPS server, 600 MiB), 2001 (4096 MiB)
//      MPS clients:       2001 (4100 MiB: the larger one wins), 2002 (1024.5 MiB)
//   1: "NVIDIA A10G", total 23028 MiB, reserved 440.5 MiB, 80 SMs, minor 7
//      compute processes: 3001 (memory not available)
//
// Events (not in the legacy build): nvmlEventSetCreate/Free, nvmlDeviceRegisterEvents and nvmlEventSetWait_v2
// over one queue per event set; FakeNvmlPushXid(device, xid) queues an Xid critical-error event on every set
// that registered that device for it. Waiting on an empty set answers NVML_ERROR_TIMEOUT at once.
#include <cstring>
#include <deque>
#include <vector>

namespace {

using Return = int;
constexpr Return kSuccess = 0;
constexpr Return kErrorUninitialized = 1;
constexpr Return kErrorInvalidArgument = 2;
constexpr Return kErrorNotSupported = 3;
constexpr Return kErrorInsufficientSize = 7;
constexpr Return kErrorTimeout = 10;
constexpr Return kErrorArgumentVersionMismatch = 25;

constexpr unsigned long long kMiB = 1024ULL * 1024ULL;

struct Memory {
  unsigned long long total, free, used;
};
struct MemoryV2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
struct ProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
struct DeviceAttributes {
  unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount,
      sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
  unsigned long long memorySizeMB;
};

constexpr unsigned long long kEventTypeXidCriticalError = 0x8;

struct EventData {  // nvmlEventData_t
  void* device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
static_assert(sizeof(EventData) == 32);

// One nvmlEventSet_t: which devices it listens to (with their event masks) and what has arrived.
struct EventSet {
  unsigned long long masks[2] = {0, 0};
  std::deque<EventData> queue;
};

struct FakeDevice {
  const char* uuid;
  const char* name;
  unsigned long long total, reserved;
  unsigned int sms;
  std::vector<ProcessInfo> compute, mps;
  unsigned int minor;
};

struct State {
  unsigned int count = 2;
  Return init_result = kSuccess;
  int init_refs = 0;
  unsigned int extra_mps_clients = 0;  // added to GPU 0's MPS clients (pids 5000...)
  unsigned int growth_step = 0;        // every compute listing call on GPU 0 sees `growth_step` more processes
  unsigned int growth_cap = 0;         // ... up to this many (pids 6000...)
  unsigned int growth = 0;
  unsigned int compute_calls = 0;      // compute listing calls on GPU 0
  FakeDevice devices[2];
  std::vector<EventSet*> event_sets;   // live sets
  Return register_result = kSuccess;   // nvmlDeviceRegisterEvents answers this when not success
  int register_calls = 0;
};

State& S() {
  static State s;
  return s;
}

void Reset() {
  State& s = S();
  const int refs = s.init_refs;
  std::vector<EventSet*> sets = std::move(s.event_sets);  // sets the library still holds stay valid
  for (EventSet* set : sets) *set = EventSet{};
  s = State{};
  s.init_refs = refs;
  s.event_sets = std::move(sets);
  constexpr unsigned long long kNA = ~0ULL;
  s.devices[0] = {"GPU-11111111-2222-3333-4444-555555555555", "NVIDIA H200", 143771 * kMiB, 551 * kMiB, 132,
                  {{1000, 600 * kMiB, 0, 0}, {2001, 4096 * kMiB, 0, 0}},
                  {{2001, 4100 * kMiB, 0, 0}, {2002, 1024 * kMiB + kMiB / 2, 0, 0}}, 3};
  s.devices[1] = {"GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "NVIDIA A10G", 23028 * kMiB, 440 * kMiB + kMiB / 2, 80,
                  {{3001, kNA, 0, 0}}, {}, 7};
}

struct Init {
  Init() { Reset(); }
} init_once;

FakeDevice* Dev(void* handle) {
  for (auto& d : S().devices) {
    if (handle == &d) return &d;
  }
  return nullptr;
}

Return CopyString(const char* value, char* out, unsigned int length) {
  if (out == nullptr) return kErrorInvalidArgument;
  if (std::strlen(value) + 1 > length) return kErrorInsufficientSize;
  std::strcpy(out, value);
  return kSuccess;
}

Return List(std::vector<ProcessInfo> list, unsigned int* count, ProcessInfo* infos) {
  if (count == nullptr) return kErrorInvalidArgument;
  if (*count < list.size()) {
    *count = static_cast<unsigned int>(list.size());
    return kErrorInsufficientSize;
  }
  if (!list.empty() && infos == nullptr) return kErrorInvalidArgument;
  for (size_t i = 0; i < list.size(); ++i) infos[i] = list[i];
  *count = static_cast<unsigned int>(list.size());
  return kSuccess;
}

Return ComputeProcesses(void* device, unsigned int* count, ProcessInfo* infos) {
  if (S().init_refs == 0) return kErrorUninitialized;
  FakeDevice* d = Dev(device);
  if (d == nullptr) return kErrorInvalidArgument;
  std::vector<ProcessInfo> list = d->compute;
  if (d == &S().devices[0]) {
    ++S().compute_calls;
    S().growth = S().growth + S().growth_step > S().growth_cap ? S().growth_cap : S().growth + S().growth_step;
    for (unsigned int i = 0; i < S().growth; ++i) list.push_back({6000 + i, kMiB, 0, 0});
  }
  return List(std::move(list), count, infos);
}

}  // namespace

#define NVML_EXPORT extern "C" __attribute__((visibility("default")))

// ---- Test controls ----
NVML_EXPORT void FakeNvmlReset() { Reset(); }
NVML_EXPORT void FakeNvmlSetDeviceCount(unsigned int n) { S().count = n > 2 ? 2 : n; }
NVML_EXPORT void FakeNvmlSetInitResult(int r) { S().init_result = r; }
NVML_EXPORT void FakeNvmlSetExtraMpsClients(unsigned int n) { S().extra_mps_clients = n; }
NVML_EXPORT void FakeNvmlSetGrowth(unsigned int step, unsigned int cap) {
  S().growth_step = step;
  S().growth_cap = cap;
  S().growth = 0;
}
NVML_EXPORT unsigned int FakeNvmlComputeCalls() { return S().compute_calls; }
NVML_EXPORT int FakeNvmlInitRefs() { return S().init_refs; }

// ---- NVML ----
NVML_EXPORT Return nvmlInit_v2() {
  if (S().init_result != kSuccess) return S().init_result;
  ++S().init_refs;
  return kSuccess;
}

NVML_EXPORT Return nvmlShutdown() {
  if (S().init_refs == 0) return kErrorUninitialized;
  --S().init_refs;
  return kSuccess;
}

NVML_EXPORT const char* nvmlErrorString(Return r) {
  switch (r) {
    case kSuccess: return "Success";
    case kErrorUninitialized: return "Uninitialized";
    case kErrorInvalidArgument: return "Invalid Argument";
    case 9: return "Driver Not Loaded";
    case kErrorNotSupported: return "Not Supported";
    case kErrorInsufficientSize: return "Insufficient Size";
    case kErrorTimeout: return "Timeout";
    case kErrorArgumentVersionMismatch: return "Argument version mismatch";
    default: return "Unknown Error";
  }
}

NVML_EXPORT Return nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return CopyString("550.54.15", version, length);
}

NVML_EXPORT Return nvmlDeviceGetCount_v2(unsigned int* count) {
  if (S().init_refs == 0) return kErrorUninitialized;
  *count = S().count;
  return kSuccess;
}

NVML_EXPORT Return nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (S().init_refs == 0) return kErrorUninitialized;
  if (index >= S().count || device == nullptr) return kErrorInvalidArgument;
  *device = &S().devices[index];
  return kSuccess;
}

NVML_EXPORT Return nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  FakeDevice* d = Dev(device);
  return d ? CopyString(d->uuid, uuid, length) : kErrorInvalidArgument;
}

NVML_EXPORT Return nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  FakeDevice* d = Dev(device);
  return d ? CopyString(d->name, name, length) : kErrorInvalidArgument;
}

NVML_EXPORT Return nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  FakeDevice* d = Dev(device);
  if (d == nullptr || memory == nullptr) return kErrorInvalidArgument;
  // v1's `used` includes the reserved memory; it has no field for it.
  memory->total = d->total;
  memory->used = d->reserved;
  memory->free = d->total - d->reserved;
  return kSuccess;
}

NVML_EXPORT Return nvmlDeviceGetComputeRunningProcesses_v2(void* device, unsigned int* count, ProcessInfo* infos) {
  return ComputeProcesses(device, count, infos);
}

#ifndef FAKE_NVML_LEGACY

NVML_EXPORT Return nvmlDeviceGetMemoryInfo_v2(void* device, MemoryV2* memory) {
  FakeDevice* d = Dev(device);
  if (d == nullptr || memory == nullptr) return kErrorInvalidArgument;
  if (memory->version != (sizeof(MemoryV2) | (2u << 24))) return kErrorArgumentVersionMismatch;
  memory->total = d->total;
  memory->reserved = d->reserved;
  memory->used = d->reserved + 7 * kMiB;
  memory->free = d->total - memory->used;
  return kSuccess;
}

NVML_EXPORT Return nvmlDeviceGetMinorNumber(void* device, unsigned int* minor) {
  FakeDevice* d = Dev(device);
  if (d == nullptr || minor == nullptr) return kErrorInvalidArgument;
  *minor = d->minor;
  return kSuccess;
}

NVML_EXPORT Return nvmlDeviceGetAttributes_v2(void* device, DeviceAttributes* attributes) {
  FakeDevice* d = Dev(device);
  if (d == nullptr || attributes == nullptr) return kErrorInvalidArgument;
  *attributes = DeviceAttributes{};
  attributes->multiprocessorCount = d->sms;
  attributes->memorySizeMB = d->total / kMiB;
  return kSuccess;
}

NVML_EXPORT Return nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count, ProcessInfo* infos) {
  return ComputeProcesses(device, count, infos);
}

NVML_EXPORT Return nvmlDeviceGetMPSComputeRunningProcesses_v3(void* device, unsigned int* count,
                                                              ProcessInfo* infos) {
  if (S().init_refs == 0) return kErrorUninitialized;
  FakeDevice* d = Dev(device);
  if (d == nullptr) return kErrorInvalidArgument;
  std::vector<ProcessInfo> list = d->mps;
  if (d == &S().devices[0]) {
    for (unsigned int i = 0; i < S().extra_mps_clients; ++i) list.push_back({5000 + i, (i + 1) * kMiB, 0, 0});
  }
  return List(std::move(list), count, infos);
}

// ---- Events ----

NVML_EXPORT void FakeNvmlPushXid(unsigned int index, unsigned long long xid) {
  if (index >= 2) return;
  for (EventSet* set : S().event_sets) {
    if (set->masks[index] & kEventTypeXidCriticalError) {
      set->queue.push_back({&S().devices[index], kEventTypeXidCriticalError, xid, 0xFFFFFFFFu, 0xFFFFFFFFu});
    }
  }
}
NVML_EXPORT void FakeNvmlSetRegisterEventsResult(int r) { S().register_result = r; }
NVML_EXPORT int FakeNvmlRegisterEventsCalls() { return S().register_calls; }
NVML_EXPORT int FakeNvmlEventSets() { return static_cast<int>(S().event_sets.size()); }

NVML_EXPORT Return nvmlEventSetCreate(EventSet** set) {
  if (S().init_refs == 0) return kErrorUninitialized;
  if (set == nullptr) return kErrorInvalidArgument;
  *set = new EventSet;
  S().event_sets.push_back(*set);
  return kSuccess;
}

NVML_EXPORT Return nvmlEventSetFree(EventSet* set) {
  auto& sets = S().event_sets;
  for (auto it = sets.begin(); it != sets.end(); ++it) {
    if (*it == set) {
      sets.erase(it);
      delete set;
      return kSuccess;
    }
  }
  return kErrorInvalidArgument;
}

NVML_EXPORT Return nvmlDeviceRegisterEvents(void* device, unsigned long long types, EventSet* set) {
  if (S().init_refs == 0) return kErrorUninitialized;
  ++S().register_calls;
  FakeDevice* d = Dev(device);
  if (d == nullptr || set == nullptr) return kErrorInvalidArgument;
  if (S().register_result != kSuccess) return S().register_result;
  set->masks[d - S().devices] |= types;
  return kSuccess;
}

NVML_EXPORT Return nvmlEventSetWait_v2(EventSet* set, EventData* data, unsigned int /*timeoutms*/) {
  if (S().init_refs == 0) return kErrorUninitialized;
  if (set == nullptr || data == nullptr) return kErrorInvalidArgument;
  if (set->queue.empty()) return kErrorTimeout;
  *data = set->queue.front();
  set->queue.pop_front();
  return kSuccess;
}

#endif  // FAKE_NVML_LEGACY
