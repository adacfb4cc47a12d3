# Decides whether the CUDA backends are built, and finds the CUTLASS/CuTe headers they need
# (DESIGN §8): -DCUTLASS_DIR=... first, then the headers in the pip package nvidia-cutlass==4.2.0.0,
# then a download at configure time when the network allows.
set(ATTNKIT_CUDA_ENABLED OFF)
if(NOT ATTNKIT_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(ATTNKIT_CUDA_ENABLED ON)
  elseif(ATTNKIT_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ATTNKIT_WITH_CUDA=ON but no CUDA compiler was found: put nvcc (CUDA >= 12.4) on PATH or "
                        "pass -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc; or configure with -DATTNKIT_WITH_CUDA=OFF")
  else()
    message(STATUS "attnkit: no CUDA compiler found, building the CPU backend only (ATTNKIT_WITH_CUDA=AUTO)")
  endif()
endif()

if(ATTNKIT_CUDA_ENABLED)
  # "90a" is not a CMake arch spelling on every version; translate to explicit gencode flags.
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  # CMake before 3.26 knows no C++20 flag for nvcc and fails at generate time; nvcc >= 12 accepts it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  find_package(CUDAToolkit 12.4 REQUIRED)

  set(ATTNKIT_CUTLASS_INCLUDE "")
  set(ATTNKIT_CUTLASS_SOURCE "")
  if(CUTLASS_DIR)
    if(EXISTS "${CUTLASS_DIR}/include/cute/tensor.hpp")
      set(ATTNKIT_CUTLASS_INCLUDE "${CUTLASS_DIR}/include")
    elseif(EXISTS "${CUTLASS_DIR}/cute/tensor.hpp")
      set(ATTNKIT_CUTLASS_INCLUDE "${CUTLASS_DIR}")
    else()
      message(FATAL_ERROR "CUTLASS_DIR=${CUTLASS_DIR} has no cute/tensor.hpp (looked in it and in its include/): "
                          "point it at a CUTLASS checkout or its include folder")
    endif()
    set(ATTNKIT_CUTLASS_SOURCE "CUTLASS_DIR")
  endif()
  if(NOT ATTNKIT_CUTLASS_INCLUDE)
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      execute_process(
        COMMAND ${Python3_EXECUTABLE} -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
        OUTPUT_VARIABLE _pip_cutlass OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _pip_rc)
      if(_pip_rc EQUAL 0 AND EXISTS "${_pip_cutlass}/cute/tensor.hpp")
        set(ATTNKIT_CUTLASS_INCLUDE "${_pip_cutlass}")
        set(ATTNKIT_CUTLASS_SOURCE "pip package nvidia-cutlass (${Python3_EXECUTABLE})")
      endif()
    endif()
  endif()
  if(NOT ATTNKIT_CUTLASS_INCLUDE)
    include(FetchContent)
    set(FETCHCONTENT_QUIET ON)
    FetchContent_Declare(cutlass URL https://github.com/NVIDIA/cutlass/archive/refs/tags/v4.2.0.tar.gz
                         DOWNLOAD_EXTRACT_TIMESTAMP ON)
    FetchContent_GetProperties(cutlass)
    if(NOT cutlass_POPULATED)
      FetchContent_Populate(cutlass)
    endif()
    if(EXISTS "${cutlass_SOURCE_DIR}/include/cute/tensor.hpp")
      set(ATTNKIT_CUTLASS_INCLUDE "${cutlass_SOURCE_DIR}/include")
      set(ATTNKIT_CUTLASS_SOURCE "downloaded CUTLASS v4.2.0")
    else()
      message(FATAL_ERROR "CUTLASS/CuTe headers not found. Fix one of: pass -DCUTLASS_DIR=/path/to/cutlass; or "
                          "'pip install nvidia-cutlass==4.2.0.0' into the Python CMake finds; or configure with "
                          "-DATTNKIT_WITH_CUDA=OFF for a CPU-only build")
    endif()
  endif()
  message(STATUS "attnkit: CUTLASS headers from ${ATTNKIT_CUTLASS_SOURCE}: ${ATTNKIT_CUTLASS_INCLUDE}")

  set(ATTNKIT_CUDA_GENCODE "")
  foreach(arch IN LISTS ATTNKIT_CUDA_ARCHS)
    list(APPEND ATTNKIT_CUDA_GENCODE "-gencode=arch=compute_${arch},code=sm_${arch}")
  endforeach()

  # -DATTNKIT_CUDA_PTXAS_VERBOSE=ON prints each kernel's registers, stack frame and spills (ptxas -v).
  option(ATTNKIT_CUDA_PTXAS_VERBOSE "Report registers and spills of every CUDA kernel (ptxas -v)" OFF)
  set(ATTNKIT_CUDA_EXTRA_FLAGS "")
  if(ATTNKIT_CUDA_PTXAS_VERBOSE)
    list(APPEND ATTNKIT_CUDA_EXTRA_FLAGS -Xptxas=-v)
  endif()

  function(attnkit_configure_cuda_target target)
    target_include_directories(${target} SYSTEM PRIVATE ${ATTNKIT_CUTLASS_INCLUDE})
    target_link_libraries(${target} PUBLIC CUDA::cudart CUDA::cuda_driver)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:${ATTNKIT_CUDA_GENCODE} --expt-relaxed-constexpr -lineinfo -Xcompiler=-fvisibility=hidden
      ${ATTNKIT_CUDA_EXTRA_FLAGS}>)
    target_compile_definitions(${target} PRIVATE ATTNKIT_WITH_CUDA=1)
  endfunction()
endif()
