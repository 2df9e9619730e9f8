#!/usr/bin/env bash
# Prepares a Debian 12 machine and builds lumen in ./build: installs the packages that are
# missing (through sudo when not root), then configures and builds. run.sh and test.sh call
# it; with --tests it also installs what the tests need and builds the bindings.
set -euo pipefail
cd "$(dirname "$0")"

packages=(cmake g++ make pkg-config libabsl-dev libxxhash-dev)
# hiredis: the redis:// session store (the library builds without it, and then says so).
packages+=(libhiredis-dev)
tests=OFF
if [[ "${1:-}" == "--tests" ]]; then
  packages+=(catch2 nlohmann-json3-dev clang-14 libclang-rt-14-dev)
  # A Redis server that the store tests start privately on a loopback port, and
  # redis-benchmark, the anchor of the store benchmark.
  packages+=(redis-server redis-tools)
  # The bindings and their tests (bindings/): Python, Java, C#, Rust, and the drift check's
  # generators (swig, bindgen).
  packages+=(python3-dev python3-pytest python3-numpy default-jdk-headless junit5 mono-devel
             cargo swig bindgen)
  # The bindings' packages, built and installed into a clean place by the tests: a wheel
  # (installed by pip into a venv) and a NuGet package (Debian's nuget, on mono); and PyTorch
  # on the CPU for the Python binding's DLPack tests (tensors in, tensors out).
  packages+=(python3-venv python3-pip nuget python3-torch)
  # The aarch64 build run under qemu-user (tests/cross): the cross compiler and the arm64
  # multiarch libraries lumen links.
  packages+=(g++-aarch64-linux-gnu qemu-user libabsl-dev:arm64 libxxhash-dev:arm64)
  # The ROCm backend, compiled on every run (backends/rocm/): Debian's HIP 5.2 (hipcc brings
  # clang 15, the device libraries and the HIP runtime, which the tests use without a GPU).
  packages+=(hipcc libamdhip64-dev rocm-device-libs)
  tests=ON
fi
# Whether a package is installed for the machine's architecture (or for all), or for the one
# its name gives (name:arch). dpkg -s is ambiguous once a package is installed for two
# architectures, as the aarch64 build's libraries are.
installed() {
  local name="${1%%:*}" arch="${1#*:}"
  [[ "$arch" == "$1" ]] && arch="$(dpkg --print-architecture)"
  dpkg-query -W -f='${Architecture} ${Status}\n' "$name" 2>/dev/null |
    grep -Eq "^($arch|all) install ok installed$"
}
missing=()
for package in "${packages[@]}"; do
  installed "$package" || missing+=("$package")
done
if ((${#missing[@]})); then
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  if [[ " ${missing[*]}" == *":arm64"* ]] &&
     ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo dpkg --add-architecture arm64
  fi
  $sudo apt-get update
  $sudo env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

# The CUDA backend is built wherever nvcc is, also when CUDA's usual place is not on PATH
# (a non-login shell): the library then runs on a GPU where one is present, else on the CPU.
if ! command -v nvcc >/dev/null && [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLUMEN_BUILD_TESTS="$tests" \
  -DLUMEN_BUILD_BINDINGS="$tests" -DLUMEN_BINDINGS_REQUIRED="$tests" -DLUMEN_ENABLE_HIP="$tests"
cmake --build build -j"$(nproc)"
