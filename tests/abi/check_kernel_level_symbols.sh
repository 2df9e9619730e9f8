#!/usr/bin/env bash
# Usage: check_kernel_level_symbols.sh OBJECT...
# Each object is one SIMD level's build of a kernel source (backends/cpu/kernel_targets.h),
# named <stem>_<level>.cc.o by cmake/kernel_levels.cmake. Every symbol it defines for the
# linker must lie in that level's namespace (lumen::...::<level>::, or a template instantiated
# for one of its types). Anything else, an inline function of a shared header or a standard
# library template that the compiler did not inline, is weak: the linker keeps one copy of it
# for the whole library, and where it keeps this level's, code of every level calls it, and
# the baseline faults on a CPU without this level's instructions.
set -euo pipefail
status=0
checked=0
for object in "$@"; do
  name=$(basename "$object")
  level=${name%.cc.o}
  level=${level%.o}
  level=${level##*_}
  # DW.ref.__gxx_personality_v0: a pointer to the C++ runtime's exception personality routine,
  # data and the same in every object.
  stray=$(nm -g --defined-only -C "$object" | cut -d' ' -f3- | grep -vF "::${level}::" |
          grep -vx 'DW.ref.__gxx_personality_v0' || true)
  if [[ -n "$stray" ]]; then
    echo "FAIL: $object ($level) defines symbols outside namespace ${level}:"
    echo "$stray"
    status=1
  fi
  checked=$((checked + 1))
done
if [[ $checked -eq 0 ]]; then
  echo "FAIL: no objects given"
  exit 1
fi
[[ $status -eq 0 ]] &&
  echo "OK: $checked objects of the wider SIMD levels define nothing outside their namespace"
exit $status
