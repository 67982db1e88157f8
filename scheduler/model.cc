#include "scheduler/model.h"

namespace gpupack {

const char* GpuModeName(GpuMode mode) {
  switch (mode) {
    case GpuMode::kIdle: return "IDLE";
    case GpuMode::kMps: return "NVIDIA_MPS";
    case GpuMode::kDedicated: return "DEDICATED";
  }
  return "IDLE";
}

}  // namespace gpupack
