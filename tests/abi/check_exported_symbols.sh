#!/usr/bin/env bash
# Usage: check_exported_symbols.sh LIBRARY
# liblumen.so exports its C API (lumen_*) and nothing of its own C++ internals: a symbol of
# namespace lumen in the dynamic table would be interposed by another copy of lumen loaded in
# the same process (another version, or a build compared with this one), which would then run
# that copy's code on this one's data. Instantiations of the standard library's templates
# (weak, identical in every copy) may appear.
set -euo pipefail
library=$1
defined=$(nm -D --defined-only "$library" | awk '{print $3}')
internal=$(grep -E '^_Z.*5lumen' <<<"$defined" || true)
foreign=$(grep -vE '^(lumen_|_Z)' <<<"$defined" |
          grep -vE '^(_init|_fini|_edata|_end|__bss_start)$' || true)
status=0
if [[ -n "$internal" ]]; then
  echo "FAIL: $library exports lumen's C++ internals:"
  c++filt <<<"$internal"
  status=1
fi
if [[ -n "$foreign" ]]; then
  echo "FAIL: $library exports C symbols outside the lumen_ API:"
  echo "$foreign"
  status=1
fi
[[ $status -eq 0 ]] && echo "OK: $(grep -c '^lumen_' <<<"$defined") lumen_ symbols and no internals"
exit $status
