// Precompiled for every library and the gpupack binary (CMakeLists.txt, GPUPACK_PCH): the standard headers most
// sources include and nlohmann/json, which every front end and the agent parse with. Only headers from outside
// the project belong here, so that a change to a project header never rebuilds the precompiled header; every
// source still includes what it uses (the build with -DGPUPACK_PCH=OFF must compile).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
