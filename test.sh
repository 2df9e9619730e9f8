#!/usr/bin/env bash
# Runs lumen's tests on a fresh Debian 12 machine: installs what the build needs (only if
# something is missing), configures and builds in ./build, then runs every test with ctest.
set -euo pipefail
cd "$(dirname "$0")"

packages=(cmake g++ make pkg-config libabsl-dev libxxhash-dev catch2 nlohmann-json3-dev
          clang-14 libclang-rt-14-dev)
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" 2>/dev/null | grep '^Status: install ok installed' >/dev/null ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get update
  $sudo env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${packages[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
