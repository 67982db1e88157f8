// Precompiled for every test binary (CMakeLists.txt, GPUPACK_PCH): the libraries' set and GoogleTest/GoogleMock.
#pragma once

#include "common.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
