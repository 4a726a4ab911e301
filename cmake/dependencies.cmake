# C++ dependencies: Debian packages only (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(LZMA REQUIRED IMPORTED_TARGET liblzma)
# cpp-httplib (dspark serve): Debian builds it as a library; its .pc adds the TLS/zlib/brotli
# defines the library was compiled with (they change the header's class layouts).
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
# OpenBLAS (CBLAS interface); Debian ships the header in /usr/include/<triplet>/openblas-pthread.
# scripts/setup.sh installs it. Without it (e.g. a GPU machine that only runs the CUDA backend) the
# CPU matrix products fall back to dspark's own single-threaded kernel: correct, much slower.
find_library(OPENBLAS_LIB NAMES openblas)
find_path(OPENBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas openblas-pthread
          PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/aarch64-linux-gnu/openblas-pthread)

add_library(dspark_deps INTERFACE)
target_link_libraries(dspark_deps INTERFACE Threads::Threads fmt::fmt nlohmann_json::nlohmann_json
                      CLI11::CLI11 PkgConfig::PCRE2 PkgConfig::LZMA PkgConfig::HTTPLIB)
if(OPENBLAS_LIB AND OPENBLAS_INCLUDE AND EXISTS "${OPENBLAS_LIB}")
  target_include_directories(dspark_deps SYSTEM INTERFACE ${OPENBLAS_INCLUDE})
  target_link_libraries(dspark_deps INTERFACE ${OPENBLAS_LIB})
  target_compile_definitions(dspark_deps INTERFACE DSPARK_HAVE_CBLAS=1)
else()
  message(WARNING "OpenBLAS not found: CPU matrix products use dspark's own, much slower kernel "
                  "(install libopenblas-dev: scripts/setup.sh)")
  target_compile_definitions(dspark_deps INTERFACE DSPARK_HAVE_CBLAS=0)
endif()
