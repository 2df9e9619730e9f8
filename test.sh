#!/usr/bin/env bash
# Every test on a fresh Debian 12 machine: sets up and builds with the test dependencies
# (setup.sh --tests), then runs ctest. GPU tests (label `gpu`) need a GPU: run them there with
# `ctest --test-dir build -L gpu`.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh --tests
ctest --test-dir build --output-on-failure -j"$(nproc)" -LE gpu
