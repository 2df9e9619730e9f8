#!/usr/bin/env bash
# Installs the Lumen NuGet package into a fresh folder as a user does (nuget install), builds
# the example against the installed Lumen.dll, lays the program out as a .NET build does (the
# package's lib/ and runtimes/linux-x64/native/ files copied next to it) and runs it with mono
# with an empty environment.
# Usage: install_nuget.sh PACKAGE_FOLDER EXAMPLE_SOURCE
set -euo pipefail
source=$(cd "$1" && pwd)  # nuget takes a relative folder for a URI
example=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# nuget keeps its settings under HOME: a fresh one, so that no user's settings or cache count.
HOME="$work/home" nuget install Lumen -Source "$source" -OutputDirectory "$work/packages" \
  -NoCache -NonInteractive
package=("$work"/packages/Lumen.*)

app="$work/app"
mkdir "$app"
mcs -nologo -r:"$package/lib/net45/Lumen.dll" -out:"$app/StreamSnapshot.exe" "$example"
cp "$package"/lib/net45/* "$package"/runtimes/linux-x64/native/* "$app/"
mono=$(command -v mono)
(cd "$app" && env -i "$mono" StreamSnapshot.exe "$app/csharp.lumen")

# The glue found liblumen next to itself, through its $ORIGIN rpath.
libraries=$(ldd "$app/liblumen_csharp.so")
if [[ "$libraries" != *"liblumen.so.0 => $app/liblumen.so.0 "* ]]; then
  echo "liblumen_csharp.so does not load liblumen from its own folder:" >&2
  echo "$libraries" >&2
  exit 1
fi
