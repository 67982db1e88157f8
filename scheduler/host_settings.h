// Host settings of a task definition: the fields with which a task asks for something of the host it runs on
// (privileges, a user, devices, mounts, namespaces, limits, network). gpupack's runtimes honour none of them
// beyond what docs/security.md ("Host settings of task definitions") lists, so RegisterTaskDefinition refuses
// each by name rather than accept it and start the task without it. Pure; thread-safe.
#pragma once

#include "base/status.h"
#include "scheduler/model.h"

namespace gpupack {

// RefuseHostSettings: ok when `td` asks for no host setting gpupack does not honour; else ClientException
// naming the first such field by its path (e.g. "containerDefinitions[0].privileged") and saying why. A field
// set to its harmless default (privileged false, an empty list, an empty linuxParameters) is accepted.
Status RefuseHostSettings(const TaskDefinition& td);

}  // namespace gpupack
