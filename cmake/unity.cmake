# Unity builds (option DSPARK_UNITY, default OFF; `make build` and `make test` turn it on, UNITY=OFF
# turns it off): dspark_unity_build(<target>) compiles the C++
# files of <target> in batches of DSPARK_UNITY_BATCH_SIZE, each batch one translation unit, so the
# headers they share are parsed and their templates instantiated once per batch instead of once
# per file.
# File-local helpers (anonymous namespaces, `static`) of the files of one target must therefore
# have distinct names; docs/build.md has the measurements.
option(DSPARK_UNITY "Compile the C++ files of the CPU targets in batches (unity build)" OFF)
set(DSPARK_UNITY_BATCH_SIZE 8 CACHE STRING "Files per batch of a unity build (DSPARK_UNITY)")

# Builds with the CUDA backend compile file by file: their host files (backend/cuda/*.cpp) have
# not been batched, and nvcc's files dominate those builds anyway.
function(dspark_unity_build target)
  if(NOT DSPARK_UNITY OR DSPARK_WITH_CUDA)
    return()
  endif()
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE BATCH
                                             UNITY_BUILD_BATCH_SIZE ${DSPARK_UNITY_BATCH_SIZE})
endfunction()
