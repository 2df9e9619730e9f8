# Cross-compiles lumen for 64-bit Arm Linux with clang 14 (Debian's clang-14), against the
# same GCC cross toolchain's headers, libstdc++ and binutils (g++-aarch64-linux-gnu) and the
# same arm64 multiarch -dev packages as aarch64-linux-gnu.cmake, whose settings it shares.
include(${CMAKE_CURRENT_LIST_DIR}/aarch64-linux-gnu.cmake)
set(CMAKE_C_COMPILER clang-14)
set(CMAKE_CXX_COMPILER clang++-14)
set(CMAKE_C_COMPILER_TARGET aarch64-linux-gnu)
set(CMAKE_CXX_COMPILER_TARGET aarch64-linux-gnu)
