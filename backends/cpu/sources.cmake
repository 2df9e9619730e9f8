# The CPU backend's sources, compiled into lumen_objects (src/CMakeLists.txt).
set(LUMEN_CPU_DIR ${PROJECT_SOURCE_DIR}/backends/cpu)
set(LUMEN_CPU_SOURCES
  ${LUMEN_CPU_DIR}/cpu_backend.cc
  ${LUMEN_CPU_DIR}/held_writes.cc
  ${LUMEN_CPU_DIR}/kernel_dispatch.cc
  ${LUMEN_CPU_DIR}/prepare_inputs.cc
  ${LUMEN_CPU_DIR}/short_conv.cc
)
# The kernels: compiled once per SIMD level (cmake/kernel_levels.cmake), each build in a
# namespace of its own with a table of its entry points (backends/cpu/kernel_targets.h).
set(LUMEN_CPU_KERNEL_SOURCES
  ${LUMEN_CPU_DIR}/recurrent.cc
  ${LUMEN_CPU_DIR}/chunkwise.cc
  ${LUMEN_CPU_DIR}/short_conv_kernel.cc
  ${LUMEN_CPU_DIR}/prepare_head_inputs.cc
  ${LUMEN_CPU_DIR}/kernel_table.cc
)
# The convolution's SiLU loop selects (clamps) in every lane; GCC vectorises selects only when
# floating-point exceptions are not observable, which lumen never makes them. No result
# changes: -fno-trapping-math affects exception flags only. (Each level's copy of the file
# takes the option too.)
set_source_files_properties(${LUMEN_CPU_DIR}/short_conv_kernel.cc PROPERTIES
  COMPILE_OPTIONS "$<$<CXX_COMPILER_ID:GNU,Clang>:-fno-trapping-math>")
