// The one source of the targets that hold the precompiled headers (CMakeLists.txt, GPUPACK_PCH).
