#!/usr/bin/env bash
# Installs the lumen wheel as a user would: into a fresh venv (no system site-packages: the
# example needs the standard library only), with pip and no index; then runs the example with
# the venv's python from a directory outside the source and build trees, with no PYTHONPATH
# or LD_LIBRARY_PATH, and checks that lumen and liblumen were loaded from the venv.
# Usage: check_wheel.sh PYTHON WHEEL EXAMPLE
set -euo pipefail
python=$1
wheel=$2
example=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
unset PYTHONPATH LD_LIBRARY_PATH PYTHONHOME
"$python" -m venv "$work/venv"
venv_python="$work/venv/bin/python"
"$venv_python" -m pip install --quiet --no-index --no-cache-dir --disable-pip-version-check \
  "$wheel"
"$venv_python" "$example" "$work/example.lumen"

location=$("$venv_python" -c 'import lumen; print(lumen.__file__)')
if [[ "$location" != "$work/venv/"* ]]; then
  echo "lumen was imported from $location, not from the venv" >&2
  exit 1
fi
# The extension's liblumen is the wheel's own copy, next to it in the venv.
library=$("$venv_python" -c 'import lumen.capi, os
for line in open("/proc/self/maps"):
    if "liblumen.so" in line:
        print(os.path.realpath(line.split()[-1])); break')
if [[ "$library" != "$work/venv/"*/lumen/liblumen.so.* ]]; then
  echo "liblumen was loaded from ${library:-nowhere}, not from the installed package" >&2
  exit 1
fi
echo "installed $(basename "$wheel"); lumen and liblumen load from the venv"
