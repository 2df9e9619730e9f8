#!/usr/bin/env bash
# A user's own crate, made as bindings/rust/README.md says, built offline in a temporary
# directory and run as a program of its own (target/debug/app, not `cargo run`) without
# LUMEN_LIB_DIR or LD_LIBRARY_PATH.
#   downstream_crate.sh SOURCE_DIR          the README's example with nothing set: lumen-sys
#                                           builds liblumen from the checkout, statically
#   downstream_crate.sh SOURCE_DIR PREFIX   examples/rust/stream_snapshot.rs against lumen
#                                           installed in PREFIX, found by pkg-config
#                                           (PKG_CONFIG_PATH at build time) and at run time
#                                           through the README's build.rs
# CARGO names the cargo to use (default: the one on PATH).
set -euo pipefail
source=$1
prefix=${2:-}
cargo=${CARGO:-cargo}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
readme="$source/bindings/rust/README.md"

# The first ```$2 block after the README's line "$1".
readme_block() {
  local block
  block=$(awk -v heading="$1" -v fence="\`\`\`$2" '$0 == heading { found = 1 }
    found && !inside && $0 == fence { inside = 1; next }
    inside && /^```/ { exit }
    inside { print }' "$readme")
  if [[ -z "$block" ]]; then
    echo "no $2 block after \"$1\" in $readme" >&2
    exit 1
  fi
  printf '%s\n' "$block"
}

app="$work/app"
mkdir -p "$app/src"
cat >"$app/Cargo.toml" <<EOF
[package]
name = "app"
version = "0.1.0"
edition = "2021"

[dependencies]
lumen = { path = "$source/bindings/rust/lumen" }
EOF
unset LUMEN_LIB_DIR LD_LIBRARY_PATH CARGO_TARGET_DIR
if [[ -z "$prefix" ]]; then
  unset PKG_CONFIG_PATH
  readme_block "## Example" rust >"$app/src/main.rs"
else
  echo "lumen-sys = { path = \"$source/bindings/rust/lumen-sys\" }" >>"$app/Cargo.toml"
  readme_block "## Linking: what is found how" rust >"$app/build.rs"
  cp "$source/examples/rust/stream_snapshot.rs" "$app/src/main.rs"
  export PKG_CONFIG_PATH
  PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name lumen.pc)")
fi
(cd "$app" && "$cargo" build --offline --quiet)
unset PKG_CONFIG_PATH

binary="$app/target/debug/app"
(cd "$work" && "$binary" "$work/app.lumen") | tee "$work/output"
if [[ -z "$prefix" ]] && ! diff -u <(readme_block "## Example" text) "$work/output"; then
  echo "the example's output differs from the README's" >&2
  exit 1
fi
linked=$(ldd "$binary" | awk '$1 ~ /^liblumen\.so/ { print $3 }')
if [[ -n "$prefix" ]]; then
  # The shared library of the prefix, through the rpath.
  if [[ "$linked" != "$prefix"/* ]]; then
    echo "app runs with liblumen from '${linked:-nowhere}', not from $prefix" >&2
    exit 1
  fi
elif ! pkg-config --exists lumen; then
  # Nothing installed: the library was built from the checkout and linked in.
  if [[ -n "$linked" ]]; then
    echo "app needs $linked; liblumen should be linked statically" >&2
    exit 1
  fi
fi
