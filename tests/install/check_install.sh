#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs consumers the two
# documented ways: CMake's find_package(lumen) (shared and static) and pkg-config.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >/dev/null

cmake -S "$source/tests/install/consumer" -B "$work/consumer" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer_shared"
"$work/consumer/consumer_static"

pc_dir=$(dirname "$(find "$work/prefix" -name lumen.pc)")
flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs lumen)
# shellcheck disable=SC2086
cc "$source/tests/install/consumer/consumer.c" $flags -o "$work/consumer_pc"
LD_LIBRARY_PATH="$(PKG_CONFIG_PATH="$pc_dir" pkg-config --variable=libdir lumen)" \
  "$work/consumer_pc"
