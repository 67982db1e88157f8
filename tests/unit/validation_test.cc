// Tests for scheduler/validation: RegisterTaskDefinition rules (docs/placement.md), RunTask overrides and placement.
//
// Tables of cases built with small builders: Def() is a valid one-container definition's skeleton ("web",
// busybox, memory 512 MiB unless the case says otherwise); Ctr("a").Mps(4096, 50) adds a shared GPU.
// Every case checks the error code and a piece of the message (accepted cases check kOk).
#include "scheduler/validation.h"

#include <gtest/gtest.h>

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "scheduler/host_settings.h"
#include "scheduler/strategies.h"

namespace gpupack {
namespace {

// ---- builders ---------------------------------------------------------------------------------------------

class Ctr {
 public:
  explicit Ctr(std::string name) {
    c_.name = std::move(name);
    c_.image = "public.ecr.aws/docker/library/busybox:latest";
    c_.memory = 512;
  }
  Ctr& Image(std::string image) { c_.image = std::move(image); return *this; }
  Ctr& Cpu(int64_t cpu) { c_.cpu = cpu; return *this; }
  Ctr& Memory(std::optional<int64_t> mib) { c_.memory = mib; return *this; }
  Ctr& Reservation(std::optional<int64_t> mib) { c_.memory_reservation = mib; return *this; }
  Ctr& NoMemory() { c_.memory.reset(); c_.memory_reservation.reset(); return *this; }
  Ctr& Essential(bool essential) { c_.essential = essential; return *this; }
  Ctr& Env(std::string name, std::string value) {
    c_.environment.push_back({std::move(name), std::move(value)});
    return *this;
  }
  // Mps adds {"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": mib, "maxComputePercent": pct}}}.
  Ctr& Mps(MiB mib, std::optional<int> pct = std::nullopt) {
    ResourceRequirement rr;
    rr.type = "GPU";
    rr.has_sharing_strategy = true;
    rr.mps = MpsSharing{mib, pct};
    return Req(rr);
  }
  // Gpu adds {"type": "GPU", "value": value} (dedicated).
  Ctr& Gpu(std::string value) {
    ResourceRequirement rr;
    rr.type = "GPU";
    rr.value = std::move(value);
    return Req(rr);
  }
  Ctr& Req(ResourceRequirement rr) { c_.resource_requirements.push_back(std::move(rr)); return *this; }
  operator ContainerDefinition() const { return c_; }  // NOLINT: builder

 private:
  ContainerDefinition c_;
};

class Def {
 public:
  Def() { td_.family = "gpu-mps-test"; }
  Def& Family(std::string family) { td_.family = std::move(family); return *this; }
  Def& Container(const ContainerDefinition& c) { td_.containers.push_back(c); return *this; }
  Def& Cpu(std::string cpu) { td_.cpu = std::move(cpu); return *this; }
  Def& Memory(std::string memory) { td_.memory = std::move(memory); return *this; }
  Def& Compat(std::string compat) { td_.requires_compatibilities.push_back(std::move(compat)); return *this; }
  Def& NetworkMode(std::string mode) { td_.network_mode = std::move(mode); return *this; }
  Def& Constraint(std::string type, std::string expression = "") {
    td_.placement_constraints.push_back({std::move(type), std::move(expression)});
    return *this;
  }
  operator TaskDefinition() const { return td_; }  // NOLINT: builder

 private:
  TaskDefinition td_;
};

ResourceRequirement Requirement(std::string type, std::optional<std::string> value, bool sharing,
                                std::optional<MpsSharing> mps) {
  ResourceRequirement rr;
  rr.type = std::move(type);
  rr.value = std::move(value);
  rr.has_sharing_strategy = sharing;
  rr.mps = mps;
  return rr;
}

// ---- ValidateTaskDefinition -------------------------------------------------------------------------------

struct TdCase {
  std::string name;
  TaskDefinition td;
  ErrorCode code;
  std::string message;  // a substring of the message; empty for accepted cases
};

std::ostream& operator<<(std::ostream& os, const TdCase& c) { return os << c.name; }

std::vector<TdCase> TaskDefinitionCases() {
  const std::string k256(256, 'a');
  return {
      // --- accepted: the public ECS GPU-sharing test's definitions
      {"EcsMps4096Compute25", Def().Container(Ctr("web").Mps(4096, 25)), ErrorCode::kOk, ""},
      {"EcsMps4096Compute50", Def().Container(Ctr("web").Mps(4096, 50)), ErrorCode::kOk, ""},
      {"EcsMps4096Compute75", Def().Container(Ctr("web").Mps(4096, 75)), ErrorCode::kOk, ""},
      {"EcsMps4096ComputeOmitted", Def().Container(Ctr("web").Mps(4096)), ErrorCode::kOk, ""},
      {"EcsMps20480", Def().Container(Ctr("web").Mps(20480)), ErrorCode::kOk, ""},
      {"EcsDedicatedOne", Def().Container(Ctr("web").Gpu("1")), ErrorCode::kOk, ""},
      // Two shared containers on one GPU: 4000 + 2000 = 6000 MiB.
      {"TwoSharedContainers",
       Def().Container(Ctr("a").Mps(4000, 50)).Container(Ctr("b").Mps(2000, 25)), ErrorCode::kOk, ""},
      // A shared GPU container beside a sidecar without GPU: the "same option" rule counts GPU containers only.
      {"SharedWithCpuSidecar", Def().Container(Ctr("gpu").Mps(4096)).Container(Ctr("log").Essential(false)),
       ErrorCode::kOk, ""},
      {"DedicatedTwoContainers", Def().Container(Ctr("a").Gpu("2")).Container(Ctr("b").Gpu("1")), ErrorCode::kOk,
       ""},
      {"MpsComputeBounds1And100",
       Def().Container(Ctr("a").Mps(256, 1)).Container(Ctr("b").Mps(256, 100)), ErrorCode::kOk, ""},
      // 256 MiB, the documented minimum (a CUDA context must fit), is accepted.
      {"MpsMemoryMinimum", Def().Container(Ctr("web").Mps(256)), ErrorCode::kOk, ""},
      {"TaskLevelMemoryOnly", Def().Memory("2048").Cpu("1024").Container(Ctr("web").NoMemory().Mps(4096)),
       ErrorCode::kOk, ""},
      {"TaskLevelVcpuAndGb", Def().Cpu("1 vCPU").Memory("2 GB").Container(Ctr("web").NoMemory()), ErrorCode::kOk,
       ""},
      {"ReservationOnly", Def().Container(Ctr("web").Memory(std::nullopt).Reservation(256)), ErrorCode::kOk, ""},
      {"ReservationEqualsMemory", Def().Container(Ctr("web").Memory(256).Reservation(256)), ErrorCode::kOk, ""},
      {"MinimumMemory6", Def().Container(Ctr("web").Memory(6)), ErrorCode::kOk, ""},
      {"Ec2AndManagedInstancesWithSharing",
       Def().Compat("EC2").Compat("MANAGED_INSTANCES").Container(Ctr("web").Mps(4096)), ErrorCode::kOk, ""},
      {"FargateWithoutGpu", Def().Compat("FARGATE").Container(Ctr("web")), ErrorCode::kOk, ""},
      {"MemberOfConstraint",
       Def().Constraint("memberOf", "attribute:ecs.instance-type =~ g5.*").Container(Ctr("web").Mps(4096)),
       ErrorCode::kOk, ""},
      {"NameCharsetAndLength255", Def().Family(std::string(255, 'F')).Container(Ctr("A_b-9")), ErrorCode::kOk, ""},
      {"TenContainers",
       Def().Container(Ctr("c0")).Container(Ctr("c1")).Container(Ctr("c2")).Container(Ctr("c3"))
           .Container(Ctr("c4")).Container(Ctr("c5")).Container(Ctr("c6")).Container(Ctr("c7"))
           .Container(Ctr("c8")).Container(Ctr("c9")),
       ErrorCode::kOk, ""},
      {"InferenceAccelerator",
       Def().Container(Ctr("web").Req(Requirement("InferenceAccelerator", "device_1", false, std::nullopt))),
       ErrorCode::kOk, ""},
      // Variables other than the two reserved ones are the container's own business.
      {"OtherCudaVariable", Def().Container(Ctr("web").Mps(4096).Env("CUDA_MPS_LOG_DIRECTORY", "/x")),
       ErrorCode::kOk, ""},

      // --- family and container list
      {"FamilyMissing", Def().Family("").Container(Ctr("web")), ErrorCode::kClient, "'family' is required"},
      {"FamilyBadChar", Def().Family("my.family").Container(Ctr("web")), ErrorCode::kClient,
       "Invalid 'family' setting"},
      {"FamilyTooLong", Def().Family(k256).Container(Ctr("web")), ErrorCode::kClient, "up to 255 letters"},
      {"NoContainers", Def(), ErrorCode::kClient, "At least one container definition is required"},
      {"ElevenContainers",
       Def().Container(Ctr("c0")).Container(Ctr("c1")).Container(Ctr("c2")).Container(Ctr("c3"))
           .Container(Ctr("c4")).Container(Ctr("c5")).Container(Ctr("c6")).Container(Ctr("c7"))
           .Container(Ctr("c8")).Container(Ctr("c9")).Container(Ctr("c10")),
       ErrorCode::kClient, "At most 10 container definitions are allowed, got 11"},
      {"ContainerNameMissing", Def().Container(Ctr("web")).Container(Ctr("")), ErrorCode::kClient,
       "container definition at index 1: 'name' is required"},
      {"ContainerNameBadChar", Def().Container(Ctr("web server")), ErrorCode::kClient,
       "Invalid 'name' setting for container 'web server'"},
      {"ContainerNameDuplicate", Def().Container(Ctr("web")).Container(Ctr("web")), ErrorCode::kClient,
       "Container names must be unique"},
      {"ImageMissing", Def().Container(Ctr("web").Image("")), ErrorCode::kClient,
       "Invalid 'image' setting for container 'web'. 'image' is required"},
      {"ImageTooLong", Def().Container(Ctr("web").Image(k256)), ErrorCode::kClient, "at most 255 are allowed"},
      {"ImageWithSpace", Def().Container(Ctr("web").Image("busybox latest")), ErrorCode::kClient,
       "must not contain spaces"},
      {"NoEssentialContainer", Def().Container(Ctr("web").Essential(false)), ErrorCode::kClient,
       "At least one container must be essential"},

      // --- cpu and memory
      {"TaskCpuMalformed", Def().Cpu("lots").Container(Ctr("web")), ErrorCode::kClient,
       "Invalid 'cpu' setting for task. 'lots'"},
      {"TaskCpuZero", Def().Cpu("0").Container(Ctr("web")), ErrorCode::kClient, "Invalid 'cpu' setting for task"},
      {"TaskMemoryMalformed", Def().Memory("much").Container(Ctr("web")), ErrorCode::kClient,
       "Invalid 'memory' setting for task. 'much'"},
      {"ContainerCpuNegative", Def().Container(Ctr("web").Cpu(-1)), ErrorCode::kClient,
       "Invalid 'cpu' setting for container 'web'"},
      {"ContainerMemoryBelow6", Def().Container(Ctr("web").Memory(4)), ErrorCode::kClient,
       "Invalid 'memory' setting for container 'web'. The memory limit must be at least 6 MiB, got 4"},
      {"ContainerReservationZero", Def().Container(Ctr("web").Reservation(0)), ErrorCode::kClient,
       "Invalid 'memoryReservation' setting for container 'web'"},
      {"ReservationAboveMemory", Def().Container(Ctr("web").Memory(256).Reservation(512)), ErrorCode::kClient,
       "'memoryReservation' (512 MiB) must be less than or equal to 'memory' (256 MiB)"},
      {"NoMemoryAnywhere", Def().Container(Ctr("web")).Container(Ctr("side").NoMemory()), ErrorCode::kClient,
       "Invalid setting for container 'side'. At least one of 'memory' or 'memoryReservation' must be specified."},
      // Container cpu 768 + 512 = 1280 > task cpu 1024.
      {"ContainersCpuExceedTask", Def().Cpu("1024").Container(Ctr("a").Cpu(768)).Container(Ctr("b").Cpu(512)),
       ErrorCode::kClient, "reserve 1280 CPU units in total, more than the task's 1024"},
      {"ContainerMemoryExceedsTask", Def().Memory("1024").Container(Ctr("web").Memory(2048)), ErrorCode::kClient,
       "container's memory limit (2048 MiB) exceeds the task's memory (1024 MiB)"},
      // Reservations 512 (a) + 768 (b, its memory) = 1280 > 1024.
      {"ContainersMemoryExceedTask",
       Def().Memory("1024").Container(Ctr("a").Memory(1024).Reservation(512)).Container(Ctr("b").Memory(768)),
       ErrorCode::kClient, "reserve 1280 MiB in total, more than the task's 1024 MiB"},

      // --- GPU requirements (docs/placement.md)
      {"UnknownRequirementType", Def().Container(Ctr("web").Req(Requirement("TPU", "1", false, std::nullopt))),
       ErrorCode::kClient, "Resource requirement type 'TPU' is not supported"},
      {"LowercaseGpuType", Def().Container(Ctr("web").Req(Requirement("gpu", "1", false, std::nullopt))),
       ErrorCode::kClient, "type 'gpu' is not supported"},
      {"ValueAndSharingStrategy",
       Def().Container(Ctr("web").Req(Requirement("GPU", "1", true, MpsSharing{4096, 50}))), ErrorCode::kClient,
       "either 'value' (dedicated GPUs) or 'sharingStrategy' (a shared GPU), not both"},
      {"NeitherValueNorSharingStrategy",
       Def().Container(Ctr("web").Req(Requirement("GPU", std::nullopt, false, std::nullopt))), ErrorCode::kClient,
       "Invalid 'resourceRequirements' setting for container 'web'. A GPU requirement needs either 'value'"},
      {"SharingStrategyWithoutNvidiaMps",
       Def().Container(Ctr("web").Req(Requirement("GPU", std::nullopt, true, std::nullopt))), ErrorCode::kClient,
       "'sharingStrategy' must contain 'nvidiaMps'"},
      {"SharingStrategyOnInferenceAccelerator",
       Def().Container(Ctr("web").Req(Requirement("InferenceAccelerator", std::nullopt, true, MpsSharing{1024, {}}))),
       ErrorCode::kClient, "'sharingStrategy' is allowed only on a resource requirement of type GPU"},
      {"MpsMemoryMissing", Def().Container(Ctr("web").Mps(0)), ErrorCode::kClient,
       "'sharingStrategy.nvidiaMps.memory' is required and must be an integer >= 256 (MiB of GPU memory), got 0"},
      // 16 is 16 GiB written by mistake: refused with the unit, the minimum and the figure meant.
      {"MpsMemoryGibByMistake", Def().Container(Ctr("web").Mps(16)), ErrorCode::kClient,
       "'sharingStrategy.nvidiaMps.memory' is in MiB and must be at least 256 MiB, enough for a CUDA context; got "
       "16 MiB. For 16 GiB write 16384."},
      {"MpsMemoryJustBelowMinimum", Def().Container(Ctr("web").Mps(255)), ErrorCode::kClient,
       "at least 256 MiB"},
      {"MpsMemoryNegative", Def().Container(Ctr("web").Mps(-5)), ErrorCode::kClient, "got -5"},
      {"MaxComputePercentZero", Def().Container(Ctr("web").Mps(4096, 0)), ErrorCode::kClient,
       "'sharingStrategy.nvidiaMps.maxComputePercent' must be an integer from 1 to 100 (omit it for 100), got 0"},
      {"MaxComputePercent101", Def().Container(Ctr("web").Mps(4096, 101)), ErrorCode::kClient, "got 101"},
      {"DedicatedValueZero", Def().Container(Ctr("web").Gpu("0")), ErrorCode::kClient,
       "number of dedicated GPUs, a whole number from 1 to 1024, got '0'"},
      {"DedicatedValueFraction", Def().Container(Ctr("web").Gpu("0.5")), ErrorCode::kClient,
       "got '0.5'. To share a GPU, use 'sharingStrategy'"},
      {"DedicatedValueNotANumber", Def().Container(Ctr("web").Gpu("one")), ErrorCode::kClient, "got 'one'"},
      {"DedicatedValueSigned", Def().Container(Ctr("web").Gpu("+1")), ErrorCode::kClient, "got '+1'"},
      {"DedicatedValueHuge", Def().Container(Ctr("web").Gpu("99999999999999999999")), ErrorCode::kClient,
       "whole number from 1 to 1024"},
      {"TwoGpuRequirements", Def().Container(Ctr("web").Mps(4096).Mps(2048)), ErrorCode::kClient,
       "At most one requirement of type 'GPU' is allowed per container"},
      {"MixedSharedAndDedicated",
       Def().Container(Ctr("a").Mps(4096)).Container(Ctr("b").Gpu("1")).Container(Ctr("c").Mps(1024)),
       ErrorCode::kClient, "shared ('sharingStrategy') on 'a', 'c', dedicated ('value') on 'b'"},
      {"SharingOnFargate", Def().Compat("FARGATE").Container(Ctr("web").Mps(4096)), ErrorCode::kClient,
       "GPU sharing ('sharingStrategy' on 'web') is not supported with FARGATE"},
      {"SharingOnExternal", Def().Compat("EC2").Compat("EXTERNAL").Container(Ctr("web").Mps(4096)),
       ErrorCode::kClient, "is not supported with EXTERNAL"},
      {"UnknownCompatibility", Def().Compat("LAMBDA").Container(Ctr("web")), ErrorCode::kClient,
       "'LAMBDA' is not one of EC2, FARGATE, EXTERNAL, MANAGED_INSTANCES"},
      {"LowercaseCompatibility", Def().Compat("ec2").Container(Ctr("web")), ErrorCode::kClient,
       "Invalid 'requiresCompatibilities' setting"},
      {"UnknownNetworkMode", Def().NetworkMode("nat").Container(Ctr("web")), ErrorCode::kClient,
       "Invalid 'networkMode' setting for task definition. 'nat'"},

      // --- reserved MPS variables
      {"ReservedMemLimitVariable",
       Def().Container(Ctr("web").Mps(4096).Env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=8192M")), ErrorCode::kClient,
       "Invalid 'environment' setting for container 'web'. CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is reserved: the "
       "gpupack agent sets it"},
      {"ReservedThreadPercentVariable",
       Def().Container(Ctr("web").Env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100")), ErrorCode::kClient,
       "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is reserved"},

      // --- placement constraints in a task definition
      {"DistinctInstanceInTaskDefinition", Def().Constraint("distinctInstance").Container(Ctr("web")),
       ErrorCode::kClient, "accepts only memberOf constraints"},
      {"UnknownConstraintTypeInTaskDefinition", Def().Constraint("sameHost", "x").Container(Ctr("web")),
       ErrorCode::kClient, "Constraint type 'sameHost' is not supported"},
      {"MemberOfWithoutExpression", Def().Constraint("memberOf").Container(Ctr("web")), ErrorCode::kClient,
       "A memberOf constraint requires an 'expression'"},
      {"MemberOfBadExpression", Def().Constraint("memberOf", "attribute:gpu").Container(Ctr("web")),
       ErrorCode::kClient, "Invalid 'placementConstraints' setting for task definition"},
      {"ElevenConstraints",
       Def().Constraint("memberOf", "agentConnected == true").Constraint("memberOf", "agentConnected == true")
           .Constraint("memberOf", "agentConnected == true").Constraint("memberOf", "agentConnected == true")
           .Constraint("memberOf", "agentConnected == true").Constraint("memberOf", "agentConnected == true")
           .Constraint("memberOf", "agentConnected == true").Constraint("memberOf", "agentConnected == true")
           .Constraint("memberOf", "agentConnected == true").Constraint("memberOf", "agentConnected == true")
           .Constraint("memberOf", "agentConnected == true").Container(Ctr("web")),
       ErrorCode::kClient, "At most 10 placement constraints are allowed, got 11"},
  };
}

class TaskDefinitionTest : public ::testing::TestWithParam<TdCase> {};

TEST_P(TaskDefinitionTest, Validates) {
  const TdCase& c = GetParam();
  Status s = ValidateTaskDefinition(c.td);
  EXPECT_EQ(s.code(), c.code) << s.message();
  EXPECT_NE(s.message().find(c.message), std::string::npos)
      << "message: " << s.message() << "\nexpected to contain: " << c.message;
}

INSTANTIATE_TEST_SUITE_P(Table, TaskDefinitionTest, ::testing::ValuesIn(TaskDefinitionCases()),
                         [](const auto& info) { return info.param.name; });

// ---- ValidateOverrides ------------------------------------------------------------------------------------

class Ovr {
 public:
  explicit Ovr(std::string name) { o_.name = std::move(name); }
  Ovr& Cpu(int64_t cpu) { o_.cpu = cpu; return *this; }
  Ovr& Memory(int64_t mib) { o_.memory = mib; return *this; }
  Ovr& Reservation(int64_t mib) { o_.memory_reservation = mib; return *this; }
  Ovr& Env(std::string name, std::string value) {
    o_.environment.push_back({std::move(name), std::move(value)});
    return *this;
  }
  Ovr& Req(ResourceRequirement rr) { o_.resource_requirements.push_back(std::move(rr)); return *this; }
  operator ContainerOverride() const { return o_; }  // NOLINT: builder

 private:
  ContainerOverride o_;
};

class Overrides {
 public:
  Overrides& Container(const ContainerOverride& o) { t_.container_overrides.push_back(o); return *this; }
  Overrides& Cpu(std::string cpu) { t_.cpu = std::move(cpu); return *this; }
  Overrides& Memory(std::string memory) { t_.memory = std::move(memory); return *this; }
  operator TaskOverride() const { return t_; }  // NOLINT: builder

 private:
  TaskOverride t_;
};

struct OverrideCase {
  std::string name;
  TaskDefinition td;
  TaskOverride overrides;
  ErrorCode code;
  std::string message;
};

std::ostream& operator<<(std::ostream& os, const OverrideCase& c) { return os << c.name; }

std::vector<OverrideCase> OverrideCases() {
  // Shared: "web" (4096 MiB, 50 %) with a "log" sidecar; dedicated: "train" with one GPU.
  const TaskDefinition shared = Def().Container(Ctr("web").Memory(1024).Mps(4096, 50)).Container(Ctr("log"));
  const TaskDefinition dedicated = Def().Container(Ctr("train").Gpu("1"));
  return {
      {"NoOverrides", shared, Overrides(), ErrorCode::kOk, ""},
      {"CommandEnvCpuMemory", shared,
       Overrides().Container(Ovr("web").Cpu(512).Memory(2048).Reservation(1024).Env("MODEL", "resnet")),
       ErrorCode::kOk, ""},
      // The agent's values win, so the variables are accepted here (docs/placement.md).
      {"ReservedVariablesAccepted", shared,
       Overrides().Container(Ovr("web")
                                 .Env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=99999M")
                                 .Env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100")),
       ErrorCode::kOk, ""},
      {"TaskCpuMemory", shared, Overrides().Cpu("2048").Memory("4 GB"), ErrorCode::kOk, ""},
      {"DedicatedValueOverride", dedicated,
       Overrides().Container(Ovr("train").Req(Requirement("GPU", "2", false, std::nullopt))), ErrorCode::kOk, ""},
      {"UnknownContainer", shared, Overrides().Container(Ovr("db")), ErrorCode::kClient,
       "'db' is not a container of task definition 'gpu-mps-test'"},
      {"DuplicateContainer", shared, Overrides().Container(Ovr("web")).Container(Ovr("web")), ErrorCode::kClient,
       "is overridden more than once"},
      {"SharingStrategyOverride", shared,
       Overrides().Container(Ovr("web").Req(Requirement("GPU", std::nullopt, true, MpsSharing{8192, 100}))),
       ErrorCode::kClient, "sharingStrategy cannot be overridden"},
      {"EmptySharingStrategyOverride", dedicated,
       Overrides().Container(Ovr("train").Req(Requirement("GPU", std::nullopt, true, std::nullopt))),
       ErrorCode::kClient, "Invalid override for container 'train'. sharingStrategy cannot be overridden"},
      {"DedicatedValueOnSharedDefinition", shared,
       Overrides().Container(Ovr("log").Req(Requirement("GPU", "1", false, std::nullopt))), ErrorCode::kClient,
       "a dedicated GPU 'value' cannot be added by an override"},
      {"BadGpuValueOverride", dedicated,
       Overrides().Container(Ovr("train").Req(Requirement("GPU", "0", false, std::nullopt))), ErrorCode::kClient,
       "needs 'value', the number of dedicated GPUs"},
      {"NegativeCpu", shared, Overrides().Container(Ovr("web").Cpu(-1)), ErrorCode::kClient,
       "'cpu' must be 0 or greater"},
      {"MemoryBelow6", shared, Overrides().Container(Ovr("web").Memory(5)), ErrorCode::kClient,
       "'memory' must be at least 6 MiB, got 5"},
      {"ReservationZero", shared, Overrides().Container(Ovr("web").Reservation(0)), ErrorCode::kClient,
       "'memoryReservation' must be at least 1 MiB, got 0"},
      // The definition's memory (1024) stays; the override's reservation (2048) exceeds it.
      {"ReservationAboveDefinitionMemory", shared, Overrides().Container(Ovr("web").Reservation(2048)),
       ErrorCode::kClient, "'memoryReservation' (2048 MiB) must be less than or equal to 'memory' (1024 MiB)"},
      {"TaskCpuMalformed", shared, Overrides().Cpu("fast"), ErrorCode::kClient, "Invalid 'cpu' override for task"},
      {"TaskMemoryMalformed", shared, Overrides().Memory("-1"), ErrorCode::kClient,
       "Invalid 'memory' override for task"},
  };
}

class OverridesTest : public ::testing::TestWithParam<OverrideCase> {};

TEST_P(OverridesTest, Validates) {
  const OverrideCase& c = GetParam();
  ASSERT_TRUE(ValidateTaskDefinition(c.td).ok()) << "the case's definition itself must be valid";
  Status s = ValidateOverrides(c.td, c.overrides);
  EXPECT_EQ(s.code(), c.code) << s.message();
  EXPECT_NE(s.message().find(c.message), std::string::npos)
      << "message: " << s.message() << "\nexpected to contain: " << c.message;
}

INSTANTIATE_TEST_SUITE_P(Table, OverridesTest, ::testing::ValuesIn(OverrideCases()),
                         [](const auto& info) { return info.param.name; });

// ---- ValidatePlacement ------------------------------------------------------------------------------------

struct PlacementCase {
  std::string name;
  std::vector<PlacementConstraint> constraints;
  std::vector<PlacementStrategy> strategies;
  ErrorCode code;
  std::string message;
};

std::ostream& operator<<(std::ostream& os, const PlacementCase& c) { return os << c.name; }

std::vector<PlacementCase> PlacementCases() {
  const PlacementConstraint distinct{"distinctInstance", ""};
  const PlacementStrategy random{"random", ""};
  return {
      {"Empty", {}, {}, ErrorCode::kOk, ""},
      {"EveryValidKind",
       {distinct, {"memberOf", "attribute:ecs.instance-type =~ g5.*"}},
       {{"binpack", "cpu"}, {"binpack", "memory"}, {"binpack", "gpuMemory"}, {"spread", "attribute:zone"}, random},
       ErrorCode::kOk, ""},
      {"SpreadInstanceIdAndHost", {}, {{"spread", "instanceId"}, {"spread", "host"}}, ErrorCode::kOk, ""},
      {"TenConstraints", std::vector<PlacementConstraint>(10, distinct), {}, ErrorCode::kOk, ""},
      {"ElevenConstraints", std::vector<PlacementConstraint>(11, distinct), {}, ErrorCode::kInvalidParameter,
       "At most 10 placement constraints are allowed, got 11"},
      {"SixStrategies", {}, std::vector<PlacementStrategy>(6, random), ErrorCode::kInvalidParameter,
       "At most 5 placement strategies are allowed, got 6"},
      {"DistinctInstanceWithExpression", {{"distinctInstance", "agentConnected == true"}}, {},
       ErrorCode::kInvalidParameter, "distinctInstance takes no 'expression'"},
      {"MemberOfWithoutExpression", {{"memberOf", ""}}, {}, ErrorCode::kInvalidParameter,
       "memberOf requires an 'expression'"},
      {"MemberOfBadExpression", {{"memberOf", "attribute:gpu"}}, {}, ErrorCode::kInvalidParameter,
       "Invalid placement constraint: "},
      {"ConstraintTypeCaseSensitive", {{"distinctinstance", ""}}, {}, ErrorCode::kInvalidParameter,
       "Invalid placement constraint type 'distinctinstance'"},
      {"BinpackWithoutField", {}, {{"binpack", ""}}, ErrorCode::kInvalidParameter,
       "binpack requires 'field' cpu, memory, gpuMemory or fragmentation, got ''"},
      {"BinpackUnknownField", {}, {{"binpack", "disk"}}, ErrorCode::kInvalidParameter, "got 'disk'"},
      {"SpreadWithoutField", {}, {{"spread", ""}}, ErrorCode::kInvalidParameter,
       "spread requires 'field' instanceId, host or attribute:NAME"},
      {"SpreadEmptyAttributeName", {}, {{"spread", "attribute:"}}, ErrorCode::kInvalidParameter,
       "got 'attribute:'"},
      {"RandomWithField", {}, {{"random", "cpu"}}, ErrorCode::kInvalidParameter, "random takes no 'field'"},
      {"StrategyTypeCaseSensitive", {}, {{"BINPACK", "cpu"}}, ErrorCode::kInvalidParameter,
       "Invalid placement strategy type 'BINPACK'"},
  };
}

class PlacementTest : public ::testing::TestWithParam<PlacementCase> {};

TEST_P(PlacementTest, Validates) {
  const PlacementCase& c = GetParam();
  Status s = ValidatePlacement(c.constraints, c.strategies);
  EXPECT_EQ(s.code(), c.code) << s.message();
  EXPECT_NE(s.message().find(c.message), std::string::npos)
      << "message: " << s.message() << "\nexpected to contain: " << c.message;
}

INSTANTIATE_TEST_SUITE_P(Table, PlacementTest, ::testing::ValuesIn(PlacementCases()),
                         [](const auto& info) { return info.param.name; });

// The strategy refusals word for word. ValidatePlacement composes them from the strategy registry
// (scheduler/strategies.h); clients and the integration bad-input catalogue see this text.
TEST(PlacementStrategyMessages, WordForWord) {
  const std::string binpack = "Invalid placement strategy: binpack requires 'field' cpu, memory, gpuMemory or fragmentation, got ";
  const std::string spread =
      "Invalid placement strategy: spread requires 'field' instanceId, host or attribute:NAME, got ";
  const std::string types = "; valid types are binpack, spread and random.";
  const std::vector<std::pair<PlacementStrategy, std::string>> cases = {
      {{"binpack", "disk"}, binpack + "'disk'."},
      {{"binpack", ""}, binpack + "''."},
      {{"binpack", "CPU"}, binpack + "'CPU'."},  // the Placer's alias, never a client's
      {{"binpack", "MEMORY"}, binpack + "'MEMORY'."},
      {{"binpack", std::string(70, 'a')}, binpack + "'" + std::string(64, 'a') + "...'."},
      {{"spread", ""}, spread + "''."},
      {{"spread", "attribute:"}, spread + "'attribute:'."},
      {{"spread", "instanceid"}, spread + "'instanceid'."},
      {{"random", "cpu"}, "Invalid placement strategy: random takes no 'field', got 'cpu'."},
      {{"random", "x\x01y"}, "Invalid placement strategy: random takes no 'field', got 'x?y'."},
      {{"BINPACK", "cpu"}, "Invalid placement strategy type 'BINPACK'" + types},
      {{"bogus", ""}, "Invalid placement strategy type 'bogus'" + types},
      {{"", ""}, "Invalid placement strategy type ''" + types},
  };
  for (const auto& [strategy, message] : cases) {
    Status s = ValidatePlacement({}, {{"binpack", "cpu"}, strategy});
    EXPECT_EQ(s.code(), ErrorCode::kInvalidParameter) << message;
    EXPECT_EQ(s.message(), message);
  }
}

// Every field of every registry kind is accepted, alone and in a chain of one of each kind; aliases are not, nor
// the planner's baselines (fgd).
TEST(PlacementStrategyMessages, EveryRegistryKindValidates) {
  std::vector<PlacementStrategy> one_of_each;
  for (const StrategyKind& kind : StrategyRegistry()) {
    if (kind.planner_only) {
      EXPECT_FALSE(ValidatePlacement({}, {{std::string(kind.type), ""}}).ok()) << kind.name;
      continue;
    }
    std::vector<std::string> fields(kind.fields.begin(), kind.fields.end());
    if (!kind.field_prefix.empty()) fields.push_back(std::string(kind.field_prefix) + "ecs.availability-zone");
    if (!kind.TakesField()) fields.push_back("");
    for (const std::string& field : fields) {
      Status s = ValidatePlacement({}, {{std::string(kind.type), field}});
      EXPECT_TRUE(s.ok()) << kind.name << " " << field << ": " << s.message();
    }
    for (std::string_view alias : kind.aliases)
      EXPECT_FALSE(ValidatePlacement({}, {{std::string(kind.type), std::string(alias)}}).ok()) << alias;
    if (one_of_each.size() < 5) one_of_each.push_back({std::string(kind.type), fields.front()});
  }
  EXPECT_TRUE(ValidatePlacement({}, one_of_each).ok());
}

// ---- names and reserved variables -------------------------------------------------------------------------

TEST(IsValidNameTest, CharsetAndLength) {
  EXPECT_TRUE(IsValidName("a"));
  EXPECT_TRUE(IsValidName("Gpu_Cluster-01"));
  EXPECT_TRUE(IsValidName(std::string(255, 'x')));
  EXPECT_FALSE(IsValidName(""));
  EXPECT_FALSE(IsValidName(std::string(256, 'x')));
  EXPECT_FALSE(IsValidName("a.b"));
  EXPECT_FALSE(IsValidName("a b"));
  EXPECT_FALSE(IsValidName("a/b"));
  EXPECT_FALSE(IsValidName("caf\xc3\xa9"));  // non-ASCII letters are not allowed
}

TEST(IsReservedMpsVariableTest, ExactNamesOnly) {
  EXPECT_TRUE(IsReservedMpsVariable("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
  EXPECT_TRUE(IsReservedMpsVariable("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
  EXPECT_FALSE(IsReservedMpsVariable("cuda_mps_pinned_device_mem_limit"));
  EXPECT_FALSE(IsReservedMpsVariable("CUDA_MPS_PIPE_DIRECTORY"));
}

// A long or control-character-laden name is cut and masked in the message, never echoed whole.
TEST(ValidationMessageTest, QuotesAreBounded) {
  TaskDefinition td = Def().Family(std::string(300, 'f') + "\n").Container(Ctr("web"));
  Status s = ValidateTaskDefinition(td);
  ASSERT_EQ(s.code(), ErrorCode::kClient);
  EXPECT_LT(s.message().size(), 300u);
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  EXPECT_NE(s.message().find("...'"), std::string::npos);
}

}  // namespace
}  // namespace gpupack

// ---- host settings (scheduler/host_settings.h) -------------------------------------------------------------------

namespace gpupack {
namespace {

TaskDefinition WithExtra(const std::string& container_extra, const std::string& task_extra = "",
                         const std::string& network_mode = "") {
  TaskDefinition td;
  td.family = "f";
  ContainerDefinition c;
  c.name = "main";
  c.image = "busybox";
  c.extra_json = container_extra;
  td.containers = {ContainerDefinition{}, c};
  td.containers[0].name = "side";
  td.extra_json = task_extra;
  td.network_mode = network_mode;
  return td;
}

// Issue 29: a task asking for `user: "65534"` ran as root with every capability; privileged, mounts, namespaces
// and the rest were accepted and ignored. Each is refused by name; its harmless default is accepted.
TEST(HostSettingsTest, EachHostSettingIsRefusedByNameAndItsDefaultIsAccepted) {
  const struct {
    std::string container_extra, task_extra, network_mode, refused;  // refused: "" = accepted
  } cases[] = {
      {R"({"user":"65534"})", "", "", "containerDefinitions[1].user"},
      {R"({"privileged":true})", "", "", "containerDefinitions[1].privileged"},
      {R"({"privileged":false})", "", "", ""},
      {R"({"readonlyRootFilesystem":true})", "", "", "containerDefinitions[1].readonlyRootFilesystem"},
      {R"({"linuxParameters":{"capabilities":{"add":["SYS_ADMIN"]}}})", "", "", "containerDefinitions[1].linuxParameters"},
      {R"({"linuxParameters":{}})", "", "", ""},
      {R"({"mountPoints":[{"sourceVolume":"root","containerPath":"/host"}]})", "", "", "containerDefinitions[1].mountPoints"},
      {R"({"mountPoints":[]})", "", "", ""},
      {R"({"volumesFrom":[{"sourceContainer":"side"}]})", "", "", "containerDefinitions[1].volumesFrom"},
      {R"({"ulimits":[{"name":"nofile","softLimit":1,"hardLimit":1}]})", "", "", "containerDefinitions[1].ulimits"},
      {R"({"dockerSecurityOptions":["apparmor:unconfined"]})", "", "", "containerDefinitions[1].dockerSecurityOptions"},
      {R"({"systemControls":[{"namespace":"net.ipv4.ip_forward","value":"1"}]})", "", "", "containerDefinitions[1].systemControls"},
      {R"({"portMappings":[{"containerPort":80,"hostPort":80}]})", "", "", "containerDefinitions[1].portMappings"},
      {R"({"hostname":"x"})", "", "", "containerDefinitions[1].hostname"},
      {R"({"logConfiguration":{"logDriver":"awslogs"}})", "", "", ""},  // served by the logs API
      {"", R"({"volumes":[{"name":"root","host":{"sourcePath":"/"}}]})", "", "volumes"},
      {"", R"({"pidMode":"host"})", "", "pidMode"},
      {"", R"({"ipcMode":"host"})", "", "ipcMode"},
      {"", R"({"taskRoleArn":"arn:aws:iam::1:role/x"})", "", ""},
      {"", "", "awsvpc", "networkMode"},
      {"", "", "bridge", ""},
      {"", "", "", ""},
  };
  for (const auto& c : cases) {
    const Status s = RefuseHostSettings(WithExtra(c.container_extra, c.task_extra, c.network_mode));
    if (c.refused.empty()) {
      EXPECT_TRUE(s.ok()) << c.container_extra << c.task_extra << c.network_mode << ": " << s.message();
      continue;
    }
    EXPECT_EQ(s.code(), ErrorCode::kClient) << c.refused;
    EXPECT_NE(s.message().find(c.refused + " is not supported"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace gpupack
