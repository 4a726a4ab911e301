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

function(dspark_precompile_headers target)
  if(NOT DSPARK_PCH)
    return()
  endif()
  set(headers ${DSPARK_PCH_HEADERS} ${ARGN})
  list(TRANSFORM headers PREPEND "$<$<COMPILE_LANGUAGE:CXX>:")
  list(TRANSFORM headers APPEND ">")
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()
