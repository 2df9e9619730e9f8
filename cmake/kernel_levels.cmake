# The SIMD levels the CPU kernels are built at beside the baseline (backends/cpu/
# kernel_targets.h): on x86-64, with GCC or clang, AVX2 + FMA (-march=x86-64-v3) and AVX-512
# (-march=x86-64-v4), the psABI's levels. The baseline is the target's own (SSE2 on x86-64,
# NEON on aarch64). The library picks one level per process at run time.
include(CheckCXXCompilerFlag)
option(LUMEN_CPU_SIMD_LEVELS
       "Build the CPU kernels again for the wider SIMD levels of the target (x86-64: AVX2, \
AVX-512), picked at run time; OFF: the baseline only (a shorter build)" ON)
set(LUMEN_KERNEL_LEVELS "")
if(LUMEN_CPU_SIMD_LEVELS AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND
   CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  check_cxx_compiler_flag(-march=x86-64-v4 LUMEN_HAVE_MARCH_X86_64_V4)
  if(LUMEN_HAVE_MARCH_X86_64_V4)
    set(LUMEN_KERNEL_LEVELS avx2 avx512)
    set(LUMEN_KERNEL_FLAGS_avx2 -march=x86-64-v3)
    set(LUMEN_KERNEL_FLAGS_avx512 -march=x86-64-v4)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
      # clang tunes x86-64-v4 for 256-bit vectors and splits the kernels' 512-bit tiles
      # (small_matmul.h, recurrent.cc) into pairs of them; GCC keeps them whole.
      list(APPEND LUMEN_KERNEL_FLAGS_avx512 -mprefer-vector-width=512)
    endif()
  else()
    message(WARNING "${CMAKE_CXX_COMPILER} does not take -march=x86-64-v4: the CPU kernels "
                    "are built at the baseline level only (GCC 11 and clang 12 take it)")
  endif()
endif()

# lumen_kernel_level_sources(<var> <source>...): sets <var> to one copy of each source per
# level in LUMEN_KERNEL_LEVELS (a file in the build tree that includes it), compiled with
# that level's flags, the source's own COMPILE_OPTIONS, and LUMEN_KERNEL_NAMESPACE=<level>.
# The caller adds the copies to a target of the same directory (source properties are
# per directory), beside the sources themselves, which are the baseline.
function(lumen_kernel_level_sources out)
  set(copies "")
  foreach(level IN LISTS LUMEN_KERNEL_LEVELS)
    foreach(source IN LISTS ARGN)
      get_filename_component(path "${source}" ABSOLUTE)
      get_filename_component(stem "${source}" NAME_WE)
      set(copy "${CMAKE_CURRENT_BINARY_DIR}/kernel_levels/${stem}_${level}.cc")
      file(CONFIGURE OUTPUT "${copy}" CONTENT "#include \"${path}\"\n")
      get_source_file_property(own_options "${path}" COMPILE_OPTIONS)
      if(NOT own_options)
        set(own_options "")
      endif()
      set_source_files_properties("${copy}" PROPERTIES
        COMPILE_OPTIONS "${LUMEN_KERNEL_FLAGS_${level}};${own_options}"
        COMPILE_DEFINITIONS "LUMEN_KERNEL_NAMESPACE=${level}")
      list(APPEND copies "${copy}")
    endforeach()
  endforeach()
  set(${out} ${copies} PARENT_SCOPE)
endfunction()
