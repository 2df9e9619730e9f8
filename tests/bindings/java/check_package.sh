#!/usr/bin/env bash
# Installs the package jar as a user would, alone in a fresh directory, and runs a program
# against it with `java -cp lumen-<version>.jar:.`: no environment variable, no library beside
# the jar. A README.md stands for the first ```java block in it (a whole program, run as
# written) and must name the jar as it is built now. Then checks that the libraries extracted
# from the jar were deleted again.
# Usage: check_package.sh JAVA JAVAC PACKAGE_JAR PROGRAM.java|README.md
set -euo pipefail
java=$1
javac=$2
package=$(realpath "$3")
program=$(realpath "$4")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
jar=$(basename "$package")
cp "$package" "$work/"
cd "$work"

if [[ "$program" == *.md ]]; then
  grep -q -F "$jar" "$program" || { echo "$program does not name $jar" >&2; exit 1; }
  awk '/^```java$/ {inside = 1; next} inside && /^```$/ {exit} inside {print}' "$program" \
    > snippet.java
  class=$(sed -n 's/^public class \([A-Za-z0-9_]*\).*/\1/p' snippet.java)
  [[ -n "$class" ]] || { echo "$program: no \`\`\`java block with a public class" >&2; exit 1; }
  mv snippet.java "$class.java"
  program="$work/$class.java"
else
  class=$(basename "$program" .java)
fi

env -i "$javac" -cp "$jar" -d . "$program"
if ls ./*.so* >/dev/null 2>&1; then echo "a library lies beside the jar" >&2; exit 1; fi
env -i "$java" -cp "$jar:." "$class" "$work/first.lumen"

# Once loaded, the extracted copies are gone: nothing is left in the temporary directory.
mkdir "$work/tmp"
env -i "$java" -Djava.io.tmpdir="$work/tmp" -cp "$jar:." "$class" "$work/second.lumen" \
  >/dev/null
if [[ -n "$(ls -A "$work/tmp")" ]]; then
  echo "left in the temporary directory:" $(ls -A "$work/tmp") >&2
  exit 1
fi
