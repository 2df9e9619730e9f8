#!/usr/bin/env bash
# Installs the build into a temporary prefix and runs each language's example from there,
# with only the settings the README names: PYTHONPATH (for a prefix outside Python's path),
# the jar on the class path, MONO_PATH, and PKG_CONFIG_PATH (for a prefix outside
# pkg-config's). Languages the build skipped are skipped here too.
# Usage: check_installed.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
bindings="$(find "$prefix" -type d -path '*/lib*/lumen' -name lumen | grep -v -- -packages | head -1)"

# A glue library must find liblumen in the prefix (its rpath), never in the build tree.
resolves_in_prefix() {
  if ldd "$1" | grep -q "$build"; then
    echo "$1 links liblumen from the build tree:" >&2
    ldd "$1" >&2
    exit 1
  fi
}

if [[ -d "$build/bindings/python/lumen" ]]; then
  package="$(dirname "$(find "$prefix" -type d -name lumen -path '*-packages/*')")"
  (cd "$work" && env -u LD_LIBRARY_PATH PYTHONPATH="$package" /usr/bin/python3 \
    "$source/examples/python/stream_snapshot.py" "$work/python.lumen")
  resolves_in_prefix "$(echo "$package"/lumen/_capi*.so)"
fi

if [[ -f "$build/bindings/java/lumen.jar" ]]; then
  javac -d "$work/java" -cp "$bindings/lumen.jar" "$source/examples/java/StreamSnapshot.java"
  java -cp "$bindings/lumen.jar:$work/java" StreamSnapshot "$work/java.lumen"
  resolves_in_prefix "$bindings/liblumen_jni.so"
fi

if [[ -f "$build/bindings/csharp/Lumen.dll" ]]; then
  mcs -nologo -r:"$bindings/Lumen.dll" -out:"$work/StreamSnapshot.exe" \
    "$source/examples/csharp/StreamSnapshot.cs"
  MONO_PATH="$bindings" mono "$work/StreamSnapshot.exe" "$work/csharp.lumen"
  resolves_in_prefix "$bindings/liblumen_csharp.so"
fi

if [[ -d "$build/bindings/rust" ]] && command -v cargo >/dev/null; then
  # A user's crate: built against the prefix through pkg-config, run as its own binary.
  "$source/tests/bindings/rust/downstream_crate.sh" "$source" "$prefix"
fi
