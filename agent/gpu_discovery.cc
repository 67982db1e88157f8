// GPU discovery: NVML loaded with dlopen at run time (no NVIDIA headers or libraries at build time), and the
// fake GPUs of `--gpus fake:SPEC`.
#include "agent/gpu_discovery.h"

#include <dlfcn.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string_view>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/fake_gpus.h"

namespace gpupack::agent {
namespace {

constexpr int64_t kBytesPerMiB = 1024 * 1024;

// ---- NVML's C API, declared from NVIDIA's documentation (nvml.h is not needed to build) -------------------
namespace nvml {

using Return = int;  // nvmlReturn_t, a C enum
constexpr Return kSuccess = 0;
constexpr Return kErrorNotSupported = 3;
constexpr Return kErrorInsufficientSize = 7;
constexpr Return kErrorFunctionNotFound = 13;
constexpr Return kErrorTimeout = 10;
constexpr Return kErrorArgumentVersionMismatch = 25;

struct DeviceOpaque;
using Device = DeviceOpaque*;  // nvmlDevice_t

struct Memory {  // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct MemoryV2 {  // nvmlMemory_v2_t
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
// NVML_STRUCT_VERSION(Memory, 2): the struct's size with the version in the top byte.
constexpr unsigned int kMemoryV2Version = static_cast<unsigned int>(sizeof(MemoryV2)) | (2u << 24);

struct ProcessInfo {  // nvmlProcessInfo_t (also nvmlProcessInfo_v2_t), as the _v2 and _v3 listings fill it
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr unsigned long long kValueNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE

struct DeviceAttributes {  // nvmlDeviceAttributes_t
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;
  unsigned int computeInstanceSliceCount;
  unsigned long long memorySizeMB;
};

struct EventSetOpaque;
using EventSet = EventSetOpaque*;  // nvmlEventSet_t
struct EventData {  // nvmlEventData_t
  Device device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr unsigned long long kEventTypeXidCriticalError = 0x8;  // nvmlEventTypeXidCriticalError

static_assert(sizeof(EventData) == 32);
static_assert(sizeof(Memory) == 24);
static_assert(sizeof(MemoryV2) == 40);
static_assert(sizeof(ProcessInfo) == 24);
static_assert(sizeof(DeviceAttributes) == 40);

constexpr unsigned int kUuidBufferSize = 96;           // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned int kNameBufferSize = 96;           // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned int kDriverVersionBufferSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using GetCountFn = Return (*)(unsigned int*);
using GetHandleByIndexFn = Return (*)(unsigned int, Device*);
using GetStringFn = Return (*)(Device, char*, unsigned int);
using GetMemoryInfoFn = Return (*)(Device, Memory*);
using GetMemoryInfoV2Fn = Return (*)(Device, MemoryV2*);
using GetAttributesFn = Return (*)(Device, DeviceAttributes*);
using GetMinorNumberFn = Return (*)(Device, unsigned int*);
using GetProcessesFn = Return (*)(Device, unsigned int*, ProcessInfo*);
using GetDriverVersionFn = Return (*)(char*, unsigned int);
using EventSetCreateFn = Return (*)(EventSet*);
using EventSetFreeFn = Return (*)(EventSet);
using RegisterEventsFn = Return (*)(Device, unsigned long long, EventSet);
using EventSetWaitFn = Return (*)(EventSet, EventData*, unsigned int);

}  // namespace nvml

// NvmlLibrary owns one dlopen handle with nvmlInit_v2 done; the destructor shuts NVML down and closes it.
class NvmlLibrary {
 public:
  static Result<std::unique_ptr<NvmlLibrary>> Open(const std::string& path) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      return Status::Unsupported("NVML not found (" + path +
                                 "): is the NVIDIA driver installed? Use --gpus fake:2x22587 on a host without "
                                 "GPUs [dlopen: " + std::string(why ? why : "unknown error") + "]");
    }
    std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary(path, handle));
    if (Status s = lib->Resolve(); !s.ok()) return s;
    if (nvml::Return r = lib->init_(); r != nvml::kSuccess) {
      return Status::Unsupported("NVML (" + path + ") failed to initialize: " + lib->Error(r) +
                                 ". Is the NVIDIA driver loaded? Use --gpus fake:2x22587 on a host without GPUs");
    }
    lib->initialized_ = true;
    return lib;
  }

  ~NvmlLibrary() {
    if (event_set_ != nullptr && event_set_free_) event_set_free_(event_set_);
    if (initialized_) shutdown_();
    dlclose(handle_);
  }
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  std::string Error(nvml::Return r) const {
    const char* s = error_string_ ? error_string_(r) : nullptr;
    return (s ? std::string(s) : std::string("NVML error")) + " (" + std::to_string(r) + ")";
  }

  std::string DriverVersion() const {
    if (!driver_version_) return "";
    char buf[nvml::kDriverVersionBufferSize] = {};
    if (driver_version_(buf, sizeof buf) != nvml::kSuccess) return "";
    buf[sizeof buf - 1] = '\0';
    return buf;
  }

  Result<unsigned int> DeviceCount() const {
    unsigned int count = 0;
    if (nvml::Return r = get_count_(&count); r != nvml::kSuccess) {
      return Status::Server("nvmlDeviceGetCount_v2: " + Error(r));
    }
    return count;
  }

  Result<GpuDevice> Device(unsigned int index) const {
    nvml::Device dev = nullptr;
    if (nvml::Return r = get_handle_(index, &dev); r != nvml::kSuccess) {
      return Status::Server("nvmlDeviceGetHandleByIndex_v2(" + std::to_string(index) + "): " + Error(r));
    }
    GpuDevice g;
    g.index = static_cast<int>(index);
    auto uuid = String(get_uuid_, dev, nvml::kUuidBufferSize, "nvmlDeviceGetUUID", index);
    if (!uuid.ok()) return uuid.status();
    g.uuid = std::move(*uuid);
    auto name = String(get_name_, dev, nvml::kNameBufferSize, "nvmlDeviceGetName", index);
    if (!name.ok()) return name.status();
    g.name = std::move(*name);

    unsigned long long total = 0, reserved = 0;
    nvml::Return r = nvml::kErrorFunctionNotFound;
    if (get_memory_v2_) {
      nvml::MemoryV2 m{};
      m.version = nvml::kMemoryV2Version;
      r = get_memory_v2_(dev, &m);
      if (r == nvml::kSuccess) {
        total = m.total;
        reserved = std::min(m.reserved, m.total);
      } else if (r != nvml::kErrorNotSupported && r != nvml::kErrorFunctionNotFound &&
                 r != nvml::kErrorArgumentVersionMismatch) {
        return Status::Server("nvmlDeviceGetMemoryInfo_v2(" + std::to_string(index) + "): " + Error(r));
      }
    }
    if (r != nvml::kSuccess) {
      if (!get_memory_v1_) {
        return Status::Server("nvmlDeviceGetMemoryInfo_v2(" + std::to_string(index) + "): " + Error(r));
      }
      nvml::Memory m{};
      if (nvml::Return r1 = get_memory_v1_(dev, &m); r1 != nvml::kSuccess) {
        return Status::Server("nvmlDeviceGetMemoryInfo(" + std::to_string(index) + "): " + Error(r1));
      }
      total = m.total;  // v1 has no `reserved`: all of it counts as usable
    }
    g.total_mib = static_cast<MiB>(total / kBytesPerMiB);
    g.reserved_mib = static_cast<MiB>(reserved / kBytesPerMiB);
    g.usable_mib = static_cast<MiB>((total - reserved) / kBytesPerMiB);

    if (get_attributes_) {
      nvml::DeviceAttributes a{};
      if (get_attributes_(dev, &a) == nvml::kSuccess) g.sm_count = static_cast<int>(a.multiprocessorCount);
    }
    if (get_minor_) {
      unsigned int minor = 0;
      if (get_minor_(dev, &minor) == nvml::kSuccess) g.minor = static_cast<int>(minor);
    }
    return g;
  }

  // Processes appends the processes of GPU `index` (compute and MPS clients, one entry per pid) to `out`.
  Status Processes(unsigned int index, std::vector<GpuProcess>& out) const {
    nvml::Device dev = nullptr;
    if (nvml::Return r = get_handle_(index, &dev); r != nvml::kSuccess) {
      return Status::Server("nvmlDeviceGetHandleByIndex_v2(" + std::to_string(index) + "): " + Error(r));
    }
    auto uuid = String(get_uuid_, dev, nvml::kUuidBufferSize, "nvmlDeviceGetUUID", index);
    if (!uuid.ok()) return uuid.status();
    std::map<uint32_t, MiB> by_pid;
    for (const auto& [fn, what] : {std::pair{compute_processes_, compute_processes_name_},
                                   std::pair{mps_processes_, mps_processes_name_}}) {
      if (!fn) continue;
      auto list = ListProcesses(fn, what, dev, index);
      if (!list.ok()) return list.status();
      for (const auto& p : *list) {
        MiB used = p.usedGpuMemory == nvml::kValueNotAvailable ? 0
                                                               : static_cast<MiB>(p.usedGpuMemory / kBytesPerMiB);
        auto [it, inserted] = by_pid.emplace(p.pid, used);
        if (!inserted) it->second = std::max(it->second, used);
      }
    }
    for (const auto& [pid, used] : by_pid) out.push_back({pid, *uuid, used});
    return Status::Ok();
  }

  // CriticalErrors subscribes every GPU to Xid critical-error events on the first call, then drains what has
  // arrived. A driver without events (or one that refuses them, e.g. in some containers) yields nothing.
  std::vector<GpuCriticalError> CriticalErrors() {
    std::vector<GpuCriticalError> out;
    if (!events_tried_) {
      events_tried_ = true;
      if (Status s = Subscribe(); !s.ok()) {
        spdlog::warn("nvml: no GPU error events ({}); faults are noticed through the MPS server's status only",
                     s.message());
        if (event_set_ != nullptr) event_set_free_(event_set_);
        event_set_ = nullptr;
      }
    }
    if (event_set_ == nullptr) return out;
    for (int i = 0; i < 256; ++i) {  // bounded: a storm of events is drained over several calls
      nvml::EventData data{};
      nvml::Return r = event_set_wait_(event_set_, &data, 0);
      if (r == nvml::kErrorTimeout) break;
      if (r != nvml::kSuccess) {
        spdlog::warn("nvml: nvmlEventSetWait_v2: {}", Error(r));
        break;
      }
      auto it = uuid_of_.find(data.device);
      out.push_back({it != uuid_of_.end() ? it->second : "", data.eventData});
    }
    return out;
  }

 private:
  NvmlLibrary(std::string path, void* handle) : path_(std::move(path)), handle_(handle) {}

  Status Subscribe() {
    if (!event_set_create_ || !event_set_free_ || !register_events_ || !event_set_wait_) {
      return Status::Unsupported("the driver's NVML lacks the event functions");
    }
    if (nvml::Return r = event_set_create_(&event_set_); r != nvml::kSuccess) {
      event_set_ = nullptr;
      return Status::Unsupported("nvmlEventSetCreate: " + Error(r));
    }
    auto count = DeviceCount();
    if (!count.ok()) return count.status();
    for (unsigned int i = 0; i < *count; ++i) {
      nvml::Device dev = nullptr;
      if (nvml::Return r = get_handle_(i, &dev); r != nvml::kSuccess) {
        return Status::Server("nvmlDeviceGetHandleByIndex_v2: " + Error(r));
      }
      auto uuid = String(get_uuid_, dev, nvml::kUuidBufferSize, "nvmlDeviceGetUUID", i);
      if (!uuid.ok()) return uuid.status();
      uuid_of_[dev] = *uuid;
      if (nvml::Return r = register_events_(dev, nvml::kEventTypeXidCriticalError, event_set_);
          r != nvml::kSuccess) {
        return Status::Unsupported("nvmlDeviceRegisterEvents(" + std::to_string(i) + "): " + Error(r));
      }
    }
    return Status::Ok();
  }

  template <typename F>
  F Symbol(const char* name) const {
    return reinterpret_cast<F>(dlsym(handle_, name));
  }

  Status Resolve() {
    init_ = Symbol<nvml::InitFn>("nvmlInit_v2");
    shutdown_ = Symbol<nvml::ShutdownFn>("nvmlShutdown");
    error_string_ = Symbol<nvml::ErrorStringFn>("nvmlErrorString");
    get_count_ = Symbol<nvml::GetCountFn>("nvmlDeviceGetCount_v2");
    get_handle_ = Symbol<nvml::GetHandleByIndexFn>("nvmlDeviceGetHandleByIndex_v2");
    get_uuid_ = Symbol<nvml::GetStringFn>("nvmlDeviceGetUUID");
    get_name_ = Symbol<nvml::GetStringFn>("nvmlDeviceGetName");
    get_memory_v2_ = Symbol<nvml::GetMemoryInfoV2Fn>("nvmlDeviceGetMemoryInfo_v2");
    get_memory_v1_ = Symbol<nvml::GetMemoryInfoFn>("nvmlDeviceGetMemoryInfo");
    get_attributes_ = Symbol<nvml::GetAttributesFn>("nvmlDeviceGetAttributes_v2");
    get_minor_ = Symbol<nvml::GetMinorNumberFn>("nvmlDeviceGetMinorNumber");
    driver_version_ = Symbol<nvml::GetDriverVersionFn>("nvmlSystemGetDriverVersion");
    event_set_create_ = Symbol<nvml::EventSetCreateFn>("nvmlEventSetCreate");
    event_set_free_ = Symbol<nvml::EventSetFreeFn>("nvmlEventSetFree");
    register_events_ = Symbol<nvml::RegisterEventsFn>("nvmlDeviceRegisterEvents");
    event_set_wait_ = Symbol<nvml::EventSetWaitFn>("nvmlEventSetWait_v2");
    // _v3 and _v2 fill the same nvmlProcessInfo_t; prefer _v3, which newer drivers document.
    compute_processes_ = Symbol<nvml::GetProcessesFn>("nvmlDeviceGetComputeRunningProcesses_v3");
    compute_processes_name_ = "nvmlDeviceGetComputeRunningProcesses_v3";
    if (!compute_processes_) {
      compute_processes_ = Symbol<nvml::GetProcessesFn>("nvmlDeviceGetComputeRunningProcesses_v2");
      compute_processes_name_ = "nvmlDeviceGetComputeRunningProcesses_v2";
    }
    mps_processes_ = Symbol<nvml::GetProcessesFn>("nvmlDeviceGetMPSComputeRunningProcesses_v3");
    mps_processes_name_ = "nvmlDeviceGetMPSComputeRunningProcesses_v3";
    if (!mps_processes_) {
      mps_processes_ = Symbol<nvml::GetProcessesFn>("nvmlDeviceGetMPSComputeRunningProcesses_v2");
      mps_processes_name_ = "nvmlDeviceGetMPSComputeRunningProcesses_v2";
    }

    std::string missing;
    auto need = [&](bool present, const char* name) {
      if (!present) missing += (missing.empty() ? "" : ", ") + std::string(name);
    };
    need(init_, "nvmlInit_v2");
    need(shutdown_, "nvmlShutdown");
    need(get_count_, "nvmlDeviceGetCount_v2");
    need(get_handle_, "nvmlDeviceGetHandleByIndex_v2");
    need(get_uuid_, "nvmlDeviceGetUUID");
    need(get_name_, "nvmlDeviceGetName");
    need(get_memory_v2_ || get_memory_v1_, "nvmlDeviceGetMemoryInfo_v2 or nvmlDeviceGetMemoryInfo");
    need(compute_processes_, "nvmlDeviceGetComputeRunningProcesses_v3 or _v2");
    if (!missing.empty()) {
      return Status::Unsupported("NVML (" + path_ + ") lacks " + missing + ": the NVIDIA driver is too old");
    }
    return Status::Ok();
  }

  Result<std::string> String(nvml::GetStringFn fn, nvml::Device dev, unsigned int size, const char* what,
                             unsigned int index) const {
    std::string buf(size, '\0');
    if (nvml::Return r = fn(dev, buf.data(), size); r != nvml::kSuccess) {
      return Status::Server(std::string(what) + "(" + std::to_string(index) + "): " + Error(r));
    }
    buf.resize(buf.find('\0') == std::string::npos ? size : buf.find('\0'));
    return buf;
  }

  // ListProcesses calls an NVML process listing with a buffer that grows while NVML answers
  // NVML_ERROR_INSUFFICIENT_SIZE (processes may start between two calls, so a few rounds are allowed).
  Result<std::vector<nvml::ProcessInfo>> ListProcesses(nvml::GetProcessesFn fn, const char* what, nvml::Device dev,
                                                       unsigned int index) const {
    constexpr int kAttempts = 8;
    std::vector<nvml::ProcessInfo> buf(32);
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      unsigned int count = static_cast<unsigned int>(buf.size());
      nvml::Return r = fn(dev, &count, buf.data());
      if (r == nvml::kSuccess) {
        buf.resize(std::min<size_t>(count, buf.size()));
        return buf;
      }
      if (r != nvml::kErrorInsufficientSize) {
        return Status::Server(std::string(what) + "(" + std::to_string(index) + "): " + Error(r));
      }
      buf.resize(std::max<size_t>(count, buf.size()) + 16);
    }
    return Status::Server(std::string(what) + "(" + std::to_string(index) + "): the process list kept growing");
  }

  const std::string path_;
  void* const handle_;
  bool initialized_ = false;
  nvml::InitFn init_ = nullptr;
  nvml::ShutdownFn shutdown_ = nullptr;
  nvml::ErrorStringFn error_string_ = nullptr;
  nvml::GetCountFn get_count_ = nullptr;
  nvml::GetHandleByIndexFn get_handle_ = nullptr;
  nvml::GetStringFn get_uuid_ = nullptr;
  nvml::GetStringFn get_name_ = nullptr;
  nvml::GetMemoryInfoV2Fn get_memory_v2_ = nullptr;
  nvml::GetMemoryInfoFn get_memory_v1_ = nullptr;
  nvml::GetAttributesFn get_attributes_ = nullptr;
  nvml::GetMinorNumberFn get_minor_ = nullptr;  // optional: minor stays -1 without it
  nvml::GetDriverVersionFn driver_version_ = nullptr;
  nvml::GetProcessesFn compute_processes_ = nullptr;
  const char* compute_processes_name_ = "";
  nvml::GetProcessesFn mps_processes_ = nullptr;
  const char* mps_processes_name_ = "";
  nvml::EventSetCreateFn event_set_create_ = nullptr;
  nvml::EventSetFreeFn event_set_free_ = nullptr;
  nvml::RegisterEventsFn register_events_ = nullptr;
  nvml::EventSetWaitFn event_set_wait_ = nullptr;
  bool events_tried_ = false;
  nvml::EventSet event_set_ = nullptr;
  std::map<nvml::Device, std::string> uuid_of_;
};

// NvmlDiscovery: the GPUs NVML reports. Thread-compatible.
class NvmlDiscovery final : public GpuDiscovery {
 public:
  explicit NvmlDiscovery(std::unique_ptr<NvmlLibrary> lib) : lib_(std::move(lib)) {}

  std::string Describe() const override {
    std::string v = lib_->DriverVersion();
    return v.empty() ? "nvml" : "nvml (driver " + v + ")";
  }

  Result<std::vector<GpuDevice>> Discover() override {
    auto count = lib_->DeviceCount();
    if (!count.ok()) return count.status();
    if (*count == 0) return NoGpus();
    std::vector<GpuDevice> out;
    for (unsigned int i = 0; i < *count; ++i) {
      auto d = lib_->Device(i);
      if (!d.ok()) return d.status();
      out.push_back(std::move(*d));
    }
    return out;
  }

  Result<std::vector<GpuProcess>> Processes() override {
    auto count = lib_->DeviceCount();
    if (!count.ok()) return count.status();
    std::vector<GpuProcess> out;
    for (unsigned int i = 0; i < *count; ++i) {
      if (Status s = lib_->Processes(i, out); !s.ok()) return s;
    }
    return out;
  }

  std::vector<GpuCriticalError> CriticalErrors() override { return lib_->CriticalErrors(); }

  Status NoGpus() const {
    return Status::Unsupported("NVML reports 0 GPUs on this host (" + Describe() +
                               "). Use --gpus fake:2x22587 on a host without GPUs");
  }

  NvmlLibrary& lib() const { return *lib_; }

 private:
  std::unique_ptr<NvmlLibrary> lib_;
};

// ---- Fake GPUs --------------------------------------------------------------------------------------------

constexpr int kMaxFakeGpus = 64;
constexpr MiB kMaxFakeGpuMiB = 16 * 1024 * 1024;  // 16 TiB
constexpr int kFakeSmCount = 80;

Status BadSpec(const std::string& spec, const std::string& why) {
  return Status::InvalidParameter("--gpus fake:" + spec + ": " + why +
                                  "; expected fake:<count>x<MiB>[,<count>x<MiB>...], e.g. fake:2x22587");
}

bool ParsePositive(std::string_view s, int64_t max, int64_t& out) {
  if (s.empty() || s.front() == '+' || s.front() == '-') return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size() && out >= 1 && out <= max;
}

uint64_t Fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

// ---- Public functions ---------------------------------------------------------------------------------------

bool IsFatalXid(uint64_t xid) {
  switch (xid) {
    case 13: case 31: case 43: case 48: case 63: case 64: case 74: case 79: case 92: case 94: case 95:
    case 119: case 120:
      return true;
    default:
      return false;
  }
}

std::string NvmlLibraryPath() {
  const char* env = std::getenv(kNvmlLibraryEnv);
  return env != nullptr && *env != '\0' ? env : kNvmlDefaultLibrary;
}

bool NvmlAvailable() { return NvmlLibrary::Open(NvmlLibraryPath()).ok(); }

Result<std::unique_ptr<GpuDiscovery>> MakeNvmlDiscovery(const std::string& library) {
  auto lib = NvmlLibrary::Open(library);
  if (!lib.ok()) return lib.status();
  auto discovery = std::make_unique<NvmlDiscovery>(std::move(*lib));
  auto count = discovery->lib().DeviceCount();
  if (!count.ok()) return count.status();
  if (*count == 0) return discovery->NoGpus();
  return std::unique_ptr<GpuDiscovery>(std::move(discovery));
}

std::string FakeGpuUuid(const std::string& seed, int index) {
  const uint64_t h = seed.empty() ? 0 : Fnv1a64(seed) & 0xFFFFFFFFFFFFULL;  // 48 bits: 12 hex digits
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-fake%04x-%04x-%04x-0000-%012d", static_cast<unsigned>((h >> 32) & 0xFFFF),
                static_cast<unsigned>((h >> 16) & 0xFFFF), static_cast<unsigned>(h & 0xFFFF), index);
  return buf;
}

FakeGpus::FakeGpus(std::string spec, std::vector<GpuDevice> devices, FakeGpuOptions options)
    : spec_(std::move(spec)), devices_(std::move(devices)), options_(std::move(options)) {}

Result<std::unique_ptr<FakeGpus>> FakeGpus::Create(const std::string& spec, const std::string& seed,
                                                   FakeGpuOptions options) {
  if (spec.empty()) return BadSpec(spec, "SPEC is empty");
  std::vector<GpuDevice> devices;
  std::string_view rest = spec;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view group = rest.substr(0, comma);
    const size_t x = group.find('x');
    if (x == std::string_view::npos) {
      return BadSpec(spec, "group \"" + std::string(group) + "\" is not <count>x<MiB>");
    }
    int64_t count = 0, mib = 0;
    if (!ParsePositive(group.substr(0, x), kMaxFakeGpus, count)) {
      return BadSpec(spec, "count \"" + std::string(group.substr(0, x)) + "\" in \"" + std::string(group) +
                               "\" must be a whole number from 1 to " + std::to_string(kMaxFakeGpus));
    }
    if (!ParsePositive(group.substr(x + 1), kMaxFakeGpuMiB, mib)) {
      return BadSpec(spec, "memory \"" + std::string(group.substr(x + 1)) + "\" in \"" + std::string(group) +
                               "\" must be a whole number of MiB from 1 to " + std::to_string(kMaxFakeGpuMiB));
    }
    for (int64_t i = 0; i < count; ++i) {
      GpuDevice d;
      d.index = static_cast<int>(devices.size());
      d.uuid = FakeGpuUuid(seed, d.index);
      d.name = "Fake GPU";
      d.total_mib = d.usable_mib = mib;
      d.reserved_mib = 0;
      d.sm_count = kFakeSmCount;
      d.minor = d.index;
      devices.push_back(std::move(d));
    }
    if (devices.size() > static_cast<size_t>(kMaxFakeGpus)) {
      return BadSpec(spec, "more than " + std::to_string(kMaxFakeGpus) + " GPUs");
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return std::unique_ptr<FakeGpus>(new FakeGpus(spec, std::move(devices), std::move(options)));
}

std::string FakeGpus::Describe() const { return "fake:" + spec_; }

Result<std::vector<GpuDevice>> FakeGpus::Discover() { return devices_; }

Result<std::vector<GpuProcess>> FakeGpus::Processes() {
  {
    std::lock_guard lock(mu_);
    if (injected_) return *injected_;
  }
  if (options_.processes_file.empty()) return std::vector<GpuProcess>{};
  return ReadProcessesFile();
}

void FakeGpus::SetProcesses(std::vector<GpuProcess> processes) {
  std::lock_guard lock(mu_);
  injected_ = std::move(processes);
}

void FakeGpus::ClearProcesses() {
  std::lock_guard lock(mu_);
  injected_.reset();
}

Result<std::vector<GpuProcess>> FakeGpus::ReadProcessesFile() const {
  const std::string& path = options_.processes_file;
  std::ifstream in(path);
  if (!in) return std::vector<GpuProcess>{};  // no file: no processes
  std::stringstream text;
  text << in.rdbuf();
  auto bad = [&](const std::string& why) { return Status::Server("fake GPU processes file " + path + ": " + why); };
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return bad("not valid JSON");
  if (!doc.is_array()) return bad("expected a JSON array of {pid, gpuUuid|gpuIndex, usedMiB}");
  std::vector<GpuProcess> out;
  for (const auto& e : doc) {
    if (!e.is_object() || !e.contains("pid") || !e["pid"].is_number_unsigned() || !e.contains("usedMiB") ||
        !e["usedMiB"].is_number_integer()) {
      return bad("each entry needs an unsigned \"pid\" and an integer \"usedMiB\": " + e.dump());
    }
    GpuProcess p;
    p.pid = e["pid"].get<uint32_t>();
    p.used_mib = e["usedMiB"].get<MiB>();
    if (e.contains("gpuUuid") && e["gpuUuid"].is_string()) {
      p.gpu_uuid = e["gpuUuid"].get<std::string>();
    } else if (e.contains("gpuIndex") && e["gpuIndex"].is_number_unsigned()) {
      const auto index = e["gpuIndex"].get<uint64_t>();
      if (index >= devices_.size()) {
        return bad("gpuIndex " + std::to_string(index) + " is out of range (" + std::to_string(devices_.size()) +
                   " fake GPUs)");
      }
      p.gpu_uuid = devices_[index].uuid;
    } else {
      return bad("each entry needs \"gpuUuid\" (a string) or \"gpuIndex\" (a number): " + e.dump());
    }
    out.push_back(std::move(p));
  }
  return out;
}

Result<std::unique_ptr<GpuDiscovery>> MakeGpuDiscovery(const std::string& flag, const std::string& seed) {
  if (flag == "nvml") return MakeNvmlDiscovery(NvmlLibraryPath());
  constexpr std::string_view kFake = "fake:";
  if (flag.starts_with(kFake)) {
    FakeGpuOptions options;
    if (const char* dir = std::getenv(kFakeGpuDirEnv); dir != nullptr && *dir != '\0') {
      options.processes_file = std::string(dir) + "/" + kFakeGpuProcessesFile;
    }
    auto fake = FakeGpus::Create(flag.substr(kFake.size()), seed, std::move(options));
    if (!fake.ok()) return fake.status();
    return std::unique_ptr<GpuDiscovery>(std::move(*fake));
  }
  return Status::InvalidParameter("--gpus \"" + flag +
                                  "\": expected \"nvml\" or \"fake:<count>x<MiB>[,<count>x<MiB>...]\" "
                                  "(e.g. fake:2x22587)");
}

}  // namespace gpupack::agent
