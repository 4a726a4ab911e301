# Precompiled headers (option DSPARK_PCH, default OFF): dspark_precompile_headers(<target>
# [headers...]) gives <target> one precompiled header of the standard headers most files include,
# fmt, and the extra headers named (gtest for the test suites, CLI11 for the CLI). C++ only: nvcc
# compiles the .cu files as before. It saves the parsing of those headers in every file (a
# sixth to a fifth of a clean build's compile time, measured); `make test` turns it on for its
# sanitizer build only. It stays off by default and in `make test`'s Release build because a
# precompiled header is force-included into every file: a file that forgets an #include still
# compiles there, so at least one build must compile without it.
option(DSPARK_PCH "Precompile the common standard and third-party headers per target" OFF)

set(DSPARK_PCH_HEADERS
    <algorithm> <cmath> <cstdint> <cstring> <filesystem> <fstream> <functional> <map> <memory>
    <optional> <span> <string> <string_view> <unordered_map> <vector> <fmt/format.h>)

function(dspark_add_pch target)
  set(headers ${DSPARK_PCH_HEADERS} ${ARGN})
  list(TRANSFORM headers PREPEND "$<$<COMPILE_LANGUAGE:CXX>:")
  list(TRANSFORM headers APPEND ">")
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()

function(dspark_precompile_headers target)
  if(DSPARK_PCH)
    dspark_add_pch(${target} ${ARGN})
  endif()
endfunction()

# The test suites (dspark_unit_tests, dspark_cuda_tests) get their precompiled header also without
# DSPARK_PCH (option DSPARK_PCH_TESTS, default ON): the missing-include check matters for the
# library and the CLI, which stay without it; in the suites the header saves the parsing of gtest
# and the standard headers in every test file (docs/build.md).
option(DSPARK_PCH_TESTS "Precompile the common headers of the test suites" ON)

function(dspark_precompile_test_headers target)
  if(DSPARK_PCH OR DSPARK_PCH_TESTS)
    dspark_add_pch(${target} ${ARGN})
  endif()
endfunction()
