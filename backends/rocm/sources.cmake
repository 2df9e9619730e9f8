# The ROCm backend: the CUDA backend's sources (backends/cuda/sources.cmake) compiled as HIP
# with hipcc, plus what is ROCm's own. Included by src/CMakeLists.txt when LUMEN_ENABLE_HIP is
# on; sets LUMEN_ROCM_OBJECTS (the compiled HIP objects) and LUMEN_ROCM_CXX_SOURCES.
#
# Each source is compiled once, for every target in LUMEN_HIP_ARCHITECTURES together (one
# hipcc call: a host pass and one device pass per target). The objects go straight into the
# libraries: no HIP runtime is linked (hip_runtime_loader.cc loads it at run time), which is
# why this uses hipcc directly rather than CMake's HIP language, which links it.
#
# `-Dcuda=rocm` puts the CUDA backend's code, written in namespace lumen::cuda, into
# lumen::rocm, so one library can hold both backends; the mapping of CUDA's runtime names
# to HIP's is backends/cuda/gpu_compat.cuh.

include(${PROJECT_SOURCE_DIR}/backends/cuda/sources.cmake)
set(LUMEN_ROCM_DIR ${PROJECT_SOURCE_DIR}/backends/rocm)
set(LUMEN_ROCM_HIP_SOURCES ${LUMEN_CUDA_SOURCES} ${LUMEN_ROCM_DIR}/create_rocm_backend.cu)
set(LUMEN_ROCM_CXX_SOURCES ${LUMEN_ROCM_DIR}/hip_runtime_loader.cc)

string(REPLACE ";" "," lumen_hip_targets "${LUMEN_HIP_ARCHITECTURES}")
set(lumen_hip_flags -std=c++17 ${LUMEN_HIP_OPTIMIZATION} -DNDEBUG -fPIC -fvisibility=hidden
    -fvisibility-inlines-hidden -Wall -Wno-unused-result -Dcuda=rocm -DLUMEN_BUILDING
    "-DLUMEN_HIP_TARGETS=\"${lumen_hip_targets}\""
    -I${PROJECT_SOURCE_DIR} -I${PROJECT_SOURCE_DIR}/capi/include)
# Abseil's headers after the system ones: on Debian they are the system's (/usr/include),
# which -I would put ahead of the C++ library's own wrappers.
get_target_property(lumen_absl_includes absl::status INTERFACE_INCLUDE_DIRECTORIES)
foreach(directory ${lumen_absl_includes})
  list(APPEND lumen_hip_flags -idirafter ${directory})
endforeach()
foreach(target ${LUMEN_HIP_ARCHITECTURES})
  list(APPEND lumen_hip_flags --offload-arch=${target})
endforeach()

set(LUMEN_ROCM_OBJECTS "")
foreach(source ${LUMEN_ROCM_HIP_SOURCES})
  file(RELATIVE_PATH name ${PROJECT_SOURCE_DIR} ${source})
  set(object ${PROJECT_BINARY_DIR}/rocm/${name}.o)
  get_filename_component(directory ${object} DIRECTORY)
  file(MAKE_DIRECTORY ${directory})
  add_custom_command(
    OUTPUT ${object}
    COMMAND ${LUMEN_HIPCC} ${lumen_hip_flags} -MD -MF ${object}.d -c ${source} -o ${object}
    DEPENDS ${source}
    DEPFILE ${object}.d
    COMMAND_EXPAND_LISTS
    COMMENT "Compiling ${name} as HIP (${lumen_hip_targets})"
    VERBATIM)
  list(APPEND LUMEN_ROCM_OBJECTS ${object})
endforeach()
add_custom_target(lumen_rocm_objects DEPENDS ${LUMEN_ROCM_OBJECTS})
