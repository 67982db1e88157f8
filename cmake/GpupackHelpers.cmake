# gpupack_library(NAME SOURCES... [DEPS ...]) adds gpupack_NAME with alias gpupack::NAME; the folder is its
# include root (headers are included as "scheduler/model.h" from the repository root).
function(gpupack_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(gpupack_${name} STATIC ${ARG_SOURCES})
  add_library(gpupack::${name} ALIAS gpupack_${name})
  target_include_directories(gpupack_${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(gpupack_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  gpupack_use_pch(gpupack_${name} gpupack_pch_lib)
endfunction()

# gpupack_use_pch(TARGET HOLDER) compiles TARGET's sources with the precompiled header of HOLDER
# (gpupack_pch_lib or gpupack_pch_test, CMakeLists.txt) when GPUPACK_PCH made it.
function(gpupack_use_pch target holder)
  if(TARGET ${holder})
    target_precompile_headers(${target} REUSE_FROM ${holder})
  endif()
endfunction()

# gpupack_test(NAME SOURCES... DEPS ... [LABELS ...] [PROPERTIES ...]) adds one GoogleTest binary registered with
# ctest, one ctest test per test case; PROPERTIES (pairs) go to every one of them.
function(gpupack_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS;PROPERTIES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  # The test sources only drive the libraries (built with the configuration's optimization, as shipped): -O1
  # compiles them in half the time of -O2 and keeps the inlined helpers readable in a backtrace.
  target_compile_options(${name} PRIVATE -O1)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock Threads::Threads)
  gpupack_use_pch(${name} gpupack_pch_test)
  # An empty LABELS value would vanish on the way to the discovered tests and shift the pairs after it.
  set(properties ${ARG_PROPERTIES})
  if(ARG_LABELS)
    list(PREPEND properties LABELS "${ARG_LABELS}")
  endif()
  if(properties)
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES ${properties})
  else()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60)
  endif()
endfunction()

# gpupack_bench(NAME SOURCES... DEPS ...) adds one Google Benchmark binary (never run by ctest).
function(gpupack_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark Threads::Threads)
endfunction()
