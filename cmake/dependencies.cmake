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
find_library(OPENBLAS_LIB NAMES openblas REQUIRED)
find_path(OPENBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas openblas-pthread
          PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/aarch64-linux-gnu/openblas-pthread
          REQUIRED)

add_library(dspark_deps INTERFACE)
target_include_directories(dspark_deps SYSTEM INTERFACE ${OPENBLAS_INCLUDE})
target_link_libraries(dspark_deps INTERFACE Threads::Threads fmt::fmt nlohmann_json::nlohmann_json
                      CLI11::CLI11 PkgConfig::PCRE2 PkgConfig::LZMA PkgConfig::HTTPLIB
                      ${OPENBLAS_LIB})
