#!/usr/bin/env bash
# Regenerates the committed binding sources from capi/include/lumen/lumen.h: SWIG's Python,
# Java and C# wrappers (bindings/swig/generated) and bindgen's Rust declarations
# (bindings/rust/lumen-sys/src/bindings.rs). Needs Debian's swig (4.1) and bindgen (0.60).
#
#   bindings/regenerate.sh            rewrite the committed files
#   bindings/regenerate.sh --check    regenerate into a temporary directory and fail, showing
#                                     the difference, when the committed files are stale
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
header_dir="$root/capi/include"

check=0
if [[ "${1:-}" == "--check" ]]; then check=1; fi
if ((check)); then
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
else
  out="$root/bindings"
fi

swig_out="$out/swig/generated"
rm -rf "$swig_out"
mkdir -p "$swig_out/python" "$swig_out/java/org/lumen/capi" "$swig_out/csharp"
cd "$root/bindings/swig"
swig -python -threads -doxygen -DLUMEN_EXPERIMENTAL -I"$header_dir" -outdir "$swig_out/python" \
  -o "$swig_out/python/capi_wrap.c" lumen.i
swig -java -doxygen -DLUMEN_EXPERIMENTAL -package org.lumen.capi -module Capi -I"$header_dir" \
  -outdir "$swig_out/java/org/lumen/capi" -o "$swig_out/java/capi_wrap.c" lumen.i
swig -csharp -DLUMEN_EXPERIMENTAL -namespace Lumen.CApi -module Capi -dllimport lumen_csharp \
  -I"$header_dir" -outdir "$swig_out/csharp" -o "$swig_out/csharp/capi_wrap.c" lumen.i

rust_out="$out/rust/lumen-sys/src"
mkdir -p "$rust_out"
"$root/bindings/rust/lumen-sys/bindgen.sh" "$header_dir/lumen/lumen.h" "$rust_out/bindings.rs"

if ((check)); then
  status=0
  diff -ru "$root/bindings/swig/generated" "$swig_out" || status=1
  diff -u "$root/bindings/rust/lumen-sys/src/bindings.rs" "$rust_out/bindings.rs" || status=1
  if ((status)); then
    echo "The committed bindings differ from what lumen.h gives: run bindings/regenerate.sh" >&2
  fi
  exit "$status"
fi
