// The fuzz targets' bodies, one function per target. Each takes one input and returns 0; a broken invariant
// prints what broke to stderr and calls abort(), which libFuzzer records as a crash.
//
// They are compiled into the libFuzzer binaries (tests/fuzz/fuzz_*.cc: thin LLVMFuzzerTestOneInput wrappers,
// clang, GPUPACK_FUZZ=ON) and into the GoogleTest that replays tests/fuzz/regressions/<target>/ and the seed
// corpora with the normal compiler (tests/unit/fuzz_regressions_test.cc), so every crash found stays fixed.
//
// Input formats (the seed corpora in tests/fuzz/corpus/<target>/ show each):
//   query       the bytes are one cluster query expression (memberOf / ListContainerInstances filter).
//   codec       byte 0 picks a codec entry point, the rest is its JSON document or reference string.
//   operations  lines "<Operation> <JSON body>" run through api::Execute (the ECS router), in order.
//   http        one HTTP/1.1 request as on the wire (request line, headers, blank line, body) for the path table
//               (api::FrontDoor).
//   channel     lines of agent channel messages ({"type":"hello"|"state"|"heartbeat"|...}) sent on an agent's
//               WebSocket, mixed with operation lines as in `operations`.
//   sigv4       byte 0 picks a SigV4 entry point (Authorization parser, canonical forms, dates, credentials
//               file, a request as in `http`: verified as is, then signed with SignRequest and verified again).
//   protocol    byte 0 picks the direction (even: ParseAgentMessage, odd: ParseServerMessage), the rest is one
//               channel message; an accepted one must survive Serialize and parse back equal (protocol/messages.h).
//   ecs_model   the bytes are an ECS service model as `gpupack aws-model` reads one (cli/ecs_model.h): refused with
//               a Status or accepted; an accepted one has a plain API version, its install path stays under the
//               models directory, patching it twice adds nothing the second time, and it dumps and parses back.
// In operations and channel input (and in an http body) these placeholders are replaced before parsing:
// @I0..@I9 the container instance ARNs and @T0..@T9 the task ARNs known so far (the fixture's first, then
// those the input's own RegisterContainerInstance/RunTask/StartTask created). Control lines: `!advance` moves
// the clock two hours (so STOPPED tasks expire), `!open N` (re)connects the agent of instance @IN, `!close`
// closes the current agent connection.
//
// operations, http and channel start from the same fixture (Harness in targets.cc, built once per process and
// loaded into a fresh MemoryStore and ControlPlane for every input): cluster "default" with three instances
// (@I0: 2 GPUs of 24576 MiB, @I1: 1 GPU of 81920 MiB, @I2: an agent-channel instance with 1 GPU of 16384 MiB),
// task definitions mps:1 (nvidiaMps 4096 MiB, 25 %), dedicated:1 (one whole GPU) and cpu:1, and tasks @T0 (mps,
// RUNNING), @T1 (mps), @T2 (dedicated) and @T3 (mps, on @I2). After every step every GPU's allocated memory must
// lie in [0, total] (from /metrics); after the input, from the API, total - remaining must equal the nvidiaMps
// memory of the non-STOPPED tasks' containers on that GPU (a GPU of a dedicated task: remaining 0, one holder),
// running + pending must count the instance's non-STOPPED tasks, and a second ControlPlane that loads the store
// must describe the same clusters, instances and tasks (nothing acknowledged lives only in memory).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpupack::fuzz {

int FuzzQuery(const uint8_t* data, size_t size);
int FuzzCodec(const uint8_t* data, size_t size);
int FuzzOperations(const uint8_t* data, size_t size);
int FuzzHttp(const uint8_t* data, size_t size);
int FuzzChannel(const uint8_t* data, size_t size);
int FuzzSigV4(const uint8_t* data, size_t size);
int FuzzProtocol(const uint8_t* data, size_t size);
int FuzzEcsModel(const uint8_t* data, size_t size);

}  // namespace gpupack::fuzz
