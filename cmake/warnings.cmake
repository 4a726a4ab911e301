# Warnings (as errors by default) and the sanitizer build, applied per target.
if(DSPARK_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=address,undefined)
endif()

function(dspark_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wno-unused-parameter
      -Wnon-virtual-dtor -Wformat=2 -Wimplicit-fallthrough>)
  # GCC 12 reports a false -Wrestrict inside libstdc++ for `"literal" + std::string&&` at -O3
  # (GCC bug 105651); the warning stays on for other compilers.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
  endif()
  if(DSPARK_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

# Code whose own speed does not matter (the test suites' files, the benchmarks' wiring and
# measurement loops; the library they call keeps the build's flags) compiles at -O1 in Release
# builds: about 30-40% less compile time than -O3 (tests/unit/chat_template_api_test.cpp: 14.3 s
# against 20.7 s; bench/round_bench.cpp: 13.7 s against 23.6 s). GCC's flow-based warnings depend on
# the optimisation level and give false positives at -O1 inside libstdc++ (GCC 12: -Warray-bounds
# on a std::string copy in chat_template_api_test.cpp), so they are off there; the sanitizer build
# compiles the test files with them on.
set(DSPARK_QUICK_O1_FLAGS -O1 -Wno-array-bounds -Wno-stringop-overflow -Wno-stringop-overread
                          -Wno-maybe-uninitialized)
function(dspark_compile_quickly target)
  target_compile_options(
    ${target} PRIVATE
    "$<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:${DSPARK_QUICK_O1_FLAGS}>")
endfunction()

# The test suites' own files in the sanitizer build: AddressSanitizer only. UBSan's checks cost a
# third of these files' compile time (gtest macros, references, fixtures; tests/unit unity
# batches: 456 -> 301 compiler-seconds without them), and the undefined behaviour that matters
# is the library's, which keeps both sanitizers. What is lost: UBSan in a header's inline function
# where the linker keeps a test file's copy of it; every access stays under ASan.
function(dspark_sanitize_test_files target)
  if(DSPARK_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize=undefined>)
  endif()
endfunction()

# The CPU kernels that do most of the test suites' arithmetic, in the sanitizer build: -O2 instead
# of the build's -Og, and without the precompiled header. At -Og their register tiles (arrays of
# __m256 accumulators under `#pragma GCC unroll`) stay loops over memory, and ASan and UBSan check
# every access: the f32 small-M tiles took a quarter of the sanitizer suite's CPU time. At -O2 the
# tiles are unrolled into registers again; the sanitizers still check every load and store of the
# data. The precompiled header has to go for these files: GCC takes the optimisation level from
# the header it loads (-Og), so -O2 did nothing with it (and crashed GCC 12 on attention.cpp).
# Files with their own compile options leave the unity batches. quant_gemm_x8.cpp stays at -Og:
# at -O2 under the sanitizers it compiles for ten minutes.
function(dspark_optimise_sanitized_kernels)
  if(DSPARK_SANITIZE)
    set_source_files_properties(${ARGN} PROPERTIES COMPILE_OPTIONS -O2 SKIP_PRECOMPILE_HEADERS ON)
  endif()
endfunction()
