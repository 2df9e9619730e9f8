# Cross-compiles lumen for 64-bit Arm Linux (phones, edge boxes) with Debian's
# g++-aarch64-linux-gnu and the arm64 multiarch -dev packages (libabsl-dev:arm64,
# libxxhash-dev:arm64). Programs built with it run here under qemu-user (qemu-aarch64).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# Libraries and packages from the arm64 multiarch directories; header-only packages
# (Catch2, nlohmann-json) from the host's /usr.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# ctest runs the test programs through qemu-user with the arm64 multiarch loader and libraries
# (-L /). Not the cross toolchain's copy in /usr/aarch64-linux-gnu: its libc is another build
# than libc6:arm64, which Abseil's arm64 package pulls in, and mixing the two loaders and libcs
# hangs a program at its first thread.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
