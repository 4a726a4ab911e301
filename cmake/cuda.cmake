# Decides DSPARK_WITH_CUDA and provides dspark_configure_cuda_target().
include(CheckLanguage)
set(DSPARK_WITH_CUDA OFF)

# AUTO builds the CUDA backend where it can run: nvcc found and an NVIDIA GPU visible (a device
# node, or nvidia-smi listing one). A machine without a GPU (CI, a login node) gets the CPU build
# and skips about half of the compile time; DSPARK_CUDA=ON builds the backend there anyway.
function(dspark_gpu_visible out)
  file(GLOB _nodes /dev/nvidia[0-9]*)
  if(_nodes)
    set(${out} TRUE PARENT_SCOPE)
    return()
  endif()
  find_program(_smi nvidia-smi)
  if(_smi)
    execute_process(COMMAND ${_smi} -L RESULT_VARIABLE _rc OUTPUT_VARIABLE _gpus ERROR_QUIET
                    TIMEOUT 20)
    if(_rc EQUAL 0 AND _gpus MATCHES "GPU [0-9]")
      set(${out} TRUE PARENT_SCOPE)
      return()
    endif()
  endif()
  set(${out} FALSE PARENT_SCOPE)
endfunction()

if(NOT DSPARK_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(DSPARK_WITH_CUDA ON)
    if(DSPARK_CUDA STREQUAL "AUTO")
      dspark_gpu_visible(_gpu)
      if(NOT _gpu)
        set(DSPARK_WITH_CUDA OFF)
        message(STATUS "dspark: nvcc found but no NVIDIA GPU visible: CPU backend only "
                       "(-DDSPARK_CUDA=ON builds the CUDA backend anyway)")
      endif()
    endif()
  elseif(DSPARK_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DSPARK_CUDA=ON but no CUDA compiler was found")
  endif()
endif()

if(DSPARK_WITH_CUDA)
  # Hopper machine code (wgmma needs sm_90a) plus PTX that other GPUs JIT-compile at load.
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  set(DSPARK_CUDA_GENCODE
      "-gencode=arch=compute_90a,code=sm_90a" "-gencode=arch=compute_80,code=compute_80"
      CACHE STRING "nvcc -gencode flags")
  enable_language(CUDA)
  # CMake 3.25 does not know nvcc 13's C++20 dialect flag: teach it.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
endif()

function(dspark_configure_cuda_target target)
  target_compile_options(${target} PRIVATE
    # fmt 9 (Debian) only compiles under nvcc in C++20 with its constexpr support forced on.
    $<$<COMPILE_LANGUAGE:CUDA>:${DSPARK_CUDA_GENCODE} --expt-relaxed-constexpr -DFMT_USE_CONSTEXPR=1
      -Xcompiler=-fPIC -lineinfo>)
  if(DSPARK_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
  endif()
  set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF
                                             CUDA_RESOLVE_DEVICE_SYMBOLS ON)
  target_link_libraries(${target} PUBLIC CUDA::cudart CUDA::cublasLt CUDA::cublas)
endfunction()
