#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: sets up and builds (setup.sh), then runs the
# `lumen` program's default run on the embedded default backend (CPU, or the GPU where one
# is present). Arguments go to the program, e.g. ./run.sh --tokens 20000 --prefill 4096.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
build/tools/lumen/lumen "$@"
