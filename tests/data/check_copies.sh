#!/usr/bin/env bash
# Checks that every test data folder carried in the repository equals its twin of the same
# name in a shared folder beside the repository, where that twin exists, so the two cannot
# drift. A folder without a twin (a fresh clone) is reported and passes.
#
#   tests/data/check_copies.sh DATA_DIR SHARED_DIR
set -euo pipefail

data="$1"
shared="$2"
status=0
found=0
for copy in "$data"/*/; do
  [ -d "$copy" ] || continue
  found=1
  name="$(basename "$copy")"
  twin="$shared/$name"
  if [ ! -d "$twin" ]; then
    echo "tests/data/$name: no twin at $twin, nothing to compare"
    continue
  fi
  # -r: every file on both sides, byte for byte, and the same file names.
  if diff -r -q "$twin" "$copy"; then
    echo "tests/data/$name: identical to $twin ($(find "$copy" -type f | wc -l) files)"
  else
    echo "tests/data/$name: DIFFERS from $twin (copy it again: cp -r $twin tests/data/)" >&2
    status=1
  fi
done
if [ "$found" -eq 0 ]; then
  echo "no folders under $data" >&2
  status=1
fi
exit "$status"
