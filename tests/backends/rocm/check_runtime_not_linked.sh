#!/usr/bin/env bash
# Usage: check_runtime_not_linked.sh LIBRARY TARGET...
# A ROCm-enabled liblumen.so loads without the HIP runtime: it needs no ROCm library and
# neither exports nor imports a HIP symbol (its own stand-ins are hidden). It does carry the
# ROCm backend: a code object for each GPU target.
set -euo pipefail
library=$1
shift
status=0
if readelf -d "$library" | grep NEEDED | grep -E 'amdhip|hsa-runtime|amd_comgr|hsakmt'; then
  echo "FAIL: $library links the HIP runtime"
  status=1
fi
if nm -D "$library" | grep -E ' [A-Za-z] _*hip'; then
  echo "FAIL: $library exports or imports HIP runtime symbols"
  status=1
fi
for target in "$@"; do
  if ! grep -q -a "amdgcn-amd-amdhsa--$target" "$library"; then
    echo "FAIL: $library has no code object for $target"
    status=1
  fi
done
[[ $status -eq 0 ]] && echo "OK: no HIP runtime dependency; code objects for $*"
exit $status
